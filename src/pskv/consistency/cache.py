"""RowCache: a node's copies of rows owned elsewhere, tagged with their freshness (see consistency.models)."""

from __future__ import annotations

import threading

import numpy as np

from ..updaters.rule_kernels import scatter_add


class RowCache:
    """A node's bounded cache of rows it does not own, each tagged with the global clock it is fresh to.

    `fresh[slot] = g` means the copy includes every update stamped < g (it was fetched after
    the global clock reached g) and every later push made through this node.

    Read-my-writes under threads: a push writes the cache and enters the PushBuffer as one step
    under `ordering`, and a pull reads `sequence()` (under `ordering`) before it flushes the buffer.
    So a push written before that point is in the flush the pull waits for, and one written after
    it marks its keys, whose fetched rows `insert` then skips. A set `hold`s its keys (no copy is
    kept) until the owner applied it, and `release` marks them again for fetches that overlapped."""

    def __init__(self, rows: int, dim: int, dtype, capacity: int, *, additive: bool) -> None:
        self.capacity = int(capacity)
        self._additive = additive  # add: a push adds to the copy; other updaters: the copy is dropped
        self._slot = np.full(rows, -1, np.int64)  # (rows,) key -> cache slot, -1 absent
        self._key = np.full(self.capacity, -1, np.int64)  # (capacity,) slot -> key
        self._fresh = np.zeros(self.capacity, np.int64)  # (capacity,) global clock the copy is fresh to
        self._values = np.empty((self.capacity, dim), dtype)  # (capacity, dim) the copies
        self._touched = np.zeros(rows, np.int64)  # (rows,) write sequence of the last push through here
        self._held = np.zeros(rows, np.int64)  # (rows,) sets in flight per key: no copy is kept meanwhile
        self._seq = 0
        self._lock = threading.Lock()  # guards all arrays above
        self.ordering = threading.Lock()  # held around write + buffer add, and by sequence(); taken before _lock
        self.hits = self.misses = self.evictions = 0

    def lookup(self, keys: np.ndarray, needed: int, out: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """Copy rows fresh to >= needed into out (at pos); return the indices into keys that missed."""
        with self._lock:
            slots = self._slot[keys]
            hit = slots >= 0
            hit[hit] = self._fresh[slots[hit]] >= needed
            idx = np.flatnonzero(hit)
            if len(idx):
                rows = self._values[slots[idx]]  # (h, dim) a copy
                if pos is None:
                    out[idx] = rows
                else:
                    out[pos[idx]] = rows
        self.hits += len(idx)
        self.misses += len(keys) - len(idx)
        return np.flatnonzero(~hit)

    def sequence(self) -> int:
        with self.ordering:
            return self._seq

    def hold(self, keys: np.ndarray) -> None:
        """A set of `keys` is on its way: drop their copies and keep none until release()."""
        with self._lock:
            np.add.at(self._held, keys, 1)
        self.write(keys, None)

    def release(self, keys: np.ndarray) -> None:
        """The set was applied (or failed): copies may be kept again, from fetches that start now."""
        with self._lock:
            np.add.at(self._held, keys, -1)
        self.write(keys, None)

    def insert(self, keys: np.ndarray, rows: np.ndarray, fresh: int, since: int) -> None:
        """Keep copies of `rows` (fetched after the global clock reached `fresh`); keys pushed
        through this node after write sequence `since` are skipped (their reply predates the push)."""
        if not self.capacity or not len(keys):
            return
        with self._lock:
            keep = (self._touched[keys] <= since) & (self._held[keys] == 0)
            keys, rows = keys[keep], rows[keep]
            keys, first = np.unique(keys, return_index=True)
            rows = rows[first]
            if len(keys) > self.capacity:
                keys, rows = keys[: self.capacity], rows[: self.capacity]
            slots = self._slot[keys]
            new = slots < 0
            n_new = int(new.sum())
            if n_new:  # never evict a slot this insert refreshes: it would serve two keys
                slots[new] = self._free_slots(n_new, protect=slots[~new])
                self._slot[keys[new]] = slots[new]
                self._key[slots[new]] = keys[new]
            self._values[slots] = rows
            self._fresh[slots] = fresh

    def write(self, keys: np.ndarray, updates: np.ndarray | None) -> None:
        """A push through this node: add it to the copies (add updater) or drop them (others, and
        `updates=None`: a set)."""
        with self._lock:
            self._seq += 1
            self._touched[keys] = self._seq
            slots = self._slot[keys]
            at = np.flatnonzero(slots >= 0)
            if not len(at):
                return
            if self._additive and updates is not None:
                scatter_add(
                    self._values,
                    slots[at],
                    np.ascontiguousarray(updates[at], self._values.dtype),
                    self._values.dtype.type(1),
                )
            else:
                self._drop(slots[at])

    def clear(self) -> None:
        with self._lock:
            self._drop(np.flatnonzero(self._key >= 0))

    def __len__(self) -> int:
        return int((self._key >= 0).sum())

    def _free_slots(self, n: int, protect: np.ndarray) -> np.ndarray:
        """n free slots, evicting the stalest copies (never those in `protect`) if needed."""
        free = np.flatnonzero(self._key < 0)
        if len(free) < n:  # evict the stalest copies
            used = np.flatnonzero(self._key >= 0)
            used = used[~np.isin(used, protect)]
            victims = used[np.argsort(self._fresh[used], kind="stable")[: n - len(free)]]
            self._drop(victims)
            self.evictions += len(victims)
            free = np.flatnonzero(self._key < 0)
        return free[:n]

    def _drop(self, slots: np.ndarray) -> None:
        slots = np.unique(slots)
        self._slot[self._key[slots]] = -1
        self._key[slots] = -1

    def __repr__(self) -> str:
        return f"<RowCache {len(self)}/{self.capacity} rows hits={self.hits} misses={self.misses}>"
