"""Store: the rows this node owns of each table, their updater state, and the stripe locks.

A shard keeps a *slot map* over all rows of its table (Lapse's local store): `slot[key]` is the
key's row in `data` when this node owns it, -1 when it does not, and -2 while the key is on its
way here (a localize is in flight; requests for it wait in the server's queue). At start a node
owns the rows it manages, [start, stop); relocation (`extract` / `insert`) moves rows, with
their updater state, between nodes. The manager's record of who owns each of its keys is
`owner`, over all keys: `owner[k] >= 0` for the keys of the ranges this node manages; after it
handed a range to node m (elastic membership: `handed_to`), `-2 - m` for the range's keys, so
whatever still reaches it for them goes on there; -1 elsewhere.

Threads and ownership: the arrays are shared by design (Lapse's shared-memory fast path):
worker threads read and update owned rows directly, and the pskv-server thread does the same
for requests from other nodes. `pull/push/set` hold the locks of the stripes the keys touch
(stripe = key % STRIPES) for one numba kernel (GIL released) and re-check ownership under them,
so a row is never read while it moves. `extract/insert/mark_incoming` change the slot map and
take every stripe, in increasing order, as does growing `data`. `owner` is written only by the
pskv-server thread. Assumes: dict reads are atomic under the GIL.

Shared (issue 31, `shared=` a store.shm.Segments): `slot`, `data` and `state` live in files the
co-located nodes map (store.peer), and each stripe has a spinlock word in shared memory beside
its process-local lock (store.spin.Held takes both), so another process's pulls and pushes of
these rows exclude this process's as its own threads do. `static` and the rows' generation (a
new pair of files each time `data` grows) are in the meta block, read by the other processes
under the stripe locks; `retire()` marks the shard gone and removes its files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from . import rowlock, shm
from .arrivals import INCOMING, Arrivals
from .disk import DiskRows
from .replicas import Replicas
from .sparse import SparseShard
from .spec import TableSpec
from .spin import Held

STRIPES = 16  # a handful of threads rarely collide on 16; taking each lock costs ~0.5 us of Python
_ALL_STRIPES_FROM = 64  # above this many keys nearly every stripe is touched: take all, skip the mask
_MASKS_KEPT = 1024  # stripe masks whose lock lists a shard keeps made (the most common come first)


class Shard(shm.Published):
    """One table on this node: the rows it owns (any keys), and the manager map of [start, stop)."""

    def __init__(
        self,
        spec: TableSpec,
        start: int,
        stop: int,
        rank: int,
        fill: bool = True,
        stripes: int = STRIPES,
        disk: DiskRows | None = None,
        shared: shm.Segments | None = None,
    ) -> None:
        """`fill=False`: leave the rows unset (a checkpoint is about to overwrite them all).
        `stripes=1`: one lock (a copy only pskv-server writes, such as a backup's: server.failover).
        `disk`: the rows and state live in its files, with a budget of resident pages (store.disk).
        `shared`: the rows live in shared memory the node's co-located peers map (store.shm)."""
        self.spec = spec
        self.disk = disk
        self.start = start
        self.stop = stop
        n = stop - start
        self._seg = shared if disk is None and stripes > 1 else None
        self._meta: np.ndarray | None = None  # shared: the meta block's int64 header words
        self._gen = 0  # shared: the generation of the files of data and state (one more per _grow)
        self._check: Callable[[], None] | None = None  # (store.peer: verifies its mapping under the locks)
        if self._seg is not None:
            self._prefix = self._seg.prefix(spec.table_id)
            self.slot = self._seg.create(f"{self._prefix}.slot", (spec.rows,), np.int64)
            self.slot[:] = -1
        else:
            self.slot = np.full(spec.rows, -1, np.int64)  # (rows,) key -> row of data, -1 absent, -2 incoming
        self.slot[start:stop] = np.arange(n)
        self.owner = np.full(spec.rows, -1, np.int32)  # (rows,) manager map: owner of each managed key, else -1
        self.owner[start:stop] = rank
        self.data = self._rows_array("rows", max(n, 1), spec.dim)  # (capacity, dim) the rows
        for lo in range(0, n if fill else 0, 1 << 16):  # chunks keep the init kernel's working set small
            spec.init.fill(self.data[lo : lo + (1 << 16)], start + lo, spec.name)
            self._touched(np.arange(lo, min(lo + (1 << 16), n)))
        self.width = spec.updater.state_width(spec.dim)
        self.state = None
        if self.width:
            self.state = self._rows_array("state", len(self.data), self.width)  # (capacity, width)
            for lo in range(0, len(self.state), 1 << 16):
                spec.updater.init_state(self.state[lo : lo + (1 << 16)])
                self._touched(np.arange(lo, min(lo + (1 << 16), len(self.state))))
        self._static = True  # no key moved in or out yet: slot[k] == k - start (flips under all stripes)
        self._free = np.empty(len(self.data), np.int64)  # (capacity,) a stack of free rows of data: _free[:_n_free]
        self._n_free = 0  # (both under all stripes)
        self._used = n  # rows of data ever handed out
        self.replicas: Replicas | None = None  # hot keys copied on every node (set by the node)
        self.forwards = 0  # keys this node passed on (counted by the server thread)
        self.relocated_in = 0  # keys that moved here
        self._locks = [threading.Lock() for _ in range(stripes)]
        self._words: np.ndarray | None = None  # shared: the spinlock word of each stripe
        if self._seg is not None:
            self._publish(stripes)
        self._all = Held(self._locks, self._words, (1 << stripes) - 1, self._check)
        self._some: dict[int, Held] = {}  # stripe bitmask -> its locks (made once each)
        self.arrivals = Arrivals(self.slot)  # localize requests waiting for incoming keys

    # ---- the data path (any thread) -------------------------------------------------------------
    def pull(self, keys: np.ndarray, out: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """out[i] (or out[pos[i]]) = row keys[i] for owned keys; returns the indices i not owned."""
        if self._words is not None:  # shared: row by row (store.rowlock), unless the batch is large
            miss = rowlock.rows_pull(self, keys, out, pos)
            if miss is not None:
                return miss
        home = self._home(keys)
        if self.disk is not None:
            self._touched(keys - self.start)  # (positions of the rows where they started: a page estimate)
        with self._locked(keys):
            if home and self.static:  # the common case: rows where they started, no slot map
                if pos is None:
                    kernels.gather(self.data, keys, self.start, out)
                else:
                    kernels.gather_to(self.data, keys, self.start, out, pos)
                return kernels.NONE
            slots = np.empty(len(keys), np.int64)
            miss = kernels.resolve(self.slot, keys, slots)
            kernels.gather_slots(self.data, slots, out, kernels.NONE if pos is None else pos, pos is not None)
        return kernels.NONE if not miss else np.flatnonzero(slots < 0)

    def push(self, keys: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """Apply the updater to owned rows; duplicate keys are summed. Returns indices not owned."""
        if self._words is not None:  # shared: row by row for the rules store.rowlock has
            miss = rowlock.rows_push(self, keys, updates)
            if miss is not None:
                return miss
        return self.push_pull(keys, updates, None)

    def push_distinct(self, distinct: np.ndarray, summed: np.ndarray) -> np.ndarray:
        """push of keys without duplicates, each with its updates summed (rowlock.summed_by_key): the
        same result as push of the keys they came from. Returns indices of `distinct` not owned."""
        if self._words is not None:
            miss = rowlock.rows_push_distinct(self, distinct, summed)
            if miss is not None:
                return miss
        return self.push_pull(distinct, summed, None)

    def push_pull(self, keys: np.ndarray, updates: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """push, then (unless `out` is None) out[i] = row keys[i] after it, under the same locks (no
        write in between, no move). Returns the indices not owned (their `out` rows untouched)."""
        home = self._home(keys)
        if self.disk is not None:
            self._touched(keys - self.start)  # (positions of the rows where they started: a page estimate)
        with self._locked(keys):
            if home and self.static:
                rows = keys - self.start if self.start else keys
                self.spec.updater.apply(self.data, self.state, rows, updates)
                if out is not None:
                    kernels.gather(self.data, keys, self.start, out)
                return kernels.NONE
            slots = np.empty(len(keys), np.int64)
            miss = kernels.resolve(self.slot, keys, slots)
            if not miss:
                self.spec.updater.apply(self.data, self.state, slots, updates)
            elif miss < len(keys):
                hit = slots >= 0
                self.spec.updater.apply(self.data, self.state, slots[hit], updates[hit])
            if out is not None:
                kernels.gather_slots(self.data, slots, out, kernels.NONE, False)
        return kernels.NONE if not miss else np.flatnonzero(slots < 0)

    def set(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Overwrite owned rows; for duplicate keys the last one wins. Returns indices not owned."""
        home = self._home(keys)
        if self.disk is not None:
            self._touched(keys - self.start)  # (positions of the rows where they started: a page estimate)
        with self._locked(keys):
            if home and self.static:
                kernels.assign(self.data, keys, self.start, values)
                return kernels.NONE
            slots = np.empty(len(keys), np.int64)
            miss = kernels.resolve(self.slot, keys, slots)
            kernels.assign_slots(self.data, slots, values)
        return kernels.NONE if not miss else np.flatnonzero(slots < 0)

    def _home(self, keys: np.ndarray) -> bool:
        """All keys in the range this node started with (then, while static, all are here)."""
        if not len(keys):
            return True
        lo, hi = kernels.key_range(keys)
        return self.start <= lo and hi < self.stop

    @staticmethod
    def handed_to(node: int) -> int:
        """The `owner` entry of a key whose range this node handed to `node` (and back: the same)."""
        return -2 - node

    def owned(self, keys: np.ndarray) -> np.ndarray:
        """Mask of keys owned here now (no lock: a hint that may be stale at once)."""
        return self.slot[keys] >= 0

    # ---- relocation (pskv-server thread, and localize callers for mark_incoming) ------------------
    def extract(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Remove owned keys (unique) from this node; returns (keys, rows, state) of those removed."""
        with self._locked(None):
            self.static = False
            slots = self.slot[keys]
            have = slots >= 0
            keys, slots = keys[have], slots[have]
            rows = self.data[slots]  # (m, dim) copies
            state = None if self.state is None else self.state[slots]
            self.slot[keys] = -1
            self._free[self._n_free : self._n_free + len(slots)] = slots  # free rows are distinct rows of data: fits
            self._n_free += len(slots)
        return keys, rows, state

    def insert(self, keys: np.ndarray, rows: np.ndarray, state: np.ndarray | None) -> None:
        """Make this node the owner of `keys` (unique) with their rows and updater state."""
        with self._locked(None):
            self.static = False
            slots = self._allocate(len(keys))
            self.data[slots] = rows
            if self.state is not None:
                if state is None:  # a sender without state (cannot happen between equal specs): start fresh
                    state = np.empty((len(keys), self.width), self.spec.dtype)
                    self.spec.updater.init_state(state)
                self.state[slots] = state
            self.slot[keys] = slots

    def adopt(self, lo: int, hi: int, rank: int, fill: bool = True) -> None:
        """Manage and own [lo, hi) as well, with fresh rows (a table declared after the range's first
        manager left the cluster)."""
        keys = np.arange(lo, hi, dtype=np.int64)
        rows = np.empty((hi - lo, self.spec.dim), self.spec.dtype)
        if fill:
            self.spec.init.fill(rows, lo, self.spec.name)
        self.insert(keys, rows, None)
        self.owner[lo:hi] = rank

    def read(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Copies of the rows and updater state of owned `keys` (all must be owned), under every stripe:
        a consistent snapshot of them (server.failover)."""
        with self._locked(None):
            slots = self.slot[keys]
            if (slots < 0).any():
                raise ProtocolError(f"keys {keys[slots < 0][:5].tolist()} of {self.spec.name!r} are not held here")
            return self.data[slots], None if self.state is None else self.state[slots]

    def overwrite(self, keys: np.ndarray, rows: np.ndarray, state: np.ndarray | None) -> None:
        """Replace the rows and updater state of owned `keys` (a backup installing a snapshot)."""
        with self._locked(None):
            slots = self.slot[keys]
            if (slots < 0).any():
                raise ProtocolError(f"keys {keys[slots < 0][:5].tolist()} of {self.spec.name!r} are not held here")
            self.data[slots] = rows
            if self.state is not None and state is not None:
                self.state[slots] = state

    def mark_incoming(self, keys: np.ndarray) -> np.ndarray:
        """Mark absent keys as on their way here; returns the keys that were absent (now incoming)."""
        with self._locked(None):
            absent = keys[self.slot[keys] == -1]
            if len(absent):
                self.static = False
            self.slot[absent] = INCOMING
        return absent

    def unmark_incoming(self, keys: np.ndarray) -> np.ndarray:
        """A localize of `keys` was declined: those still incoming are absent again; returns them."""
        with self._locked(None):
            back = keys[self.slot[keys] == INCOMING]
            self.slot[back] = -1
        return back

    def await_keys(self, keys: np.ndarray, rid: int) -> int:
        """Register request `rid` (distinct `keys`) to hear when they land here; returns how many need
        no wait (store.arrivals)."""
        return self.arrivals.wait(keys, rid)

    def arrived(self) -> dict[int, int]:
        """After insert() or unmark_incoming() (pskv-server): request id -> number of its waited-for keys
        not incoming any more (store.arrivals)."""
        return self.arrivals.arrived()

    def _allocate(self, n: int) -> np.ndarray:
        take = min(n, self._n_free)
        self._n_free -= take
        free = self._free[self._n_free : self._n_free + take]  # (take,) from the top of the stack
        extra = n - take
        if self._used + extra > len(self.data):
            self._grow(self._used + extra)
        slots = np.concatenate([free, np.arange(self._used, self._used + extra)])  # (n,) a copy of free
        self._used += extra
        return slots

    def _grow(self, need: int) -> None:
        capacity = max(need, 2 * len(self.data))  # doubling: amortised O(1) per relocated row
        gen = self._gen + 1  # (shared: new files; peers and row kernels follow the new generation)
        data = self._rows_array("rows", capacity, self.spec.dim, gen)
        if self.disk is None:  # (on disk the file grew in place and keeps the rows)
            data[: self._used] = self.data[: self._used]
        self.data = data
        free = np.empty(capacity, np.int64)
        free[: self._n_free] = self._free[: self._n_free]
        self._free = free
        if self.state is not None:
            state = self._rows_array("state", capacity, self.width, gen)
            if self.disk is None:
                state[: self._used] = self.state[: self._used]
            self.state = state
        self._gen = gen  # (after the arrays: store.rowlock reads the generation first)
        if self._meta is not None:  # (under every stripe: no peer holds a row)
            self._meta[shm.CAPACITY] = capacity
            self._meta[shm.GEN] = gen
            assert self._seg is not None  # (shared: a meta block)
            for what in ("rows", "state"):
                self._seg.remove(f"{self._prefix}.{what}.g{gen - 1}")

    def _rows_array(self, which: str, n: int, width: int, gen: int = 0) -> np.ndarray:
        if self._seg is not None:
            return self._seg.create(f"{self._prefix}.{which}.g{gen}", (n, width), self.spec.dtype)
        if self.disk is None:
            return np.empty((n, width), dtype=self.spec.dtype)
        return self.disk.array(which, (n, width), self.spec.dtype)

    def _touched(self, rows: np.ndarray) -> None:
        if self.disk is not None:
            self.disk.touched(rows)

    def _locked(self, keys: np.ndarray | None) -> Held:
        """The stripe locks of `keys` (all of them for None or many keys), as a context manager."""
        if keys is None or len(keys) >= _ALL_STRIPES_FROM or len(self._locks) == 1:
            return self._all
        bits = kernels.touched_stripes(keys, len(self._locks))
        held = self._some.get(bits)
        if held is None:  # (a race here only makes the same list twice)
            held = Held([lock for s, lock in enumerate(self._locks) if bits >> s & 1], self._words, bits, self._check)
            if len(self._some) < _MASKS_KEPT:  # (2**16 masks kept would be ~15 MB per shard: the soak's RSS crept)
                self._some[bits] = held
        return held

    def __repr__(self) -> str:
        owned = int((self.slot >= 0).sum())
        return f"<Shard {self.spec.name!r} manages=[{self.start}, {self.stop}) owns={owned} dim={self.spec.dim}>"


class Store:
    """All shards of this node, by table id; with `share()`, in-memory dense shards in shared memory."""

    def __init__(self) -> None:
        self.shards: dict[int, Shard | SparseShard] = {}
        self.segments: shm.Segments | None = None  # shared memory with the host's other nodes (store.shm)
        self._lock = threading.Lock()  # guards adding to shards

    def share(self, segments: shm.Segments) -> None:
        """Shards made from now on live in `segments` (the node's files on its host)."""
        self.segments = segments

    def add(
        self, spec: TableSpec, start: int, stop: int, rank: int = 0, fill: bool = True, disk: DiskRows | None = None
    ) -> Shard:
        shard = Shard(spec, start, stop, rank, fill, disk=disk, shared=self.segments)
        with self._lock:
            old = self.shards.get(spec.table_id)
            self.shards[spec.table_id] = shard
        if isinstance(old, Shard):
            old.retire()
        return shard

    def close(self) -> None:
        """The node closes: every shared shard retires and the node's files go."""
        for shard in list(self.shards.values()):
            if isinstance(shard, Shard):
                shard.retire()
        if self.segments is not None:
            self.segments.close()

    def add_sparse(self, spec: TableSpec, rank: int, key_range: tuple[int, int]):
        """A sparse table's shard (store.sparse): the rows of its keys written so far."""
        shard = SparseShard(spec, rank, key_range)
        with self._lock:
            self.shards[spec.table_id] = shard
        return shard

    def get(self, table_id: int) -> Shard | SparseShard | None:
        return self.shards.get(table_id)

    def __repr__(self) -> str:
        return f"<Store tables={len(self.shards)}>"
