"""SparseTable: a worker's handle on a sparse table (keys are any uint64 ids; store.sparse).

The same calls as `Table` (pull, push, set, push_pull, pull_range, push_range), routed by key
range only: each key lives at the node that manages its range of the uint64 space
(placement.ranges.SparseRanges), so a request is one message per node holding some of its keys
and the local part is served from this node's memory (client.stages.Ranges). Pushes and sets are
remembered for the worker's clock (`worker.clock()` / `worker.wait_clock()`; the path's clock
stage), which is how an app bounds delay on these asynchronous tables (the lr app's delayed block
proximal gradient). What a sparse table refuses (localize, sampling, pull_if_local) its path
refuses (client.compat). This class adds the range calls: `local_range`, `pull_range`.
"""

from __future__ import annotations

import numpy as np

from ..net.requests import Credit
from ..net.wire import Kind
from ..placement.ranges import SparseRanges
from ..store.sparse import SparseShard
from .table import Table


class SparseTable(Table):
    """A worker's handle on a key_space="uint64" table. Keys: uint64 (or non-negative int) arrays."""

    def local_range(self) -> tuple[int, int]:
        """[lo, hi) of the uint64 key space this node started with (hi up to 2**64; (0, 0) on a node
        that joined): pull_range over it is served from this node's memory, no message."""
        return self._state.ranges.manager_range(self._ctx.rank)

    def local_ranges(self) -> list[tuple[int, int]]:
        """[lo, hi) of each range of the uint64 key space this node manages now (its own, and those
        nodes that left handed to it), in key order."""
        ranges = self._state.ranges
        return [ranges.range_bounds(r) for r in ranges.managed_by(self._ctx.rank)]

    def pull_range(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, rows): every key in [lo, hi) written so far (uint64, sorted) and its row. Blocks.
        `pull_range(0, 2**64)` is the whole table (export a model with it)."""
        lo, hi = self._bounds(lo, hi, "pull_range")
        self._ctx.check()
        st = self._state
        ranges, shard = st.ranges, st.shard
        assert isinstance(ranges, SparseRanges) and isinstance(shard, SparseShard)  # (a sparse table's are)
        pieces = ranges.ranges_within(lo, hi)  # (range, lo', hi') in key order
        found: list = [None] * len(pieces)
        if not pieces:
            return np.empty(0, np.uint64), np.empty((0, self.dim), self.dtype)

        def on_part(sender: int, payload) -> Credit | None:
            if payload is not None:
                header, p = payload
                if found[header.part] is not None:  # (asked again after a membership change: counted once)
                    return Credit(0)
                found[header.part] = (np.array(p.keys).view(np.uint64), np.array(p.values))
            return None

        def send(parts) -> None:
            chains = self._ctx.chains()  # with backups: each range's head answers (server.sparse_copies)
            for part in parts:
                r, a, b = pieces[part]
                dest = int(st.ranges.managers[r] if chains is None else chains.heads[r])
                bounds = np.array([a, b - 1], np.uint64).view(np.int64)
                self._ctx.endpoint.request(
                    dest, Kind.RANGE, self.spec.table_id, rid, part=part, dim=self.dim, keys=bounds
                )

        def retry() -> None:  # pskv-server, after a membership change: the parts not answered yet
            send([part for part, got in enumerate(found) if got is None])

        rid, fut = self._ctx.tracker.new_request(
            len(pieces),
            on_part=on_part,
            desc=self.desc(Kind.RANGE),
            retry=None if self._ctx.chains() is None else retry,
        )
        chains, remote = self._ctx.chains(), []
        for part, (r, a, b) in enumerate(pieces):
            if (
                int(st.ranges.managers[r]) == self._ctx.rank
                if chains is None
                else any(s <= a and b <= e for s, e in shard.intervals)
            ):  # served from memory
                found[part] = shard.scan(a, b)
                self._ctx.tracker.on_reply(rid, 1)
            else:
                remote.append(part)
        send(remote)
        if self._ctx.chains() is not chains:  # a membership change came while we sent (client.backed.request)
            retry()
        fut.wait()
        return (np.concatenate([k for k, _ in found]), np.concatenate([v for _, v in found]).reshape(-1, self.dim))
