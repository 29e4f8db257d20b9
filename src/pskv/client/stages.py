"""The stages of a table's request path; `client.path` composes them once per table, when it is declared.

A request stage serves what it can of a request and hands the rest to the stage after it
(`self.next`); the last one sends it. Every request stage has one method,

    request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future

    h       the client.table.Table handle that called (its worker tracks the Future; `desc`)
    kind    Kind.PULL / PUSH / SET
    keys    (n,) int64; values (n, dim) or None (pulls)
    out     (m, dim) the result of a pull (or a push_pull), else None
    gpos    (n,) where each key's row goes in `out`; None: 0..n-1
    copy    the caller may change its arrays once the call returns (so they are copied to be sent)
    fresh   `out` was allocated for this pull: a large reply may become the result (client.request)
    direct  True: the caller waits at once, in its thread: replies come to its reply box; False: it
            may wait later (Route may hold a small pull to send it merged, client.coalesce); None:
            a callback may be all that reads the result (never held)
    rows    a push that wants the rows after it in `out` (push_pull)
    codec   how remote parts travel (net.codec), or None

    Replica  replicated keys from this node's copy (Replicate)
    Owned    keys this node owns, from its shard, under its stripe locks (the Lapse fast path)
    Shared   keys of a co-located node, from its shard in shared memory (client.shared; issue 31)
    Route    the rest to where each key lives: its manager, or the owner a location cache names
             (client.route.Route: a dense table's send, the data path's last step)
    HeldRanges  a sparse table with backups: pulls of the ranges served here, from memory
    Heads    with backups: every write to its range's head, kept and sent again (client.backed)
    Ranges   a sparse table: each key to the node of its uint64 range
    MyRange  a sparse BSP/SSP table's pushes: keys of this node's range applied here, the rest buffered
    Buffer   BSP/SSP pushes: into the row cache and the push buffer, sent at the next flush

`client.frontstages` holds the stages before these (the write gate, clocks, BSP/SSP pulls,
aggregation, localize). Threads and ownership: stages hold no state of their own; they run in
the calling thread and touch the table's parts (shard, replicas, cache, buffer) through the
parts' own locks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..catalog import TableState
from ..net.future import Future
from ..net.wire import ROWS, Kind
from ..placement import route
from ..store.sparse import SparseShard
from . import backed, slices
from .context import Context
from .request import Request
from .route import serve_local


class Stage:
    """A request stage: `name` (for Path.describe), `next` (None: it sends). At the head of a
    path it also takes a pull (`read`) or a write (`write`, client.front's signature)."""

    name = "?"
    next: Any = None  # the stage after it: a request stage, client.table's Route, client.intent_sync's stage
    request: Callable[..., Future]  # (each stage's own: h, kind, keys, values, out, gpos, copy, fresh, direct, rows,
    # codec)

    def names(self) -> list[str]:
        return [self.name] + (self.next.names() if self.next is not None else [])

    def read(self, h, keys, out, fresh, direct, codec) -> Future:
        return self.request(h, Kind.PULL, keys, None, out, None, True, fresh, direct, False, codec)

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        return self.request(h, kind, keys, values, out, None, copy, False, False, rows, codec)

    def rest(self, state, miss, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        """This stage served all keys but `miss` (indices) from memory: done, or the rest to the next stage."""
        state.local_keys += len(keys) - len(miss)
        if not len(miss):
            return Future.completed(out, h.desc(kind))
        if len(miss) < len(keys):
            keys, values, gpos = left(miss, keys, values, gpos)
            copy = False
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


def left(idx: np.ndarray, keys: np.ndarray, values, gpos):
    """The keys (and values, and positions in the caller's `out`) a stage did not serve, `idx` of
    them, for the next stage: new arrays (fancy indexing), so the next stage may keep them."""
    return keys[idx], None if values is None else values[idx], idx if gpos is None else gpos[idx]


class Replica(Stage):
    """Replicated keys: read and written in this node's copy, never routed (store.replicas)."""

    name = "replica"

    def __init__(self, state: TableState, nxt: Stage) -> None:
        assert state.shard.replicas is not None  # (client.path: a table with replicas)
        self.state, self.replicas, self.next = state, state.shard.replicas, nxt

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        n = len(keys)
        hot = self.replicas.mask(keys) if n else None
        if hot is not None and hot.any():
            at = np.flatnonzero(hot)
            pos = at if gpos is None else gpos[at]
            if kind == Kind.PULL:
                self.replicas.pull(keys[at], out, pos)
            elif kind == Kind.PUSH:
                self.replicas.push(keys[at], values[at])
            else:
                self.replicas.set(keys[at], values[at])
            self.state.local_keys += len(at)
            if len(at) == n:
                return Future.completed(out, h.desc(kind))
            keys, values, gpos = left(np.flatnonzero(~hot), keys, values, gpos)
            copy = False
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


class Owned(Stage):
    """Keys this node owns, served from its shard in memory. `probe`: try only when the first key
    is owned here (one locked pass when all probably are; routing serves stragglers), else always.
    With `route` (client.route.Route), a pull or push of keys of several ranges is cut into a slice
    per range first, when it can be (client.slices): this node's slice served, the others sent."""

    name = "local"

    def __init__(self, state: TableState, nxt: Stage, *, probe: bool = True, route=None) -> None:
        self.state, self.shard, self.next, self.probe, self.route = state, state.shard, nxt, probe, route

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(out, h.desc(kind))
        if self.route is not None and len(keys) > 1 and kind != Kind.SET and not rows:
            fut = slices.request(self.route, self.state, h, kind, keys, values, out, gpos, copy, fresh, direct, codec)
            if fut is not None:
                return fut
        if not self.probe or self.shard.slot[keys[0]] >= 0:
            miss = serve_local(h, self.shard, kind, keys, values, out, gpos, rows)
            return self.rest(self.state, miss, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


class HeldRows(Stage):
    """With backups: pulls of rows held here are read from memory; writes pass (to their range's head)."""

    name = "held rows"

    def __init__(self, state: TableState, nxt: Stage) -> None:
        self.state, self.shard, self.next = state, state.shard, nxt

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if kind == Kind.PULL and len(keys):
            miss = self.shard.pull(keys, out, gpos)
            self.state.local_keys += len(keys) - len(miss)
            if not len(miss):
                return Future.completed(out, h.desc(kind))
            keys = keys[miss]
            gpos = miss if gpos is None else gpos[miss]
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


class HeldRanges(Stage):
    """A sparse table with backups: pulls of keys whose range this node serves (its own, and those
    it took over as their chain's head: `SparseShard.intervals`) are read from memory; the rest,
    and every write, pass (to their range's head)."""

    name = "held ranges"

    def __init__(self, state: TableState, nxt: Stage) -> None:
        shard = state.shard
        assert isinstance(shard, SparseShard)  # (client.path: a sparse table's)
        self.state: TableState = state
        self.shard: SparseShard = shard
        self.next = nxt
        self._held: tuple[list, np.ndarray] = ([], np.zeros(0, bool))  # (intervals, (R,) range served here)

    def _served(self) -> np.ndarray:
        intervals, held = self._held
        if self.shard.intervals is not intervals:  # (it grows by a new list: server.sparse_copies.promote)
            intervals = self.shard.intervals
            ranges = self.state.ranges
            held = np.array([ranges.range_bounds(r) in intervals for r in range(ranges.num_ranges)], bool)
            self._held = (intervals, held)
        return held

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if kind == Kind.PULL and len(keys):
            held = self._served()
            r = self.state.ranges.one_range(keys)
            here = np.full(len(keys), bool(held[r])) if r >= 0 else held[self.state.ranges.range_of(keys)]
            if here.all():
                self.shard.pull(keys, out, gpos)
                self.state.local_keys += len(keys)
                return Future.completed(out, h.desc(kind))
            if here.any():
                at = np.flatnonzero(here)
                self.shard.pull(keys[at], out, at if gpos is None else gpos[at])
                self.state.local_keys += len(at)
                miss = np.flatnonzero(~here)
                keys, gpos = keys[miss], miss if gpos is None else gpos[miss]
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


class Heads(Stage):
    """With backups: each key to its range's head, kept until answered and sent again after a
    membership change (client.backed); writes never take the shared-memory path."""

    name = "heads"

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(out, h.desc(kind))
        fut = backed.request(h, kind, keys, values, out, gpos, direct)
        h.track(fut)
        return fut


class Ranges(Stage):
    """A sparse table: each key to the node of its uint64 range; this node's part from memory."""

    name = "ranges"

    def __init__(self, state: TableState, ctx: Context) -> None:
        self.state, self.ctx = state, ctx

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(out, h.desc(kind))
        ctx, st = self.ctx, self.state
        ranges = st.ranges
        req = Request(h, kind, out, fresh)
        req.rid, fut = ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out, desc=h.desc(kind))
        if direct:
            req.reply_to = ctx.endpoint.reply_box()
        r = ranges.one_range(keys)
        parts: Iterable[tuple]
        if r >= 0:
            parts = [(int(ranges.managers[r]), None, keys, values)]
        else:
            parts = route.parts(keys, values, ranges.manager_of(keys), ranges.nodes)
        for dest, idx, pk, pv in parts:
            pos = gpos if idx is None else (idx if gpos is None else gpos[idx])
            if dest == ctx.rank:
                serve_local(h, st.shard, kind, pk, pv, out, pos, rows)
                st.local_keys += len(pk)
                ctx.tracker.on_reply(req.rid, len(pk))
                continue
            req.parts.append((pos, None))
            st.remote_keys += len(pk)
            ctx.endpoint.request(
                dest,
                kind,
                h.spec.table_id,
                req.rid,
                part=len(req.parts) - 1,
                dim=h.dim,
                copy=copy and idx is None,
                reply_to=req.reply_to,
                flags=ROWS if rows else 0,
                codec=codec,
                keys=pk,
                values=pv,
            )
        if req.reply_to and req.parts:
            fut.pumped_by(ctx.endpoint.pump)
        h.track(fut)
        return fut


class MyRange(Stage):
    """A sparse BSP/SSP table's writes: keys of this node's uint64 range applied here at once (as
    `Owned` does for a dense table's pushes); the rest passes (to the push buffer)."""

    name = "local"

    def __init__(self, state: TableState, ctx: Context, nxt: Stage) -> None:
        self.state, self.ctx, self.next = state, ctx, nxt

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(out, h.desc(kind))
        st = self.state
        mine = st.ranges.manager_of(keys) == self.ctx.rank  # (n,) bool
        at = np.flatnonzero(mine)
        if len(at):
            pos = at if gpos is None else gpos[at]
            miss = serve_local(h, st.shard, kind, keys[at], None if values is None else values[at], out, pos, rows)
            mine[at[miss]] = False  # (keys of a range the shard handed on: they go on, as remote ones)
            st.local_keys += len(at) - len(miss)
            if mine.all():
                return Future.completed(out, h.desc(kind))
            keys, values, gpos = left(np.flatnonzero(~mine), keys, values, gpos)
            copy = False
        return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)


class Buffer(Stage):
    """BSP/SSP: remote pushes wait in the node's push buffer (summed per key) for the next flush,
    which sends them down the table's request stages; with a row cache the push also updates the
    cached copies, as one step against a pull's `sequence()` (consistency.cache)."""

    name = "buffer"

    def __init__(self, state: TableState) -> None:
        assert state.buffer is not None  # (client.path: a BSP/SSP table, which buffers its pushes)
        self.state, self.buffer, self.cache = state, state.buffer, state.cache

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        if not len(keys):
            return Future.completed(None, h.desc(kind))
        if self.cache is None:
            fut = self.buffer.add(keys, values)
        else:
            with self.cache.ordering:  # write + add as one step against a pull's sequence() (see RowCache)
                self.cache.write(keys, values)
                fut = self.buffer.add(keys, values)
        h.track(fut)
        return fut
