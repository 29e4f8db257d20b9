"""The `Shared` request stage (issue 31): keys whose next hop is a co-located node, served from that
node's shard in shared memory (store.peer) without a message; what a shard misses goes on to the
next stage (client.route.Route). One of the request stages of client.stages (see there for the
stage protocol); client.path puts it between `Owned` and `Route` when the table is dense.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import updaters
from ..catalog import TableState
from ..net.future import Future
from ..net.wire import Kind
from ..placement import route
from ..store import rowlock
from ..updaters import rules
from .context import Context
from .route import serve_local
from .stages import Stage, left


class Shared(Stage):
    """Keys whose next hop is a co-located node, served from that node's shard in shared memory
    (store.peer) without a message, and keys owned here that `Owned` did not probe; what a shard
    misses (moved on, on its way) goes on to `Route`."""

    name = "shared"

    def __init__(self, state: TableState, ctx: Context, nxt: Any) -> None:
        self.state, self.ctx, self.next = state, ctx, nxt

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        neighbors, st = self.ctx.neighbors, self.state
        if neighbors.dir is None or not len(keys):
            return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        ranges, me = st.ranges, self.ctx.rank
        dest = ranges.one_manager(keys) if st.shard.static and not st.loc_cache.size else -1
        if dest >= 0:  # (the common case: one manager, no per-key routing)
            view = neighbors.view(st.spec, dest) if dest != me else st.shard
            if view is None:
                return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
            miss = serve_local(h, view, kind, keys, values, out, gpos, rows)
            if dest != me:
                st.shared_keys += len(keys) - len(miss)
        elif neighbors.all_here(st.spec, ranges.nodes):  # every node on this host: shard after shard
            if kind == Kind.PUSH and not rows and type(st.spec.updater) is updaters.Adagrad:
                return self._summed(h, keys, values, out, fresh, direct, codec)
            return self._passes(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        else:
            hops = route.next_hops(keys, st.shard, ranges, me, st.loc_cache)
            served = np.zeros(len(keys), bool)
            for d, idx, pk, pv in route.parts(keys, values, hops, ranges.nodes + 1):
                # (keys owned here that `Owned` left: the first key was not, and it probes only that one)
                view = st.shard if d == me else neighbors.view(st.spec, d) if d < ranges.nodes else None
                if view is None:
                    continue
                at = np.arange(len(keys)) if idx is None else idx
                pos = at if gpos is None else gpos[at]
                pmiss = serve_local(h, view, kind, pk, pv, out, pos, rows)
                if d != me:
                    st.shared_keys += len(pk) - len(pmiss)
                served[at] = True
                if len(pmiss):
                    served[at[pmiss]] = False
            miss = np.flatnonzero(~served)
        return self.rest(st, miss, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)

    def _summed(self, h, keys, values, out, fresh, direct, codec) -> Future:
        """A push of a table whose updater sums a key's updates first (Adagrad), every node on this
        host: summed once, in key order, so each range's keys are one slice, pushed to its manager's
        shard (no pass over keys a shard does not hold, no second sum: KGE's pushes spent a third of
        their time there). The sums of keys no shard held go on: pushing a sum is the same update."""
        st, me = self.state, self.ctx.rank
        ranges, nodes = st.ranges, st.ranges.nodes
        distinct, summed = rowlock.summed_by_key(keys, values, rules.stable_order(keys, st.spec.rows), st.spec)
        cuts = np.searchsorted(distinct, ranges.bounds).tolist()
        missed = []
        for r in range(ranges.num_ranges):
            a, b = cuts[r], cuts[r + 1]
            if a == b:
                continue
            d = int(ranges.managers[r])
            view = st.shard if d == me else self.ctx.neighbors.view(st.spec, d) if d < nodes else None
            miss = np.arange(b - a) if view is None else view.push_distinct(distinct[a:b], summed[a:b])
            st.local_keys += b - a - len(miss)
            if d != me:
                st.shared_keys += b - a - len(miss)
            if len(miss):
                missed.append(miss + a)
        if not missed:
            return Future.completed(out, h.desc(Kind.PUSH))
        rest = np.concatenate(missed)
        return self.next.request(
            h, Kind.PUSH, distinct[rest], summed[rest], out, None, False, fresh, direct, False, codec
        )

    def _passes(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        """All nodes share this host: each pass serves what the shard of the first key's next hop
        holds (its slot map tells, in the kernel), so no per-key partition is made; what no shard
        holds after one pass per node (moved, on its way) goes on."""
        st, me, nodes = self.state, self.ctx.rank, self.state.ranges.nodes
        for _ in range(nodes):
            d = int(route.next_hops(keys[:1], st.shard, st.ranges, me, st.loc_cache)[0])
            view = st.shard if d == me else self.ctx.neighbors.view(st.spec, d) if d < nodes else None
            if view is None:
                break
            miss = serve_local(h, view, kind, keys, values, out, gpos, rows)
            if len(miss) == len(keys):
                break
            st.local_keys += len(keys) - len(miss)
            if d != me:
                st.shared_keys += len(keys) - len(miss)
            if not len(miss):
                return Future.completed(out, h.desc(kind))
            keys, values, gpos = left(miss, keys, values, gpos)
            copy = False
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
