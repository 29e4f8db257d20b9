"""Server: other nodes' requests in, store operations, replies and forwards out.

A request part reaching this node is served for the keys this node owns; the reply (with the
positions it answers) goes straight to the request's origin. Keys it does not own are
forwarded, Lapse-style: to their owner when this node is their manager, else to their manager,
who knows the owner. Keys on their way here wait in `Relocation` and are applied, in arrival
order, when their TRANSFER lands (server.relocate). REPLICA_SYNC adds other nodes' changes of
replicated keys; AGG_PUSH goes to the table's aggregation owner (server.aggregate); HANDOFF and
OWNERS bring the rows and ranges of a node that leaves (server.handoff).

Threads and ownership: everything here runs in the node's pskv-server thread. It touches rows
only through `Shard` methods (stripe locks). Guarantees: one sender's requests are applied in
the order sent; a key has one owner at any instant, so no update is lost or applied twice; a
bad request gets an ERROR reply and changes nothing. Every request that reaches `handle` ends
in a reply: its answer, or an ERROR naming what failed (also for an unexpected exception); if
even that cannot be sent, the origin's request_timeout reports it.

Runs (issue 31): the dispatcher hands a burst's consecutive server messages over in one call
(`handle_many`, server.runs' `Runs`, Server's base class): a run of plain requests of one table
and kind is served in one step. A plain pull served whole is answered on the endpoint's short
path (`Endpoint.rows`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from .. import _hooks, kernels
from ..errors import ProtocolError
from ..net import codec
from ..net.dispatch import Batched
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.wire import (
    BACKUPS,
    REQUESTS,
    ROWS,
    Header,
    Kind,
    Payload,
    fused_halves,
    split,
    unpack,
)
from ..placement import route
from ..placement.ranges import KeyRanges
from ..store.shard import Shard, Store
from ..store.sparse import SparseShard
from . import exchange, handoff
from .backups import Backups
from .hops import Hops
from .intents import IntentBoard
from .relocate import Relocation
from .runs import Runs

log = logging.getLogger(__name__)
HANDLES = (
    REQUESTS
    | BACKUPS
    | {
        Kind.RANGE,
        Kind.LOCALIZE,
        Kind.HANDOVER,
        Kind.TRANSFER,
        Kind.DECLINE,
        Kind.REPLICA_SYNC,
        Kind.AGG_PUSH,
        Kind.HANDOFF,
        Kind.OWNERS,
        Kind.INTENT,
    }
)


class Server(Runs):
    def __init__(
        self,
        store: Store,
        endpoint: Endpoint,
        tracker: RequestTracker,
        ranges: Callable[[int], KeyRanges],
        on_declined: Callable[[int, np.ndarray, int, float], None] | None = None,
        *,
        hops: Hops | None = None,
        backups: Backups | None = None,
    ) -> None:
        """`hops`: forwards, counted (shared with `backups`; made here if not given); `backups`: with
        backups, the write path and the modules that handle their kinds (server.backups)."""
        self._store = store
        self._endpoint = endpoint
        self.rank = endpoint.rank
        self._ranges = ranges  # table id -> the table's key ranges
        self._hops = hops or Hops(endpoint, store)
        self.relocation = Relocation(endpoint, tracker, serve=self._serve, reject=self.reject, on_declined=on_declined)
        self.intents = IntentBoard(endpoint, self.relocation.release)  # INTENT: which nodes intend each key
        self.aggregators: dict[int, Callable[[Header, Payload], None]] = {}  # table id -> AGG_PUSH handler
        self.backups = backups  # with backups: chain replication, failover and reader copies
        self._handlers = {
            Kind.PULL: self._serve,
            Kind.PUSH: self._serve,
            Kind.SET: self._serve,
            Kind.RANGE: self._range,
            Kind.CHAIN: self._no_backups,
            Kind.SNAPSHOT: self._no_backups,
            Kind.SUBSCRIBE: self._no_backups,
            Kind.LOCALIZE: self.relocation.localize,
            Kind.HANDOVER: self.relocation.handover,
            Kind.TRANSFER: self.relocation.transfer,
            Kind.DECLINE: self.relocation.on_decline,
            Kind.REPLICA_SYNC: self._replica_sync,
            Kind.AGG_PUSH: self._aggregate,
            Kind.HANDOFF: self._handoff,
            Kind.OWNERS: lambda h, p, s: handoff.on_owners(endpoint, h, p, s),
            Kind.INTENT: self.intents.handle,
        }
        self._whole: dict = {}  # kind -> fn(header, payload, shard): takes a BATCH whole, or returns False
        if backups is not None:
            self.register(backups.handlers(), batches=backups.batches())
        self.remembered = codec.Remembered()  # key lists other nodes' threads cache here (key caching)
        self.requests = 0  # handled, for stats
        self.errors = 0
        self.runs = 0  # runs of plain requests served in one step (handle_many)
        # the dispatcher's entry: one message, or a run of them (`handle_many`)
        self.handle = Batched(self._handle_one, self.handle_many)

    # ---- entry points -----------------------------------------------------------------------------
    def _handle_one(self, header: Header, frames: list) -> None:
        """Apply one request or relocation message (ERROR to its origin on any problem)."""
        self.requests += 1
        payload = None
        try:
            if _hooks.points and _hooks.reach("server.handle", node=self.rank, header=header):
                return  # a test drops it: a hung or lost server
            shard = self._store.get(header.table)
            if shard is None:
                raise ProtocolError(f"node {self.rank} has no table with id {header.table}")
            frames = codec.decode(header, frames, self.remembered)  # (a request sent with pskv.filters)
            payload = unpack(header, frames, shard.width)
            self._check(header, payload, shard)
            if payload.writes is not None:  # (flag BATCH, of a kind that may be one)
                self._batch(header, payload, shard)
            else:
                self._handlers[header.kind](header, payload, shard)
        except Exception as exc:  # noqa: BLE001 - answered with an ERROR, never dropped
            self.reject(header, exc)
            if payload is not None and payload.fused is not None and header.kind == Kind.PUSH:
                self.reject(fused_halves(header, payload)[1], exc)  # its pull too (server.exchange)

    def register(self, handlers: dict, *, batches: dict | None = None) -> None:
        """Handle these kinds with fn(header, payload, shard) (a module's `handlers()`); `batches`:
        kinds whose BATCH messages fn(header, payload, shard) may take whole (it returns True)."""
        self._handlers.update(handlers)
        self._whole.update(batches or {})

    def _batch(self, header: Header, p: Payload, shard: Shard | SparseShard) -> None:
        """Several writes in one message (flag BATCH: server.batches): whole, where its kind's module
        takes it so; else each on its own, as if it had come alone, and each fails on its own."""
        whole = self._whole.get(header.kind)
        if whole is not None and whole(header, p, shard):
            return
        handler = self._handlers[header.kind]
        for one, part in split(header, p):
            try:
                handler(one, part, shard)
            except Exception as exc:  # noqa: BLE001 - answered with an ERROR to that write's origin
                self.reject(one, exc)

    def reject(self, header: Header, exc: Exception) -> None:
        """Answer a request that failed here with ERROR (or fail our own localize for a TRANSFER)."""
        self.errors += 1
        if isinstance(exc, ProtocolError):
            log.warning("node %d rejected %r: %s", self.rank, header, exc)
            message = str(exc)
        else:
            log.error("node %d failed while handling %r", self.rank, header, exc_info=exc)
            message = f"node {self.rank} failed while handling {header!r}: {exc!r}"
        if header.kind == Kind.TRANSFER:  # our own localize: fail it here
            self.relocation.fail(header, exc if isinstance(exc, ProtocolError) else ProtocolError(message))
            return
        if self._store.get(header.table) is None or not self._ranges(header.table).is_node(header.origin):
            return  # garbage: no one to answer
        try:
            self._endpoint.error(header, message)
        except Exception:
            log.exception("node %d could not send ERROR for %r to node %d", self.rank, header, header.origin)

    def _check(self, header: Header, p: Payload, shard: Shard | SparseShard) -> None:
        spec = shard.spec
        if ((p.values is not None or header.kind in REQUESTS) and header.dim != spec.dim) or (
            p.values is not None and p.values.dtype != spec.dtype
        ):
            raise ProtocolError(f"{header!r} does not match table {spec.name!r} {spec.describe()}")
        if p.keys is not None and len(p.keys) and not spec.sparse:  # (a sparse table's keys are any uint64)
            lo, hi = kernels.key_range(p.keys)
            if lo < 0 or hi >= spec.rows:
                raise ProtocolError(f"{header!r}: keys {lo}..{hi} outside table {spec.name!r} [0, {spec.rows})")
        if not self._ranges(header.table).is_node(header.origin):
            raise ProtocolError(f"{header!r}: origin {header.origin} is not a node of this cluster")

    # ---- pull / push / set ------------------------------------------------------------------------
    def _serve(self, header: Header, p: Payload, shard: Shard | SparseShard) -> None:
        assert p.keys is not None  # (unpack: a request carries keys)
        keys = p.keys if p.keys.dtype == np.int64 else p.keys.astype(np.int64)
        if p.fused is not None and header.kind == Kind.PUSH:  # a push, then a pull (Table.exchange)
            exchange.serve(self, header, p, keys, shard)
            return
        if self.backups is not None and header.kind != Kind.PULL:
            self.backups.chain.write(header, p, keys, shard)
            return
        out = None
        if header.kind == Kind.PULL:
            out = np.empty((len(keys), shard.spec.dim), dtype=shard.spec.dtype)  # (n, dim), sent zero-copy
            miss = shard.pull(keys, out)
            if self.backups is not None and shard.spec.sparse:  # (it never misses: keys headed elsewhere go there)
                miss = np.flatnonzero(self.backups.heads(header.table, keys) != self.rank)
        else:
            values = p.values
            assert values is not None  # (unpack: a PUSH or SET carries values)
            if header.kind == Kind.PUSH and header.flags & ROWS:  # push_pull: the rows after the push
                out = np.empty((len(keys), shard.spec.dim), dtype=shard.spec.dtype)
                miss = shard.push_pull(keys, values, out)
            elif header.kind == Kind.PUSH:  # (sorted distinct keys, as client.slices sends them: nothing to sum)
                if isinstance(shard, Shard) and len(keys) > 1 and bool((keys[1:] > keys[:-1]).all()):
                    miss = shard.push_distinct(keys, values)
                else:
                    miss = shard.push(keys, values)
            else:
                miss = shard.set(keys, values)
        if not len(miss) and out is not None and p.positions is None and not header.flags:
            self._endpoint.rows(header, out)  # (a plain pull served whole: the short path)
            return
        served = len(keys) - len(miss)
        if served:
            self.reply_served(header, p.positions, miss, out, len(keys))
        if len(miss):
            self.pass_on(header, p, keys, miss, shard)

    def _range(self, header: Header, p: Payload, shard) -> None:
        """RANGE: every written key of a sparse table in [lo, hi) with its row, sorted (store.sparse)."""
        if not isinstance(shard, SparseShard) or p.keys is None or len(p.keys) != 2:
            raise ProtocolError(f"{header!r}: RANGE takes (lo, hi - 1) of a key_space='uint64' table")
        lo, last = (int(k) for k in np.asarray(p.keys).view(np.uint64))
        if self.backups is not None:  # with backups: its range's head answers (client.sparse asks the one it knows)
            head = int(self.backups.heads(header.table, np.asarray(p.keys[:1], np.int64))[0])
            if head != self.rank:
                self.forward(head, header, np.asarray(p.keys, np.int64), None, None)
                return
        to = int(shard.away(np.asarray(p.keys[:1], np.int64))[0]) if self.backups is None else -1
        if to >= 0:  # (this node is leaving and handed the range on: its new manager answers)
            self.forward(to, header, np.asarray(p.keys, np.int64), None, None)
            return
        keys, rows = shard.scan(lo, last + 1)
        self._endpoint.reply(header, Kind.RANGE_REPLY, n_keys=len(keys), keys=keys.view(np.int64), values=rows)

    def reply_served(self, header, positions, miss, out, n, **fused) -> None:
        """Answer the `n` - len(`miss`) keys of request part `header` served here (`out`: their rows,
        for a pull), naming their `positions` in the part when they are not all of them."""
        pos = None
        if len(miss):  # partial: name the positions answered
            hit = np.ones(n, bool)
            hit[miss] = False
            pos = np.flatnonzero(hit)
            if out is not None:
                out = out[hit]
        if positions is not None:
            pos = positions if pos is None else positions[pos]
        kind = Kind.PULL_REPLY if out is not None else Kind.ACK
        self._endpoint.reply(header, kind, n_keys=n - len(miss), positions=pos, values=out, **fused)

    def pass_on(
        self, header: Header, p: Payload, keys: np.ndarray, miss: np.ndarray, shard: Shard | SparseShard
    ) -> None:
        """Forward the keys this node does not own; queue those on their way here."""
        mkeys = keys[miss]
        positions = miss if p.positions is None else p.positions[miss]
        values = None if p.values is None else p.values[miss]
        if self.backups is not None:  # with backups: each key's range head holds it
            targets = self.backups.heads(header.table, mkeys)
        elif isinstance(shard, SparseShard):  # keys of a range this node handed on (it is leaving): to its new manager
            targets = shard.away(mkeys)
        else:
            targets = route.forward_hops(mkeys, shard, self._ranges(header.table), self.rank)
        for target in np.unique(targets):
            sel = targets == target
            tv = None if values is None else values[sel]
            if target == -1:  # incoming here: wait for the TRANSFER (copies: the message's buffers go)
                self.relocation.defer(header, mkeys[sel], np.asarray(positions[sel], np.int64), tv)
                continue
            if target == self.rank:
                raise ProtocolError(
                    f"node {self.rank} heads the key range of keys {mkeys[sel][:5].tolist()} of "
                    f"table {shard.spec.name!r} but does not hold them"
                )
            self.forward(int(target), header, mkeys[sel], positions[sel], tv)

    def forward(self, target: int, header: Header, keys: np.ndarray, positions: np.ndarray | None, values) -> None:
        """Pass keys of a request part on to `target`, counting the hop (server.hops)."""
        self._hops.forward(target, header, keys, positions, values)

    @property
    def forwards(self) -> int:
        """Keys passed on to another node."""
        return self._hops.keys

    # ---- backups, replication and aggregation ------------------------------------------------------
    def _no_backups(self, header: Header, p: Payload, shard: Shard) -> None:
        """CHAIN, SNAPSHOT and SUBSCRIBE reaching a node without backups (server.backups handles them)."""
        raise ProtocolError(f"{header!r}: node {self.rank} runs without backups")

    def _handoff(self, header: Header, p: Payload, shard: Shard) -> None:
        """A leaving node's rows (server.handoff); what waited for them here goes on (server.relocate)."""
        handoff.on_handoff(self._endpoint, header, p, shard)
        if not shard.spec.sparse:  # (nothing waits for a sparse table's keys)
            self.relocation.landed(header, shard)

    def _replica_sync(self, header: Header, p: Payload, shard: Shard) -> None:
        """Another node's accumulated changes of replicated keys: add them here, acknowledge. With
        flag ROWS, a node that joined asks for this node's changes so far (client.replica_sync.catch_up)."""
        keys = np.asarray(p.keys, np.int64)
        if shard.replicas is None or len(np.unique(keys)) != len(keys) or not shard.replicas.mask(keys).all():
            raise ProtocolError(f"REPLICA_SYNC for keys that table {shard.spec.name!r} does not replicate")
        if header.flags & ROWS:
            changes = shard.replicas.subscribe(header.origin, keys)
            self._endpoint.reply(header, Kind.PULL_REPLY, n_keys=len(keys), values=changes)
            return
        assert p.values is not None  # (unpack: a REPLICA_SYNC carries values)
        shard.replicas.add_deltas(keys, p.values, header.origin)
        self._endpoint.reply(header, Kind.ACK, n_keys=len(keys))

    def _aggregate(self, header: Header, p: Payload, shard: Shard) -> None:
        """A node's level-1 sums of an aggregated table: its owner applies them (server.aggregate)."""
        handler = self.aggregators.get(header.table)
        if handler is None:
            raise ProtocolError(f"{header!r}: table {shard.spec.name!r} is not aggregated on node {self.rank}")
        handler(header, p)

    def describe(self, limit: int = 10) -> list[str]:
        """Deferred operations per table, and backups, for debug dumps."""
        return self.relocation.describe(limit) + (self.backups.describe() if self.backups is not None else [])

    def __repr__(self) -> str:
        return (
            f"<Server node={self.rank} handled={self.requests} errors={self.errors} forwards={self.forwards} "
            f"deferred={self.relocation.waiting()}>"
        )
