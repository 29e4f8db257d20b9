"""SparseTable: a worker's handle on a sparse table (keys are any uint64 ids; store.sparse).

The same calls as `Table` (pull, push, set, push_pull, pull_range, push_range), routed by key
range only: each key lives at the node that manages its range of the uint64 space
(placement.ranges.SparseRanges), so a request is one message per node holding some of its keys
and the local part is served from this node's memory. Pushes and sets are remembered for the
worker's clock (`worker.clock()` / `worker.wait_clock()`), which is how an app bounds delay on
these asynchronous tables (the lr app's delayed block proximal gradient).
"""

from __future__ import annotations

import numpy as np

from ..errors import TableError
from ..net.future import Future
from ..net.wire import ROWS, Kind
from ..placement import route
from .request import Request
from .table import Table


class SparseTable(Table):
    """A worker's handle on a key_space="uint64" table. Keys: uint64 (or non-negative int) arrays."""

    def push(self, keys, updates, *, copy: bool = True, filters=None) -> Future:
        return self._update(super().push(keys, updates, copy=copy, filters=filters))

    def set(self, keys, values, *, copy: bool = True) -> Future:
        return self._update(super().set(keys, values, copy=copy))

    def push_pull(self, keys, updates, *, out: np.ndarray | None = None, filters=None) -> Future:
        return self._update(super().push_pull(keys, updates, out=out, filters=filters))

    def local_range(self) -> tuple[int, int]:
        """[lo, hi) of the uint64 key space this node holds (hi up to 2**64): pull_range over it is
        served from this node's memory, no message."""
        return self._state.ranges.range_bounds(self._ctx.rank)

    def pull_range(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, rows): every key in [lo, hi) written so far (uint64, sorted) and its row. Blocks.
        `pull_range(0, 2**64)` is the whole table (export a model with it)."""
        lo, hi = self._bounds(lo, hi, "pull_range")
        self._ctx.check()
        st = self._state
        pieces = st.ranges.ranges_within(lo, hi)  # (range, lo', hi') in key order
        found: list = [None] * len(pieces)
        if not pieces:
            return np.empty(0, np.uint64), np.empty((0, self.dim), self.dtype)

        def on_part(sender: int, payload) -> None:
            if payload is not None:
                header, p = payload
                found[header.part] = (np.array(p.keys).view(np.uint64), np.array(p.values))

        rid, fut = self._ctx.tracker.new_request(len(pieces), on_part=on_part, desc=self._desc(Kind.RANGE))
        for part, (r, a, b) in enumerate(pieces):
            dest = int(st.ranges.managers[r])
            if dest == self._ctx.rank:
                found[part] = st.shard.scan(a, b)
                self._ctx.tracker.on_reply(rid, 1)
            else:
                bounds = np.array([a, b - 1], np.uint64).view(np.int64)
                self._ctx.endpoint.request(dest, Kind.RANGE, self.spec.table_id, rid, part=part, dim=self.dim,
                                           keys=bounds)
        fut.wait()
        return (np.concatenate([k for k, _ in found]),
                np.concatenate([v for _, v in found]).reshape(-1, self.dim))

    def localize(self, keys, *, _force: bool = False) -> Future:
        raise TableError(f"localize on table {self.name!r}: a sparse table keeps each key at its range's node")

    def prepare_sample(self, n: int, *, scheme: str | None = None):
        raise TableError(f"prepare_sample on table {self.name!r}: sampling needs a dense table (rows 0..n-1)")

    def pull_if_local(self, keys, *, out: np.ndarray | None = None):
        raise TableError(f"pull_if_local on table {self.name!r}: use pull (local keys are read from memory)")

    def _request(self, kind: Kind, keys: np.ndarray, values, out, *, copy: bool, gpos=None,
                 fresh: bool = False, direct: bool = False, rows: bool = False, codec=None) -> Future:
        """Each key to the node of its range; this node's part from memory."""
        if not len(keys):
            return Future.completed(out, self._desc(kind))
        st = self._state
        ranges = st.ranges
        req = Request(self, kind, out, fresh)
        req.rid, fut = self._ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out, desc=self._desc(kind))
        if direct:
            req.reply_to = self._ctx.endpoint.reply_box()
        r = ranges.one_range(keys)
        if r >= 0:
            parts = [(int(ranges.managers[r]), None, keys, values)]
        else:
            parts = route.parts(keys, values, ranges.manager_of(keys), ranges.nodes)
        for dest, idx, pk, pv in parts:
            pos = gpos if idx is None else (idx if gpos is None else gpos[idx])
            if dest == self._ctx.rank:
                self._local(kind, pk, pv, out, pos, rows)
                st.local_keys += len(pk)
                self._ctx.tracker.on_reply(req.rid, len(pk))
                continue
            req.parts.append((pos, None))
            st.remote_keys += len(pk)
            self._ctx.endpoint.request(dest, kind, self.spec.table_id, req.rid, part=len(req.parts) - 1,
                                       dim=self.dim, copy=copy and idx is None, reply_to=req.reply_to,
                                       flags=ROWS if rows else 0, codec=codec, keys=pk, values=pv)
        if req.reply_to and req.parts:
            fut.pumped_by(self._ctx.endpoint.pump)
        self._track(fut)
        return fut
