"""Route: a dense table's last request stage (client.path): the keys left to where each lives
(placement.route), one message per destination from the calling thread; and `serve_local`, how a
request's keys that a shard holds (this node's, or a co-located node's in shared memory) are served
from memory.

Route partitions the rest by owner (counting sort, no full sort) and sends one message per remote
owner straight from the calling thread; a small `pull_async` for one remote owner may instead wait
to leave merged with the thread's next ones (client.coalesce); a blocking plain pull of one remote
node's keys takes a short path (`_pull`: its reply's rows land in `out`, net.replybox). The call
returns a `Future` that the pskv-server thread completes as replies arrive (or the waiting thread,
for replies that come to its reply box). Threads and ownership: as client.table's (any thread
runs it; it holds no state of its own but the table's counters).
"""

from __future__ import annotations

import numpy as np

from ..catalog import TableState
from ..net.future import Future
from ..net.wire import ROWS, Kind
from ..placement import route
from . import coalesce
from .context import Context
from .request import ADOPT_MIN, Request


def serve_local(
    h, shard, kind: Kind, keys: np.ndarray, values, out, pos, rows: bool, distinct: bool = False
) -> np.ndarray:
    """Serve the keys `shard` holds; returns the indices of those it does not. `distinct`: the keys of
    a push are (client.slices), so nothing is summed first."""
    if kind == Kind.PULL:
        return shard.pull(keys, out, pos)
    if kind == Kind.PUSH and rows:
        if pos is None:
            return shard.push_pull(keys, values, out)
        got = np.empty((len(keys), h.dim), h.dtype)  # (n, dim) the rows after the push
        miss = shard.push_pull(keys, values, got)
        hit = np.ones(len(keys), bool)
        hit[miss] = False
        out[pos[hit]] = got[hit]
        return miss
    if kind == Kind.PUSH:
        return shard.push_distinct(keys, values) if distinct else shard.push(keys, values)
    return shard.set(keys, values)


class Route:
    """The keys left to where each lives (placement.route), one message per destination from the
    calling thread (a small pull_async for one remote node: client.coalesce); keys that reach this
    node after all are served here."""

    name = "route"
    next = None

    def names(self) -> list[str]:
        return [self.name]

    def __init__(self, state: TableState, ctx: Context) -> None:
        self.state, self.ctx = state, ctx
        if state.loc_cache.size:
            self.name = "route (location cache)"

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(out, h.desc(kind))
        ctx, st = self.ctx, self.state
        ranges = st.ranges  # (read once: a membership change puts a new one in its place)
        # nothing moved here and one manager holds every key: skip per-key routing (correct even if
        # other nodes moved some of the keys: their manager forwards them)
        dest = ranges.one_manager(keys) if st.shard.static and not st.loc_cache.size else -1
        if (
            direct is False
            and kind == Kind.PULL
            and codec is None
            and 0 <= dest < ranges.nodes
            and dest != ctx.rank
            and len(keys) <= coalesce.CAP_KEYS
            and ctx.neighbors.view(st.spec, dest) is None
        ):
            fut = coalesce.pull(h, ctx, dest, keys, out, gpos, fresh)  # a small pull_async: maybe held, merged
            h.track(fut)
            return fut
        if (
            direct
            and kind == Kind.PULL
            and codec is None
            and gpos is None
            and 0 <= dest < ranges.nodes
            and dest != ctx.rank
            and ctx.neighbors.view(st.spec, dest) is None
        ):
            return self._pull(h, dest, keys, out, fresh)
        req = Request(h, kind, out, fresh)
        req.rid, fut = ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out, desc=h.desc(kind))
        if direct:
            req.reply_to = ctx.endpoint.reply_box()
        if dest >= 0:
            self._part(h, req, dest, keys, values, gpos, copy, ranges.nodes, rows, codec)
        else:  # each key to where it lives (or may live); `ranges.nodes`: on its way here
            hops = route.next_hops(keys, st.shard, ranges, ctx.rank, st.loc_cache)
            for d, idx, pk, pv in route.parts(keys, values, hops, ranges.nodes + 1):
                if idx is None:
                    self._part(h, req, d, pk, pv, gpos, copy, ranges.nodes, rows, codec)
                else:
                    self._part(h, req, d, pk, pv, idx if gpos is None else gpos[idx], False, ranges.nodes, rows, codec)
        if req.reply_to and req.parts:
            fut.pumped_by(ctx.endpoint.pump)
        h.track(fut)
        return fut

    def _pull(self, h, dest: int, keys: np.ndarray, out: np.ndarray, fresh: bool) -> Future:
        """A blocking plain pull of keys that one remote node manages (no filters, no location cache,
        not co-located): one part, sent on the endpoint's short path, its rows received straight into
        `out` (net.replybox's landing) unless a large default pull adopts the reply (client.request)."""
        ctx = self.ctx
        req = Request(h, Kind.PULL, out, fresh)
        req.rid, fut = ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out, desc=h.desc(Kind.PULL))
        req.reply_to = ctx.endpoint.reply_box()
        req.parts.append((None, None))
        self.state.remote_keys += len(keys)
        into = out if not fresh or out.nbytes < ADOPT_MIN else None
        ctx.endpoint.pull(dest, h.spec.table_id, req.rid, h.dim, req.reply_to, keys, into)
        if req.reply_to:
            fut.pumped_by(ctx.endpoint.pump)
        h.track(fut)
        return fut

    def slices(self, h, kind, parts, out, copy, fresh, direct, codec) -> Future:
        """One request of the keys in `parts`, (manager, sorted distinct keys, values, positions in `out`:
        a slice of it, an array, or None for a push) each (client.slices): each part served here (a
        pull's rows straight into its slice of `out`) or sent to its manager as it is. Like `request`,
        the request counts only the keys that travel (the metrics' request keys)."""
        ctx, st = self.ctx, self.state
        me, incoming = ctx.rank, st.ranges.nodes
        sends = []
        for dest, keys, values, pos in parts:
            shard = st.shard if dest == me else ctx.neighbors.view(st.spec, dest) if dest != incoming else None
            if shard is None:
                sends.append((dest, keys, values, pos, copy))
                continue
            # held here (or co-located): served from memory, a pull's rows straight into its slice of `out`
            if type(pos) is slice:
                miss = serve_local(h, shard, kind, keys, None, out[pos], None, False)
            else:
                miss = serve_local(h, shard, kind, keys, values, out, pos, False, True)
            served = len(keys) - len(miss)
            st.local_keys += served
            if dest != me:
                st.shared_keys += served
            if len(miss):  # (moved away meanwhile: as `_part` sends them)
                gpos = pos.start + miss if type(pos) is slice else miss if pos is None else pos[miss]
                sends.append((dest, keys[miss], None if values is None else values[miss], gpos, False))
        if not sends:
            return Future.completed(out, h.desc(kind))
        req = Request(h, kind, out, fresh)
        req.rid, fut = ctx.tracker.new_request(
            sum(len(s[1]) for s in sends), on_part=req.on_part, result=out, desc=h.desc(kind)
        )
        if direct:
            req.reply_to = ctx.endpoint.reply_box()
        for dest, keys, values, pos, cp in sends:
            self._part(h, req, dest, keys, values, pos, cp, incoming, False, codec, True)
        if req.reply_to and req.parts:
            fut.pumped_by(ctx.endpoint.pump)
        h.track(fut)
        return fut

    def _part(self, h, req, dest, keys, values, gpos, copy, incoming, rows, codec, distinct=False) -> None:
        ctx, st = self.ctx, self.state
        me = ctx.rank
        shard = st.shard if dest == me else ctx.neighbors.view(st.spec, dest) if dest != incoming else None
        if shard is not None:  # here, or a co-located node's shard in shared memory (store.peer)
            miss = serve_local(h, shard, req.kind, keys, values, req.out, gpos, rows, distinct)
            served = len(keys) - len(miss)
            st.local_keys += served
            if dest != me:
                st.shared_keys += served
            if served:
                ctx.tracker.on_reply(req.rid, served)
            if not len(miss):
                return
            # moved away meanwhile: its (our own) server routes them on
            keys, values = keys[miss], None if values is None else values[miss]
            gpos = miss if gpos is None else gpos[miss]
            copy = False
        elif dest == incoming:
            dest = me  # on their way here: our server queues them until they land
        req.parts.append((gpos, keys if st.loc_cache.size else None))
        st.remote_keys += len(keys)
        ctx.endpoint.request(
            dest,
            req.kind,
            h.spec.table_id,
            req.rid,
            part=len(req.parts) - 1,
            dim=h.dim,
            copy=copy,
            reply_to=req.reply_to,
            flags=ROWS if rows else 0,
            codec=codec,
            keys=keys,
            values=values,
        )
