"""A co-located node's shard, mapped from its shared-memory files (store.shm): this process reads
and updates that node's rows in place, under the shard's stripe spinlocks, instead of sending a
message (issue 31; Lapse's shared-memory access, across the processes of one host).

    neighbors = Neighbors()                      # one per node
    neighbors.open(directory, my_rank)           # after WELCOME (store.shm.host_dir)
    view = neighbors.view(spec, rank)            # None: not on this host, or not declared there yet
    miss = view.pull(keys, out)                  # Shard's data path; `miss`: keys to send as a message

A view serves exactly what the owner's server would: the keys its slot map holds now, with the
owner's updater on the owner's rows and updater state (updater state stays in one place). Keys
it does not hold (moved away, on their way, a range handed on) miss and go as a message, as do
all keys once the owner retired the shard (replaced, closed) or its process died.

Threads and ownership: any thread; `Neighbors` caches views (a race maps a shard twice, harmlessly).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from . import shm
from .shard import Shard
from .spec import TableSpec
from .spin import STRIDE, Held, alive

_LOOK_AGAIN = 1.0  # seconds before looking again for a shard that was not there
_ALIVE_EVERY = 0.2  # seconds between checks that the owner's process lives


class _Gone(Exception):
    """The owner retired this shard or died: every key misses (raised under the locks, which are released)."""


class PeerShard(Shard):
    """Node `rank`'s shard of `spec`, mapped here. Only the data path (pull, push, push_pull, set)."""

    def __init__(self, spec: TableSpec, directory: str, rank: int, prefix: str, block: np.ndarray) -> None:
        self.spec, self.rank, self.disk, self.replicas = spec, rank, None, None
        self._dir, self._prefix = directory, prefix
        self._meta, self._words = shm.split_meta(block)
        self._header = self._meta  # (a peer's view always has the block: typed without None)
        self.start, self.stop = int(self._header[shm.START]), int(self._header[shm.STOP])
        self.width = spec.updater.state_width(spec.dim)
        self.pid = int(self._header[shm.PID])
        self.gone = False
        self._alive_at = 0.0
        self.slot = shm.map_file(self._path("slot"), (spec.rows,), np.int64)
        self._map(int(self._header[shm.GEN]))
        self._check = self._verify
        stripes = len(self._words) // STRIDE
        self._locks = [threading.Lock() for _ in range(stripes)]
        self._all = Held(self._locks, self._words, (1 << stripes) - 1, self._check)
        self._some = {}
        self._seg = None

    def _path(self, what: str) -> str:
        return os.path.join(self._dir, f"{self._prefix}.{what}")

    def _map(self, gen: int) -> None:
        capacity = int(self._header[shm.CAPACITY])
        self.data = shm.map_file(self._path(f"rows.g{gen}"), (capacity, self.spec.dim), self.spec.dtype)
        self.state = None
        if self.width:
            self.state = shm.map_file(self._path(f"state.g{gen}"), (capacity, self.width), self.spec.dtype)
        self._gen = gen

    def _verify(self) -> None:
        """Under the stripe locks: the shard is live, and mapped at its current generation."""
        if self._header[shm.RETIRED] or self.gone:
            raise _Gone
        now = time.monotonic()
        if now > self._alive_at:
            if not alive(self.pid):
                self.gone = True
                raise _Gone
            self._alive_at = now + _ALIVE_EVERY
        gen = int(self._header[shm.GEN])
        if gen != self._gen:  # it grew (store.shard._grow): its new files (it cannot grow while we hold a stripe)
            self._map(gen)

    @property  # type: ignore[misc]  # read-only here: only the owner flips it (Published.static's setter)
    def static(self) -> bool:
        return bool(self._header[shm.STATIC])

    def follow(self) -> bool:
        """store.rowlock, without the locks: map the files of the current generation (again, if the
        owner grew meanwhile: the kernel sees it); False when the shard is gone."""
        try:
            self._verify()
        except _Gone:
            self.gone = True
            return False
        except FileNotFoundError:  # (it grew twice meanwhile: the kernel finds the newer generation)
            pass
        return True

    def pull(self, keys, out, pos=None):
        if not self.follow():
            return np.arange(len(keys))
        try:
            return super().pull(keys, out, pos)
        except _Gone:
            self.gone = True
            return np.arange(len(keys))

    def push(self, keys, updates):
        if not self.follow():
            return np.arange(len(keys))
        try:
            return super().push(keys, updates)
        except _Gone:
            self.gone = True
            return np.arange(len(keys))

    def push_distinct(self, distinct, summed):
        if not self.follow():
            return np.arange(len(distinct))
        try:
            return super().push_distinct(distinct, summed)
        except _Gone:
            self.gone = True
            return np.arange(len(distinct))

    def push_pull(self, keys, updates, out):
        try:
            return super().push_pull(keys, updates, out)
        except _Gone:
            self.gone = True
            return np.arange(len(keys))

    def set(self, keys, values):
        try:
            return super().set(keys, values)
        except _Gone:
            self.gone = True
            return np.arange(len(keys))

    def retire(self) -> None:  # (not ours to retire)
        pass

    def __repr__(self) -> str:
        return f"<PeerShard {self.spec.name!r} of node {self.rank} manages=[{self.start}, {self.stop})>"


class Neighbors:
    """The shards of this node's co-located peers, mapped on first use: (table id, rank) -> view."""

    def __init__(self) -> None:
        self.dir: str | None = None  # None: no shared memory (off, a 1-node cluster, or not welcomed yet)
        self.rank = -1
        self._views: dict[tuple[int, int], PeerShard] = {}
        self._absent: dict[tuple[int, int], float] = {}  # -> when to look again

    def open(self, directory: str, rank: int) -> None:
        self.dir, self.rank = directory, rank

    def view(self, spec: TableSpec, rank: int) -> PeerShard | None:
        """Node `rank`'s shard of `spec` when it lives on this host (mapped), else None."""
        key = (spec.table_id, rank)
        v = self._views.get(key)
        if v is not None and not v.gone:
            return v
        if self.dir is None or rank == self.rank or spec.sparse:
            return None
        now = time.monotonic()
        if self._absent.get(key, 0.0) > now:
            return None
        found = shm.find_meta(self.dir, rank, spec.table_id)
        if found is None or not _fits(shm.split_meta(found[1])[0], spec):
            self._absent[key] = now + _LOOK_AGAIN
            self._views.pop(key, None)
            return None
        v = PeerShard(spec, self.dir, rank, *found)
        self._views[key] = v
        return v

    def all_here(self, spec: TableSpec, nodes: int) -> bool:
        """Every other node of the cluster's `nodes` shares this host and has `spec`'s shard mapped here."""
        return all(r == self.rank or self.view(spec, r) is not None for r in range(nodes))

    def forget(self, rank: int) -> None:
        """Node `rank` left or failed: drop its views (their files may go)."""
        for key in [k for k in self._views if k[1] == rank]:
            self._views.pop(key, None)

    def __repr__(self) -> str:
        return f"<Neighbors dir={self.dir} views={len(self._views)}>"


def _fits(header: np.ndarray, spec: TableSpec) -> bool:
    return (int(header[shm.ROWS]), int(header[shm.DIM]), int(header[shm.WIDTH])) == (
        spec.rows,
        spec.dim,
        spec.updater.state_width(spec.dim),
    )
