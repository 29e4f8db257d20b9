"""Server: requests from other nodes in, store operations, replies and forwards out; relocation.

A request part reaching this node is served for the keys this node owns; the reply (with the
positions it answers) goes straight to the request's origin. Keys it does not own are
forwarded, Lapse-style: to their owner when this node is their manager, else to their manager,
who knows the owner. Keys on their way here (slot -2) wait in `_deferred` and are applied, in
arrival order, when their TRANSFER lands.

Relocation (`table.localize`): the requester sends LOCALIZE to the keys' manager, which records
the new owner and sends HANDOVER to the old owner, which extracts the rows (with updater
state) and sends them in a TRANSFER straight to the new owner. A HANDOVER for a key that is
itself still on its way here waits in `_deferred` too, so chains of relocations pass the key on.

Threads and ownership: everything here runs in the node's pskv-server thread. It touches rows
only through `Shard` methods (stripe locks), and writes the manager map `Shard.owner` and
`_deferred`, which no other thread touches. Guarantees: one sender's requests are applied in
the order sent; a key has one owner at any instant, so no update is lost or applied twice; a
bad request gets an ERROR reply and changes nothing. Every request that reaches `handle` ends
in a reply: its answer, or an ERROR naming what failed (also for an unexpected exception, and for
each deferred operation whose replay fails); if even that cannot be sent, the origin's
request_timeout reports it.
"""

from __future__ import annotations

import collections
import logging
from typing import Callable

import numpy as np

from . import _hooks, kernels
from .errors import ProtocolError
from .future import RequestTracker
from .protocol import POSITIONS, REQUESTS, STATE, Header, Kind, Payload, dtype_code, unpack
from .store import INCOMING, Shard, Store

log = logging.getLogger(__name__)
_KEYS = dtype_code(np.int64)
_HOP_SHIFT = 8  # flags bits 8..15 count forwards: a routing bug becomes an error, never an endless loop
_MAX_HOPS = 32  # a relocation chain moves a key at most once per hop; 32 is far beyond any real chain


class Server:
    def __init__(self, store: Store, send: Callable[..., None], rank: int, cluster: Callable[[], int],
                 tracker: RequestTracker | None = None, bounds: Callable[[int], np.ndarray] | None = None) -> None:
        self._store = store
        self._send = send
        self.rank = rank
        self._cluster = cluster  # the cluster id, known once the node joined
        self._tracker = tracker  # completes this node's localize requests when TRANSFERs land
        self._bounds = bounds  # table id -> manager range bounds (nodes + 1,)
        self._deferred: dict[int, list[_Waiting]] = collections.defaultdict(list)  # table -> waiting ops, in arrival order
        self.requests = 0  # handled, for stats
        self.errors = 0
        self.forwards = 0  # keys passed on to another node
        self.relocated_in = 0  # keys received by TRANSFER
        self.aggregators: dict[int, Callable] = {}  # table id -> fn(header, payload): AGG_PUSH (pskv.aggregation)

    # ---- entry point ------------------------------------------------------------------------------
    def handle(self, header: Header, frames: list) -> None:
        """Apply one request or relocation message (ERROR to its origin on any problem)."""
        self.requests += 1
        try:
            if _hooks._points and _hooks.reach("server.handle", node=self.rank, header=header):
                return  # a test drops it: a hung or lost server
            shard = self._store.get(header.table)
            if shard is None:
                raise ProtocolError(f"node {self.rank} has no table with id {header.table}")
            payload = unpack(header, frames, shard.width)
            self._check(header, payload, shard)
            if header.kind in REQUESTS:
                self._serve(header, payload, shard)
            elif header.kind == Kind.LOCALIZE:
                self._localize(header, payload.keys, shard)
            elif header.kind == Kind.HANDOVER:
                self._handover(header, payload.keys, shard)
            elif header.kind == Kind.TRANSFER:
                self._transfer(header, payload, shard)
            elif header.kind == Kind.REPLICA_SYNC:
                self._replica_sync(header, payload, shard)
            elif header.kind == Kind.AGG_PUSH:
                if header.table not in self.aggregators:
                    raise ProtocolError(f"{header!r}: table {shard.spec.name!r} is not aggregated on node {self.rank}")
                self.aggregators[header.table](header, payload)
        except Exception as exc:  # noqa: BLE001 - answered with an ERROR, never dropped
            self._reject(header, exc)

    def _reject(self, header: Header, exc: Exception) -> None:
        """Answer a request that failed here with ERROR (or fail our own localize for a TRANSFER)."""
        self.errors += 1
        if isinstance(exc, ProtocolError):
            log.warning("node %d rejected %r: %s", self.rank, header, exc)
            message = str(exc)
        else:
            log.error("node %d failed while handling %r", self.rank, header, exc_info=exc)
            message = f"node {self.rank} failed while handling {header!r}: {exc!r}"
        if header.kind == Kind.TRANSFER and self._tracker is not None:  # our own localize: fail it here
            error = exc if isinstance(exc, ProtocolError) else ProtocolError(message)
            self._tracker.on_reply(header.request_id, 0, header.sender, error=error)
            return
        if self._store.get(header.table) is None or not self._is_node(header.table, header.origin):
            return  # garbage: no one to answer
        try:
            self._send(header.origin, [self._reply_header(header, Kind.ERROR).pack(), message.encode()])
        except Exception:  # noqa: BLE001 - the origin's request_timeout reports the request
            log.exception("node %d could not send ERROR for %r to node %d", self.rank, header, header.origin)

    def _check(self, header: Header, p: Payload, shard: Shard) -> None:
        spec = shard.spec
        if (p.values is not None or header.kind in REQUESTS) and header.dim != spec.dim or (
                p.values is not None and p.values.dtype != spec.dtype):
            raise ProtocolError(f"{header!r} does not match table {spec.name!r} {spec.describe()}")
        if p.keys is not None and len(p.keys):
            lo, hi = kernels.key_range(p.keys)
            if lo < 0 or hi >= spec.rows:
                raise ProtocolError(f"{header!r}: keys {lo}..{hi} outside table {spec.name!r} [0, {spec.rows})")
        if not self._is_node(header.table, header.origin):
            raise ProtocolError(f"{header!r}: origin {header.origin} is not a node of this cluster")

    # ---- pull / push / set ------------------------------------------------------------------------
    def _serve(self, header: Header, p: Payload, shard: Shard) -> None:
        keys = p.keys if p.keys.dtype == np.int64 else p.keys.astype(np.int64)
        out = None
        if header.kind == Kind.PULL:
            out = np.empty((len(keys), shard.spec.dim), dtype=shard.spec.dtype)  # (n, dim), sent zero-copy
            miss = shard.pull(keys, out)
        elif header.kind == Kind.PUSH:
            miss = shard.push(keys, p.values)
        else:
            miss = shard.set(keys, p.values)
        served = len(keys) - len(miss)
        if served:
            self._reply(header, p.positions, miss, out, len(keys))
        if len(miss):
            self._pass_on(header, p, keys, miss, shard)

    def _reply(self, header, positions, miss, out, n) -> None:
        h = self._reply_header(header, Kind.PULL_REPLY if out is not None else Kind.ACK)
        frames = [None]
        pos = None
        if len(miss):  # partial: name the positions answered
            hit = np.ones(n, bool)
            hit[miss] = False
            pos = np.flatnonzero(hit)
            if out is not None:
                out = out[hit]
        if positions is not None:
            pos = positions if pos is None else positions[pos]
        if pos is not None:
            h.flags |= POSITIONS
            frames.append(np.ascontiguousarray(pos, np.int64))
        h.n_keys = n - len(miss)
        if out is not None:
            h.dim, h.dtype = out.shape[1], dtype_code(out.dtype)
            frames.append(out)
        frames[0] = h.pack()
        self._send(header.origin, frames)

    def _pass_on(self, header: Header, p: Payload, keys: np.ndarray, miss: np.ndarray, shard: Shard) -> None:
        """Forward the keys this node does not own; queue those on their way here."""
        mkeys = keys[miss]
        positions = miss if p.positions is None else p.positions[miss]
        values = None if p.values is None else p.values[miss]
        targets = self._targets(mkeys, shard)
        for target in np.unique(targets):
            sel = targets == target
            if target == -1:  # incoming here: wait for the TRANSFER (copies: the message's buffers go)
                self._deferred[header.table].append(
                    _Waiting(header, mkeys[sel], np.asarray(positions[sel], np.int64), None if values is None else values[sel]))
                continue
            hops = (header.flags >> _HOP_SHIFT) + 1
            if hops > _MAX_HOPS:
                raise ProtocolError(f"keys {mkeys[sel][:5].tolist()} of table {shard.spec.name!r} were forwarded "
                                    f"{_MAX_HOPS} times without reaching their owner")
            h = Header(header.kind, cluster=self._cluster(), sender=self.rank, origin=header.origin,
                       table=header.table, request_id=header.request_id, part=header.part, n_keys=int(sel.sum()),
                       dim=header.dim, dtype=header.dtype, key_dtype=_KEYS, flags=POSITIONS | hops << _HOP_SHIFT)
            frames = [h.pack(), mkeys[sel], np.ascontiguousarray(positions[sel], np.int64)]
            if values is not None:
                frames.append(np.ascontiguousarray(values[sel]))
            self.forwards += len(frames[1])
            shard.forwards += len(frames[1])
            self._send(int(target), frames)

    def _targets(self, keys: np.ndarray, shard: Shard) -> np.ndarray:
        """Next hop of each key this node does not own: -1 (incoming here), its owner, or its manager."""
        bounds = self._bounds(shard.spec.table_id)
        targets = np.searchsorted(bounds, keys, side="right") - 1  # managers
        mine = targets == self.rank
        targets[mine] = shard.owner[keys[mine] - shard.start]
        targets[shard.slot[keys] == INCOMING] = -1
        stale = targets == self.rank  # the manager map says here, yet it is not here: only while in flight
        if stale.any():
            raise ProtocolError(f"node {self.rank} manages keys {keys[stale][:5].tolist()} of table "
                                f"{shard.spec.name!r} and records itself as owner, but does not hold them")
        return targets

    # ---- relocation -------------------------------------------------------------------------------
    def _localize(self, header: Header, keys: np.ndarray, shard: Shard) -> None:
        """Manager: record `origin` as the new owner and have each old owner hand the keys over."""
        if len(keys) and (keys.min() < shard.start or keys.max() >= shard.stop):
            raise ProtocolError(f"LOCALIZE for keys outside node {self.rank}'s managed range")
        idx = keys - shard.start
        old = shard.owner[idx].copy()
        shard.owner[idx] = header.origin
        for o in np.unique(old):
            sel = keys[old == o]
            if o == header.origin:
                continue  # already its owner (it asked twice): nothing moves
            h = Header(Kind.HANDOVER, cluster=self._cluster(), sender=self.rank, origin=header.origin,
                       table=header.table, request_id=header.request_id, n_keys=len(sel), key_dtype=_KEYS)
            if o == self.rank:
                self._handover(h, sel, shard)
            else:
                self._send(int(o), [h.pack(), np.ascontiguousarray(sel)])

    def _handover(self, header: Header, keys: np.ndarray, shard: Shard) -> None:
        """Old owner: send the rows of `keys` to `origin`; keys still on their way here wait."""
        keys = np.asarray(keys, np.int64)
        incoming = shard.slot[keys] == INCOMING
        if incoming.any():
            self._deferred[header.table].append(_Waiting(header, keys[incoming], None, None))
            if incoming.all():
                return
        moved, rows, state = shard.extract(keys[~incoming])
        if len(moved) < int((~incoming).sum()):
            log.error("node %d: HANDOVER of keys it neither owns nor awaits (table %r)", self.rank, shard.spec.name)
        if not len(moved):
            return
        h = Header(Kind.TRANSFER, cluster=self._cluster(), sender=self.rank, origin=header.origin,
                   table=header.table, request_id=header.request_id, n_keys=len(moved), dim=shard.spec.dim,
                   dtype=dtype_code(shard.spec.dtype), key_dtype=_KEYS)
        frames = [None, moved, np.ascontiguousarray(rows)]
        if state is not None:
            h.flags |= STATE
            frames.append(np.ascontiguousarray(state))
        frames[0] = h.pack()
        if header.origin == self.rank:  # handing to ourselves cannot happen: owner changes only on request
            raise ProtocolError(f"node {self.rank} asked to hand keys to itself")
        self._send(header.origin, frames)

    def _transfer(self, header: Header, p: Payload, shard: Shard) -> None:
        """New owner: take the rows, wake the localize callers, then apply what waited for them."""
        keys = np.asarray(p.keys, np.int64)
        if len(np.unique(keys)) != len(keys):
            raise ProtocolError("TRANSFER with duplicate keys")
        if (shard.slot[keys] >= 0).any():  # the manager made us owner (we may not have asked: accept), twice is wrong
            raise ProtocolError(f"TRANSFER of keys node {self.rank} already owns")
        _hooks.reach("server.transfer", node=self.rank, keys=keys)
        shard.insert(keys, p.values, p.state)
        self.relocated_in += len(keys)
        shard.relocated_in += len(keys)
        for rid, count in shard.arrived().items():
            self._tracker.on_reply(rid, count, header.sender)
        self._replay_deferred(header.table, shard)

    def _replica_sync(self, header: Header, p: Payload, shard: Shard) -> None:
        """Another node's accumulated changes of replicated keys: add them here, acknowledge."""
        keys = np.asarray(p.keys, np.int64)
        if shard.replicas is None or len(np.unique(keys)) != len(keys) or not shard.replicas.mask(keys).all():
            raise ProtocolError(f"REPLICA_SYNC for keys that table {shard.spec.name!r} does not replicate")
        shard.replicas.add_deltas(keys, p.values)
        h = self._reply_header(header, Kind.ACK)
        h.n_keys = len(keys)
        self._send(header.origin, [h.pack()])

    def _replay_deferred(self, table: int, shard: Shard) -> None:
        """After a TRANSFER: apply, in arrival order, the part of each waiting op whose keys are no
        longer incoming (they landed; keys that wait stay incoming until their TRANSFER).

        One batch per waiting message, so a HANDOVER that waited for 6,000 keys moves them in one
        TRANSFER and a pull gets one reply. Per-key order holds: earlier messages go first, and a
        key that is incoming for a later message was incoming for the earlier ones too (only
        TRANSFER, this thread, ends INCOMING). Keeping ops per key and replaying key by key sent
        one message per key: TRANSFERs took up to 0.8 s under thrash (word2vec --sampling preloc)."""
        waiting = self._deferred.pop(table, None)
        if not waiting:
            return
        still = self._deferred[table]  # ops this replay defers again land here, after ...
        for w in waiting:
            ready = shard.slot[w.keys] != INCOMING  # (m,)
            if ready.all():
                self._replay(w, shard)
            elif ready.any():
                still.append(w.take(~ready))  # ... the rest of earlier messages: order per key holds
                self._replay(w.take(ready), shard)
            else:
                still.append(w)
        if not still:
            del self._deferred[table]

    def _replay(self, w: "_Waiting", shard: Shard) -> None:
        """Apply one waiting operation; if it fails, its origin hears so and the others still run."""
        try:
            if w.header.kind == Kind.HANDOVER:
                self._handover(w.header, w.keys, shard)
            else:
                self._serve(w.header, Payload(w.keys, w.positions, w.values, None), shard)
        except Exception as exc:  # noqa: BLE001 - answered with an ERROR, never dropped
            self._reject(w.header, exc)

    def describe(self, limit: int = 10) -> list[str]:
        """Deferred operations per table (the oldest `limit`), for debug dumps. Racy reads: debug only."""
        lines = []
        for table, waiting in list(self._deferred.items()):
            lines.append(f"deferred on table {table}: {len(waiting)} operation(s) waiting for a TRANSFER")
            lines += [f"  {w!r}" for w in list(waiting)[:limit]]
        return lines or ["deferred operations: none"]

    def _is_node(self, table: int, rank: int) -> bool:
        return 0 <= rank < len(self._bounds(table)) - 1

    def _reply_header(self, header: Header, kind: Kind) -> Header:
        return Header(kind, cluster=self._cluster(), sender=self.rank, table=header.table,
                      request_id=header.request_id, part=header.part, origin=header.origin)

    def __repr__(self) -> str:
        return (f"<Server node={self.rank} handled={self.requests} errors={self.errors} forwards={self.forwards} "
                f"deferred={sum(map(len, self._deferred.values()))}>")


class _Waiting:
    """A message's keys that wait for their TRANSFER here, with their positions in the request
    part and their rows (copies), or a HANDOVER's keys (no positions, no rows)."""

    __slots__ = ("header", "keys", "positions", "values")

    def __init__(self, header: Header, keys: np.ndarray, positions: np.ndarray | None, values: np.ndarray | None):
        self.header = header
        self.keys = keys  # (m,) int64
        self.positions = positions  # (m,) int64 or None
        self.values = values  # (m, dim) or None

    def take(self, sel: np.ndarray) -> "_Waiting":
        return _Waiting(self.header, self.keys[sel], None if self.positions is None else self.positions[sel],
                        None if self.values is None else self.values[sel])

    def __repr__(self) -> str:
        return f"<Waiting {self.header!r} keys={self.keys[:5].tolist()}{'...' if len(self.keys) > 5 else ''}>"
