"""Store: this node's rows of each table (numpy), their updater state, and the stripe locks.

Threads and ownership: the Store's arrays are the one thing shared between threads by design
(Lapse's shared-memory fast path): worker threads read and update the rows their node owns
directly, and the pskv-server thread does the same for requests from other nodes. Both go
through `Shard.pull/push/set`, which hold the locks of the stripes the keys touch (stripe =
local row % STRIPES) for the duration of one numba kernel, which runs with the GIL released.
Locks are always taken in increasing stripe order, one shard at a time, so there is no
deadlock. A request of many keys touches every stripe and simply takes them all.
Assumes: `tables` is only added to (under `_lock`), and dict reads are atomic under the GIL.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from . import kernels
from .table import TableSpec

STRIPES = 64  # enough that small requests from a handful of threads rarely collide
_ALL_STRIPES_FROM = 2048  # above this many keys, skip computing the stripe mask: all are touched


class Shard:
    """Rows [start, stop) of one table on this node, with their updater state."""

    def __init__(self, spec: TableSpec, start: int, stop: int) -> None:
        self.spec = spec
        self.start = start
        self.stop = stop
        n = stop - start
        self.data = np.empty((n, spec.dim), dtype=spec.dtype)  # (n, dim) the rows themselves
        for lo in range(0, n, 1 << 16):  # chunks keep the init kernel's working set small
            spec.init.fill(self.data[lo:lo + (1 << 16)], start + lo, spec.name)
        width = spec.updater.state_width(spec.dim)
        self.state = None
        if width:
            self.state = np.empty((n, width), dtype=spec.dtype)  # (n, width) updater state beside the rows
            spec.updater.init_state(self.state)
        self._locks = [threading.Lock() for _ in range(STRIPES)]

    def owns(self, lo: int, hi: int) -> bool:
        return self.start <= lo and hi < self.stop

    def pull(self, keys: np.ndarray, out: np.ndarray, pos: np.ndarray | None = None) -> None:
        """out[i] (or out[pos[i]]) = row keys[i]; keys are global row ids of this shard."""
        with self._locked(keys):
            if pos is None:
                kernels.gather(self.data, keys, self.start, out)
            else:
                kernels.gather_to(self.data, keys, self.start, out, pos)

    def push(self, keys: np.ndarray, updates: np.ndarray) -> None:
        """Apply the updater to rows `keys` with `updates` (n, dim); duplicate keys are summed."""
        idx = keys - self.start if self.start else keys  # (n,) int64 local rows
        with self._locked(keys):
            self.spec.updater.apply(self.data, self.state, idx, updates)

    def set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Overwrite rows `keys` with `values`; for duplicate keys the last one wins."""
        with self._locked(keys):
            kernels.assign(self.data, keys, self.start, values)

    @contextlib.contextmanager
    def _locked(self, keys: np.ndarray):
        if len(keys) >= _ALL_STRIPES_FROM:
            stripes = self._locks
        else:
            mask = np.empty(STRIPES, np.bool_)
            kernels.touched_stripes(keys, self.start, mask)
            stripes = [self._locks[s] for s in np.flatnonzero(mask)]
        for lock in stripes:
            lock.acquire()
        try:
            yield
        finally:
            for lock in stripes:
                lock.release()

    def __repr__(self) -> str:
        return f"<Shard {self.spec.name!r} rows=[{self.start}, {self.stop}) dim={self.spec.dim}>"


class Store:
    """All shards of this node, by table id."""

    def __init__(self) -> None:
        self.shards: dict[int, Shard] = {}
        self._lock = threading.Lock()  # guards adding to shards

    def add(self, spec: TableSpec, start: int, stop: int) -> Shard:
        shard = Shard(spec, start, stop)
        with self._lock:
            self.shards[spec.table_id] = shard
        return shard

    def get(self, table_id: int) -> Shard | None:
        return self.shards.get(table_id)

    def __repr__(self) -> str:
        return f"<Store tables={len(self.shards)}>"
