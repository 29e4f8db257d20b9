"""SparseShard: the rows of a table whose keys are arbitrary uint64 ids (hashed features), kept in
a hash map, created on first write; memory grows with the keys actually written.

A sparse table (`node.table(name, rows=None, key_space="uint64")`) has no fixed row count: a key
is any uint64 (inside pskv it travels as the int64 with the same bits). Its key space is cut into
one range per node (placement.ranges.SparseRanges); the node that manages a range holds every
key in it: sparse tables do not relocate, replicate or aggregate (node.table says so). A node that
leaves (without backups) hands each range it manages, every key with its row and state, to another
member (`give` there, `insert` here: server.handoff) and forwards what still reaches it (`away`).

A pull of a key never written gives the table's initial value (Zeros or Constant) and creates
nothing; a push or set creates the row (initial value, fresh updater state) and then applies.

The map is open addressing with linear probing over arrays (`_keys`, `_used`, `_slot`), at most
half full; `slot` is the key's row in `data`. Kernels are numba (nogil).

Threads and ownership: worker threads (this node's keys) and pskv-server (other nodes' requests)
call pull/push/set/scan; `_lock` guards the map and the rows for one kernel call each (the GIL is
released inside), and growing.
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from .. import kernels
from ..errors import ConfigError, ProtocolError
from .spec import Constant, TableSpec, Zeros

_MIN_CAPACITY = 1 << 10


@numba.njit(nogil=True, cache=True, inline="always")
def _mix(k):  # pragma: no cover - compiled
    """splitmix64's finalizer: a key's home bucket (keys may be small consecutive ints or hashes)."""
    z = np.uint64(k)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(nogil=True, cache=True)
def _find(tkeys, tused, tslot, keys, slots):  # pragma: no cover - compiled
    """slots[i] = the row of keys[i], or -1 when absent; returns how many are absent."""
    mask = np.uint64(tkeys.shape[0] - 1)
    absent = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        b = _mix(k) & mask
        slots[i] = -1
        while tused[b]:
            if tkeys[b] == k:
                slots[i] = tslot[b]
                break
            b = (b + np.uint64(1)) & mask
        if slots[i] < 0:
            absent += 1
    return absent


@numba.njit(nogil=True, cache=True)
def _insert(tkeys, tused, tslot, keys, slots, used):  # pragma: no cover - compiled
    """Like _find, but absent keys get the next rows from `used` on; returns the new `used`.
    The caller made room (the map stays at most half full)."""
    mask = np.uint64(tkeys.shape[0] - 1)
    for i in range(keys.shape[0]):
        k = keys[i]
        b = _mix(k) & mask
        while tused[b] and tkeys[b] != k:
            b = (b + np.uint64(1)) & mask
        if not tused[b]:
            tused[b] = True
            tkeys[b] = k
            tslot[b] = used
            used += 1
        slots[i] = tslot[b]
    return used


class SparseShard:
    """One sparse table on this node: the rows of the keys of its range that were written."""

    replicas = None  # (a sparse table never replicates; the server and tables read these of any shard)
    static = True  # rows never move between nodes

    def __init__(self, spec: TableSpec, rank: int, key_range: tuple[int, int] = (0, 1 << 64)) -> None:
        if not isinstance(spec.init, (Zeros, Constant)):
            raise ConfigError(
                f"table {spec.name!r}: a sparse table starts every row at one value; "
                f"use init=0.0 or init=c, not {spec.init!r}"
            )
        self.spec = spec
        self.rank = rank
        self.key_range = key_range  # [lo, hi) of the uint64 space this node manages (hi up to 2**64)
        self.intervals = [key_range]  # every [lo, hi) served here (with backups: + ranges promoted here, server.chain)
        self.width = spec.updater.state_width(spec.dim)
        self._initial = 0.0 if isinstance(spec.init, Zeros) else float(spec.init.value)
        self._keys = np.zeros(_MIN_CAPACITY, np.uint64)  # (capacity,) the map, a power of two
        self._used = np.zeros(_MIN_CAPACITY, np.bool_)
        self._slot = np.zeros(_MIN_CAPACITY, np.int64)
        self.data = np.empty((_MIN_CAPACITY // 2, spec.dim), spec.dtype)  # (rows capacity, dim)
        self.state = np.empty((len(self.data), self.width), spec.dtype) if self.width else None
        self.size = 0  # rows created
        self.forwards = self.relocated_in = 0  # forwards: keys of ranges handed on that still came here
        self.gone: list[tuple[np.uint64, np.uint64, int]] = []  # (lo, hi - 1, m): ranges handed to m (`give`)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    # ---- the data path (any thread) -------------------------------------------------------------
    def pull(self, keys: np.ndarray, out: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """out[i] (or out[pos[i]]) = row keys[i]; the initial value for keys never written. Returns the
        indices of keys in ranges handed on (`give`), untouched (so do push, push_pull and set)."""
        if self.gone and len(miss := self._missed(keys)):
            hit = _others(miss, len(keys))
            self.pull(keys[hit], out, hit if pos is None else pos[hit])
            return miss
        ukeys = keys.view(np.uint64)
        slots = np.empty(len(keys), np.int64)
        with self._lock:
            absent = _find(self._keys, self._used, self._slot, ukeys, slots)
            kernels.gather_slots(self.data, slots, out, kernels.NONE if pos is None else pos, pos is not None)
        if absent:
            miss = np.flatnonzero(slots < 0)
            out[miss if pos is None else pos[miss]] = self._initial
        return kernels.NONE

    def push(self, keys: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """Apply the updater (rows created first); duplicate keys are summed."""
        if self.gone and len(miss := self._missed(keys)):
            hit = _others(miss, len(keys))
            self.push(keys[hit], updates[hit])
            return miss
        with self._lock:
            slots = self._rows(keys)  # (first: it may grow data)
            self.spec.updater.apply(self.data, self.state, slots, updates)
        return kernels.NONE

    def push_pull(self, keys: np.ndarray, updates: np.ndarray, out: np.ndarray) -> np.ndarray:
        """push, then the rows after it, in one step (no other write in between)."""
        if self.gone and len(miss := self._missed(keys)):
            hit = _others(miss, len(keys))
            got = np.empty((len(hit), self.spec.dim), self.spec.dtype)  # (h, dim) the rows after the push
            self.push_pull(keys[hit], updates[hit], got)
            out[hit] = got
            return miss
        with self._lock:
            slots = self._rows(keys)
            self.spec.updater.apply(self.data, self.state, slots, updates)
            kernels.gather_slots(self.data, slots, out, kernels.NONE, False)
        return kernels.NONE

    def set(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Overwrite rows (created first); for duplicate keys the last one wins."""
        if self.gone and len(miss := self._missed(keys)):
            hit = _others(miss, len(keys))
            self.set(keys[hit], values[hit])
            return miss
        with self._lock:
            slots = self._rows(keys)  # (first: it may grow data)
            kernels.assign_slots(self.data, slots, values)
        return kernels.NONE

    def scan(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, rows): every written key k with lo <= k < hi (as uint64; hi up to 2**64), sorted, and
        copies of its rows."""
        with self._lock:
            used = self._used
            keys = self._keys[used]
            slots = self._slot[used]
            inside = keys >= np.uint64(lo) if lo else np.ones(len(keys), bool)
            if hi < 1 << 64:
                inside &= keys < np.uint64(hi)
            keys, slots = keys[inside], slots[inside]
            order = np.argsort(keys, kind="stable")
            return keys[order], self.data[slots[order]]

    def snapshot(self, lo: int = 0, hi: int = 1 << 64) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(keys, rows, state): every written key (uint64, sorted; lo <= key < hi) with copies of its
        row and state (a checkpoint, writes held meanwhile; a range's SNAPSHOT down its chain)."""
        with self._lock:
            keys, slots = self._keys[self._used], self._slot[self._used]
            if lo or hi < 1 << 64:
                inside = (keys >= np.uint64(lo)) & (keys < np.uint64(hi)) if hi < 1 << 64 else keys >= np.uint64(lo)
                keys, slots = keys[inside], slots[inside]
            order = np.argsort(keys, kind="stable")
            keys, slots = keys[order], slots[order]
            return keys, self.data[slots], None if self.state is None else self.state[slots]

    def restore(self, keys: np.ndarray, rows: np.ndarray, state: np.ndarray | None) -> None:
        """Rows (and updater state) of uint64 `keys` from a checkpoint: created, then overwritten."""
        with self._lock:
            slots = self._rows(np.ascontiguousarray(keys, np.uint64).view(np.int64))
            self.data[slots] = rows
            if self.state is not None and state is not None:
                self.state[slots] = state

    # ---- a leave without backups (server.handoff) -------------------------------------------------
    def give(self, intervals: list[tuple[int, int, int]]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """Take out every written key of each [lo, hi) of `intervals` (lo, hi, m), with copies of its row
        and state: (int64 keys, rows, state) per interval. From now on those keys are not here: the
        data path returns them as missed and `away` names m (pskv-server alone calls it, once the
        node's own workers are done: node.leave)."""
        with self._lock:
            keys, slots = self._keys[self._used], self._slot[self._used]
            out, taken = [], np.zeros(len(keys), bool)
            for lo, hi, m in intervals:
                inside = (keys >= np.uint64(lo)) & (keys <= np.uint64(hi - 1))
                order = np.argsort(keys[inside], kind="stable")
                s = slots[inside][order]
                out.append(
                    (keys[inside][order].view(np.int64), self.data[s], None if self.state is None else self.state[s])
                )
                taken |= inside
                self.gone.append((np.uint64(lo), np.uint64(hi - 1), int(m)))
            kept, s = keys[~taken], slots[~taken]
            rows, state = self.data[s], None if self.state is None else self.state[s]
            self._keys = np.zeros(_MIN_CAPACITY, np.uint64)  # (the map again, with the kept keys only)
            self._used = np.zeros(_MIN_CAPACITY, np.bool_)
            self._slot = np.zeros(_MIN_CAPACITY, np.int64)
            self.size = 0
            if len(kept):
                s = self._rows(kept.view(np.int64))
                self.data[s] = rows
                if state is not None and self.state is not None:  # (state: a copy of self.state's rows)
                    self.state[s] = state
        return out

    def insert(self, keys: np.ndarray, rows: np.ndarray, state: np.ndarray | None) -> None:
        """A leaving node's rows (and updater state) of int64 `keys` (HANDOFF): created here.
        ProtocolError if one is here already (it would be written twice)."""
        with self._lock:
            slots = np.empty(len(keys), np.int64)
            if len(keys) - _find(self._keys, self._used, self._slot, keys.view(np.uint64), slots):
                raise ProtocolError(
                    f"table {self.spec.name!r}: node {self.rank} was handed keys "
                    f"{keys[slots >= 0][:5].view(np.uint64).tolist()} it holds already"
                )
            slots = self._rows(keys)
            self.data[slots] = rows
            if self.state is not None and state is not None:
                self.state[slots] = state

    def away(self, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the node each key's range was handed to (`give`), -1 for keys held here."""
        ukeys, to = keys.view(np.uint64), np.full(len(keys), -1, np.int64)
        for lo, last, m in self.gone:
            to[(ukeys >= lo) & (ukeys <= last)] = m
        return to

    def _missed(self, keys: np.ndarray) -> np.ndarray:
        return np.flatnonzero(self.away(keys) >= 0)

    def nbytes(self) -> int:
        """Memory held by the map and the rows."""
        state = 0 if self.state is None else self.state.nbytes
        return self._keys.nbytes + self._used.nbytes + self._slot.nbytes + self.data.nbytes + state

    # ---- inside (under _lock) -------------------------------------------------------------------
    def _rows(self, keys: np.ndarray) -> np.ndarray:
        """The rows of `keys`, created (initial value, fresh state) where absent."""
        ukeys = keys.view(np.uint64)
        if 2 * (self.size + len(keys)) > len(self._keys):
            self._rehash(2 * (self.size + len(keys)))
        slots = np.empty(len(keys), np.int64)
        used = _insert(self._keys, self._used, self._slot, ukeys, slots, self.size)
        if used > len(self.data):
            self._grow(used)
        if used > self.size:
            self.data[self.size : used] = self._initial
            if self.state is not None:
                self.spec.updater.init_state(self.state[self.size : used])
            self.size = used
        return slots

    def _rehash(self, need: int) -> None:
        capacity = len(self._keys)
        while capacity < need:
            capacity *= 2
        old = self._used
        keys, slots = self._keys[old], self._slot[old]
        self._keys = np.zeros(capacity, np.uint64)
        self._used = np.zeros(capacity, np.bool_)
        self._slot = np.zeros(capacity, np.int64)
        _place(self._keys, self._used, self._slot, keys, slots)

    def _grow(self, need: int) -> None:
        capacity = max(need, 2 * len(self.data))
        data = np.empty((capacity, self.spec.dim), self.spec.dtype)
        data[: self.size] = self.data[: self.size]
        self.data = data
        if self.state is not None:
            state = np.empty((capacity, self.width), self.spec.dtype)
            state[: self.size] = self.state[: self.size]
            self.state = state

    def __repr__(self) -> str:
        return f"<SparseShard {self.spec.name!r} node={self.rank} keys={self.size} dim={self.spec.dim}>"


def _others(miss: np.ndarray, n: int) -> np.ndarray:
    """(n - len(miss),) the indices 0..n-1 not in `miss`."""
    hit = np.ones(n, bool)
    hit[miss] = False
    return np.flatnonzero(hit)


@numba.njit(nogil=True, cache=True)
def _place(tkeys, tused, tslot, keys, slots):  # pragma: no cover - compiled
    """Put distinct `keys`, absent from the map, in it with their rows `slots` (a rehash)."""
    mask = np.uint64(tkeys.shape[0] - 1)
    for i in range(keys.shape[0]):
        k = keys[i]
        b = _mix(k) & mask
        while tused[b]:
            b = (b + np.uint64(1)) & mask
        tused[b] = True
        tkeys[b] = k
        tslot[b] = slots[i]
