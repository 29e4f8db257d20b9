"""A table's request path: its stages, composed once from its options when the table is declared
(`node.tables.TableBuilder.build`), so that no call asks which techniques the table uses.

    path = compose(state, ctx, backups=config.backups > 0)
    path.read(h, keys, out, fresh, direct, codec)             Table.pull / pull_async
    path.push(h, Kind.PUSH, keys, values, None, copy, False, codec)
    path.set(h, Kind.SET, keys, values, None, copy, False, None)
    path.push_pull(h, Kind.PUSH, keys, values, out, True, True, codec)
    path.exchange(h, keys, values, copy, pulls, out, fresh, codec)     Table.exchange: push, then pull
    path.localize(h, keys, force)       path.peek(h, keys, out)       path.sample(h, n, scheme)
    path.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
                                        the request stages alone (aggregated plain reads, flushes)

What each table kind and option puts in (client.stages, client.front; `describe()` lists them):

    request stages  [replica] > local > shared > route   dense, disk (shared: co-located nodes' shards)
                    [replica] > held rows > heads         any table with backups
                    ranges                                sparse (key_space="uint64")
                    held ranges > heads                   sparse with backups
    pull            the request stages; BSP/SSP: row cache > clock bound > ...; NodeAggregate: aggregate
    push            gate > the request stages; BSP/SSP: gate > clock > [replica] > [local] > buffer;
                    sparse: gate > clock > ranges (BSP/SSP: gate > clock > local > buffer, no row
                    cache: RowCache is sized by rows); NodeAggregate: aggregate (rounds pass no write
                    gate: the checkpoint holds them, `hold`)
    set             gate > [clock] > [ordered (BSP/SSP) | initial (NodeAggregate)] > the request stages
    push_pull       as push without buffer, or refused
    exchange        push, then pull: their messages to one node fused (`fuses`: no push buffer, aggregation
                    or backups; net.endpoint's gather), else apart (with backups the pull after the push's ACK)
    localize        skip > gate > move (subscribe with backups), or refused

A pair of options that does not compose never gets here: node.table() refuses it first
(client.compat.check_declaration). Calls a table's options do not take get a `Refuse` stage,
with the reason client.compat gives. Threads and ownership: a Path is made by the thread that
declares the table and never changes; any thread runs its stages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..catalog import TableState
from ..net.future import Future, both
from ..net.wire import Kind
from . import compat, front, intent_sync, shared, stages
from .context import Context
from .route import Route
from .table import Table


class Path:
    """One table's stages, per call (see the module docstring). Attributes are the head stages'
    bound methods, so a call goes straight into its first stage."""

    def __init__(self, heads: dict, state: TableState) -> None:
        self._heads = heads  # call -> its first stage
        self._state = state
        self.request = heads["request"].request
        self.read = heads["pull"].read
        self.push = heads["push"].write
        self.set = heads["set"].write
        self.push_pull = heads["push_pull"].write
        self.localize = heads["localize"].localize
        self.peek = heads["pull_if_local"].peek
        self.sample = heads["prepare_sample"].sample
        self.flusher: Table | None = None  # BSP/SSP: the handle the push buffer's flushes go out with
        self.fuses: tuple[Callable[[], None], Callable[[], None]] | None = None  # (gather, release) of the node's
        # endpoint: a push and a pull leave fused (`exchange`)
        self.backed = False  # the cluster keeps backups: a write is applied at its chain's tail first

    def exchange(self, h, keys, values, copy, pulls, out, fresh, codec) -> Future:
        """Table.exchange: push `values` for `keys`, then pull the rows of `pulls` into `out`; one
        Future of the rows, done when both are. The push and the pull each take their own stages, and
        what they send to one node leaves in one message (`fuses`) when the table has no push buffer,
        aggregation or backups and no codec: its owner applies the push before it serves the pull.
        Else they leave apart, in this order; with backups the pull waits for the push's ACK (a pull
        may read this node's copy of a range, which a write reaches through its chain)."""
        if self.fuses is not None and codec is None:
            gather, release = self.fuses
            gather()
            try:
                pushed = self.push(h, Kind.PUSH, keys, values, None, copy, False, None)
                pulled = self.read(h, pulls, out, fresh, None, None)
            finally:
                release()
            return both(pushed, pulled)
        pushed = self.push(h, Kind.PUSH, keys, values, None, copy, False, codec)
        if self.backed:
            pushed.wait()
        return both(pushed, self.read(h, pulls, out, fresh, None, codec))

    def flush(self) -> None:
        """Send the BSP/SSP push buffer now (a no-op for other tables)."""
        if self._state.buffer is not None:
            self._state.buffer.flush()

    def send_buffered(self, keys, values):
        """A flush of the push buffer: a plain push of arrays nobody else holds (PushBuffer's send)."""
        return self.request(self.flusher, Kind.PUSH, keys, values, None, None, False, False, False, False, None)

    def hold(self) -> None:
        """A checkpoint writes: no aggregated round is applied or handed on until `release()`
        (client.aggregate). Other writes and moves wait at the write gate instead."""
        if self._state.aggregator is not None:
            self._state.aggregator.hold()

    def release(self) -> None:
        if self._state.aggregator is not None:
            self._state.aggregator.release()

    def describe(self) -> dict[str, str]:
        """Each call's stages, in order: {"pull": "replica > local > shared > route", ...}."""
        return {call: " > ".join(head.names()) for call, head in self._heads.items()}

    def __repr__(self) -> str:
        return f"<Path {self._state.spec.name!r} " + "; ".join(f"{c}: {s}" for c, s in self.describe().items()) + ">"


def features(state: TableState, *, backups: bool) -> set[str]:
    """The table's kind, options and cluster facts in client.compat's words."""
    spec, options = state.spec, state.options
    kind = "sparse" if spec.sparse else "disk" if getattr(state.shard, "disk", None) is not None else "dense"
    on = {kind}
    on |= {
        name
        for name, used in (
            ("Relocate", options.placement.location_caches),
            ("Replicate", options.replicate is not None),
            ("Sampling", options.sampling is not None),
            ("NodeAggregate", options.aggregate is not None),
            ("BSP/SSP", state.consistency.synchronous),
            ("backups", backups),
        )
        if used
    }
    return on


def compose(state: TableState, ctx: Context, *, backups: bool) -> Path:
    """Build the table's path from its parts (`state`: shard, replicas, buffer, cache, aggregator)
    and sets `state.path`. `backups`: the cluster keeps backups (every write goes to its range's head)."""
    sparse = state.spec.sparse
    refused = compat.call_refusals(state.spec.name, features(state, backups=backups))
    agg, buffer = state.aggregator, state.buffer
    # the stages of each call (any stage: client.stages, client.shared, client.front, client.intent_sync, Route)
    request: Any
    pull: Any
    push: Any
    put: Any
    buffered: Any
    copies = None
    # the request stages: serve what is here, send the rest
    if sparse and backups:  # writes to the heads, pulls of ranges served here from memory
        request = stages.HeldRanges(state, stages.Heads())
    elif sparse:
        request = stages.Ranges(state, ctx)
    elif backups:
        request = stages.HeldRows(state, stages.Heads())
    else:
        route = Route(state, ctx)
        request = stages.Owned(state, shared.Shared(state, ctx, route), route=route)
    if not sparse and agg is None:  # copies of keys several nodes intend (client.intent_sync; with backups too)
        copies = state.copies = intent_sync.Copies(state, ctx, request)
        request = intent_sync.Stage(copies, request)
    if state.shard.replicas is not None:
        request = stages.Replica(state, request)
    if agg is not None:
        pull, push = front.Aggregate(agg), front.Aggregate(agg)  # (rounds: held by a checkpoint, `hold`)
    elif buffer is not None:
        pull = front.Bounded(state, ctx, request)
        buffered = stages.Buffer(state)
        if not backups:  # (with backups every write goes through its range's head)
            buffered = stages.MyRange(state, ctx, buffered) if sparse else stages.Owned(state, buffered, probe=False)
        if copies is not None:
            buffered = intent_sync.Stage(copies, buffered)
        if state.shard.replicas is not None:
            buffered = stages.Replica(state, buffered)
        push = front.Gate(ctx, front.Clock(buffered))
    else:
        pull = request
        push = front.Gate(ctx, front.Clock(request) if sparse else request)
    put = request
    if buffer is not None:
        put = front.Ordered(state, put)
    if agg is not None:
        put = front.Initial(agg, put)
    if state.consistency.synchronous or sparse:
        put = front.Clock(put)
    heads = {"request": request, "pull": pull, "push": push, "set": front.Gate(ctx, put)}
    heads["push_pull"] = (
        front.Gate(ctx, front.Clock(request) if sparse else request)
        if "push_pull" not in refused
        else front.Refuse(refused["push_pull"])
    )
    heads["localize"] = (
        front.Skip(state, front.Gate(ctx, front.Move(state, ctx, backups=backups)))
        if "localize" not in refused
        else front.Refuse(refused["localize"])
    )
    heads["pull_if_local"] = (
        front.Peek(state) if "pull_if_local" not in refused else front.Refuse(refused["pull_if_local"])
    )
    heads["prepare_sample"] = (
        front.Sample() if "prepare_sample" not in refused else front.Refuse(refused["prepare_sample"])
    )
    path = state.path = Path(heads, state)
    path.backed = backups
    if buffer is None and agg is None and not backups:
        path.fuses = (ctx.endpoint.gather, ctx.endpoint.release)
    if buffer is not None:
        path.flusher = Table(ctx, state, None)  # (its own handle: no worker tracks a flush)
    return path
