"""The stages before a table's request stages (client.stages): what a call passes before its keys
are served or sent. `client.path` composes them once per table, when it is declared.

    Gate       the checkpoint's write gate: every push, set, push_pull and localize (and so every
               sampling preparation) passes it; a checkpoint closes it (checkpoint.collective.Gate)
    Clock      remembers a write for the worker's clock() (BSP/SSP sets, sparse tables' writes)
    Ordered    BSP/SSP sets: after the buffered pushes, and no cached copy of their rows meanwhile
    Initial    NodeAggregate sets: initial values only, before the first round
    Aggregate  NodeAggregate pushes and pulls: the node's round sums (client.aggregate)
    Bounded    BSP/SSP pulls: the row cache, the clock bound, then the node's buffered pushes first
    Skip       localize: keys owned, replicated or declined lately need no move
    Move       localize: LOCALIZE to the keys' managers (server.relocate), or with backups SUBSCRIBE
               to their heads (server.readers)
    Peek       pull_if_local: rows held here (replica, shard), no message
    Sample     prepare_sample: a handle of draws (client.sampling; preloc and pool localize)
    Refuse     a call the table's options do not take (client.compat): TableError

Signatures (as client.stages'): `write(h, kind, keys, values, out, copy, rows, codec)`,
`read(h, keys, out, fresh, direct, codec)`, `localize(h, keys, force)`, `peek(h, keys, out)`.
Threads and ownership: as client.stages; the stages hold no state of their own.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .. import _hooks
from ..catalog import TableState
from ..errors import RequestStalled, TableError, WaitTimeout
from ..net.future import Future
from ..net.wire import FORCE, Kind
from . import backed, sampling
from .context import Context


class Front:
    """A stage before the request stages; `next` is the stage after it."""

    name = "?"
    next: Any = None  # the stage after it: a front stage or a request stage (client.stages)

    def names(self) -> list[str]:
        return [self.name] + (self.next.names() if self.next is not None else [])


class Gate(Front):
    """The one gate of the table's writes and moves (a checkpoint closes it; see the module docstring)."""

    name = "gate"

    def __init__(self, ctx: Context, nxt) -> None:
        self.gate, self.check, self.next = ctx.gate, ctx.check, nxt

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        gate = self.gate
        gate.enter(self.check)  # a checkpoint in progress: after it
        try:
            return self.next.write(h, kind, keys, values, out, copy, rows, codec)
        finally:
            gate.leave()

    def localize(self, h, keys, force) -> Future:
        gate = self.gate  # a move changes two nodes' files: during a checkpoint it waits, and the checkpoint's
        gate.enter(self.check)  # drain waits for the moves begun before it (a row in TRANSFER is in no file)
        try:
            return self.next.localize(h, keys, force)
        finally:
            gate.leave()


class Clock(Front):
    """A write remembered for the worker's clock(): the node's clock waits until it is applied."""

    name = "clock"

    def __init__(self, nxt) -> None:
        self.next = nxt

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        return h.note_write(self.next.write(h, kind, keys, values, out, copy, rows, codec))


class Ordered(Front):
    """A BSP/SSP set: buffered pushes go first, later flushes wait for it (PushBuffer.order_after),
    and no copy of its rows is cached until it is applied (RowCache.hold)."""

    name = "ordered"

    def __init__(self, state: TableState, nxt) -> None:
        assert state.buffer is not None  # (client.path: BSP/SSP tables, which buffer their pushes)
        self.buffer, self.cache, self.next = state.buffer, state.cache, nxt

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        cache = self.cache
        self.buffer.flush_before_pull()
        if cache is not None:
            cache.hold(keys)
        fut = self.next.write(h, kind, keys, values, out, copy, rows, codec)
        self.buffer.order_after(fut)
        if cache is not None:
            fut.add_done_callback(lambda f: cache.release(keys))
        return fut


class Initial(Front):
    """An aggregated table's set: initial values, before any push of a round."""

    name = "initial"

    def __init__(self, aggregator, nxt) -> None:
        self.aggregator, self.next = aggregator, nxt

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        if self.aggregator.started():
            raise TableError(
                f"set on table {h.name!r}: an aggregated table takes set only for initial values, "
                "before any push of a round (then a barrier); later only push and pull"
            )
        return self.next.write(h, kind, keys, values, out, copy, rows, codec)


class Aggregate(Front):
    """NodeAggregate: a push adds to the node's sums of the worker's round; a pull waits for its
    round's result (plain reads of other keys go down the table's request stages)."""

    name = "aggregate"

    def __init__(self, aggregator) -> None:
        self.aggregator = aggregator

    def write(self, h, kind, keys, values, out, copy, rows, codec) -> Future:
        return self.aggregator.push(h.worker, keys, values)

    def read(self, h, keys, out, fresh, direct, codec) -> Future:
        return self.aggregator.pull(h.worker, keys, out)


class Bounded(Front):
    """A BSP/SSP pull: it includes every update stamped <= clock - staleness - 1, and this node's own."""

    def __init__(self, state: TableState, ctx: Context, nxt) -> None:
        assert state.buffer is not None and state.consistency.synchronous  # (client.path: BSP/SSP tables)
        self.state, self.ctx, self.next = state, ctx, nxt
        self.buffer, self.staleness = state.buffer, int(state.consistency.staleness)
        self.name = "clock bound" if state.cache is None else "row cache > clock bound"

    def read(self, h, keys, out, fresh, direct, codec) -> Future:
        st, ctx = self.state, self.ctx
        needed = ctx.clocks.clock_of(h.worker) - self.staleness  # the global clock the rows need
        rest = np.arange(len(keys))  # (n,) positions in out not yet served
        # copies of rows owned elsewhere, fresh enough for this clock; a handle whose thread ticks no clock
        # (the main thread's, after training) has no clock to be fresh for: it reads the owners' rows
        if st.cache is not None and ctx.clocks.takes_part(h.worker):
            far = np.flatnonzero(self._cacheable(keys))
            if len(far):
                todo = np.ones(len(keys), bool)
                todo[far] = False
                todo[far[st.cache.lookup(keys[far], needed, out, far)]] = True
                rest = np.flatnonzero(todo)
                if not len(rest):
                    return Future.completed(out, h.desc(Kind.PULL))
        try:
            ctx.clocks.wait_for(needed, ctx.collective_timeout)
        except WaitTimeout as exc:  # a worker somewhere stopped calling clock(): fail loudly, not forever
            raise RequestStalled(
                f"{h.desc(Kind.PULL)}: {exc} (PSKV_COLLECTIVE_TIMEOUT); the node logs of the "
                "slowest workers show where they are",
                request=h.desc(Kind.PULL),
            ) from None
        # before the flush: a push written to the cache before `since` is in the buffer by then (see RowCache)
        cache = st.cache
        since = cache.sequence() if cache is not None else 0
        self.buffer.flush_before_pull()  # read-my-writes: our buffered updates reach the owners first
        fresh_clock = ctx.clocks.global_clock
        if cache is None:
            return self.next.request(h, Kind.PULL, keys, None, out, None, True, False, direct, False, None)
        miss_keys = keys[rest]
        fut = self.next.request(h, Kind.PULL, miss_keys, None, out, rest, True, False, direct, False, None)
        remote = self._cacheable(miss_keys)

        def keep(values: np.ndarray) -> None:
            cache.insert(miss_keys[remote], values[rest[remote]], fresh_clock, since)

        return fut.then(keep)

    def _cacheable(self, keys: np.ndarray) -> np.ndarray:
        """(n,) bool: rows of keys owned elsewhere and not replicated: the only ones a RowCache copies
        (rows owned here are read from the store; replicated ones from this node's replica)."""
        far = self.state.shard.slot[keys] < 0
        replicas = self.state.shard.replicas
        return far if replicas is None else far & ~replicas.mask(keys)


class Skip(Front):
    """localize: no move for keys owned here, replicated (local everywhere already), or declined
    lately (another node's lease holds them: asking again would be declined too)."""

    name = "skip"

    def __init__(self, state: TableState, nxt) -> None:
        self.state, self.next = state, nxt

    def localize(self, h, keys, force) -> Future:
        st = self.state
        declined = None if force else st.declined_until  # (force: a joining node's share, node.table)
        if declined is not None:
            keys = keys[declined[keys] <= time.monotonic()]
        if st.shard.replicas is not None:
            keys = keys[~st.shard.replicas.mask(keys)]
        if not len(keys) or st.shard.owned(keys).all():
            return Future.completed(None, f"localize {h.name!r}")
        return self.next.localize(h, keys, force)


class Move(Front):
    """localize: mark the keys incoming and ask their managers to move them here (LOCALIZE, under
    the table's lease); with backups ask their heads to make this node a reader (client.backed)."""

    def __init__(self, state: TableState, ctx: Context, *, backups: bool) -> None:
        self.state, self.ctx, self.backups = state, ctx, backups
        self.name = "subscribe" if backups else "move"

    def localize(self, h, keys, force) -> Future:
        st, ctx = self.state, self.ctx
        shard = st.shard
        _hooks.reach("localize.checked", node=ctx.rank, keys=keys)
        fresh = shard.mark_incoming(keys)  # absent keys are now "on their way here"
        waiting = keys[shard.slot[keys] < 0]
        rid, fut = ctx.tracker.new_request(len(waiting), desc=f"localize on table {h.name!r}")
        here = shard.await_keys(waiting, rid)
        if here:
            ctx.tracker.on_reply(rid, here)
        st.localizes += len(fresh)
        if self.backups:  # this node becomes a reader of the keys (server.readers)
            backed.subscribe(h, rid, fresh)
        else:
            managers = st.ranges.manager_of(fresh)
            # asked of the managers (server.relocate); (int: numpy 1.x's round() of a float64 is a float64)
            lease_ms = int(round(st.options.placement.lease * 1000))  # noqa: RUF046
            for m in np.unique(managers):
                ctx.endpoint.request(
                    int(m),
                    Kind.LOCALIZE,
                    h.spec.table_id,
                    rid,
                    part=lease_ms,
                    flags=FORCE if force else 0,
                    keys=fresh[managers == m],
                )
        h.track(fut)
        return fut


class Peek(Front):
    """pull_if_local: rows held here now (replicated or owned), without any message."""

    name = "peek"

    def __init__(self, state: TableState) -> None:
        self.state = state

    def peek(self, h, keys, out) -> tuple[np.ndarray, np.ndarray]:
        if not len(keys):
            return np.zeros(0, bool), out
        mask = np.ones(len(keys), bool)
        shard = self.state.shard
        rest = None
        if shard.replicas is not None:  # a replica, not the manager's unused home row, holds these
            hot = shard.replicas.mask(keys)
            shard.replicas.pull(keys[hot], out, np.flatnonzero(hot))
            rest = np.flatnonzero(~hot)
        miss = shard.pull(keys if rest is None else keys[rest], out, rest)
        mask[miss if rest is None else rest[miss]] = False
        self.state.local_keys += int(mask.sum())
        return mask, out


class Sample(Front):
    """prepare_sample: a handle that draws from the table's distribution (client.sampling)."""

    name = "sample"

    def sample(self, h, n, scheme) -> sampling.SampleHandle:
        return sampling.prepare(h, n, scheme)


class Refuse(Front):
    """A call this table does not take: TableError with the reason (client.compat)."""

    name = "refused"

    def __init__(self, message: str) -> None:
        self.message = message

    def _raise(self, *_args):
        raise TableError(self.message)

    write = read = localize = peek = sample = _raise
