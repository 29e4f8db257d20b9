"""Relocation (Lapse): LOCALIZE, HANDOVER and TRANSFER, and the operations that wait for a key in transfer.

`table.localize(keys)` sends LOCALIZE to the keys' manager, which records the new owner and sends
HANDOVER to the old owner, which extracts the rows (with updater state) and sends them in a
TRANSFER straight to the new owner. Requests that reach keys on their way here (slot -2) wait
in `_deferred` and are applied, in arrival order, when their TRANSFER lands. A HANDOVER for a
key that is itself still on its way here waits too, so chains of relocations pass the key on.

Leases (ownership stickiness). A LOCALIZE carries the lease its sender asks for (`Relocate.lease`,
in milliseconds, in the header's `part`). The manager remembers, per key, until when the node it
last moved the key to holds it; a LOCALIZE by another node before then is *declined* for that key:
the manager answers the requester with DECLINE, the key stays where it is, and the requester marks it absent
again, completes its localize for it and replays what waited for it here (forwarded to the owner).
Without leases, nodes that want the same keys (every batch's relations in KGE, uniform negatives)
took them from each other on every batch, and every pull waited for a TRANSFER: relocation and
the sampling schemes got slower than static placement as nodes were added (issue 11). Keys at
their manager since the start have no lease: the first localize moves them (pre-localization).
Each move doubles the key's next lease (contention backoff, at most 2**_MAX_DOUBLINGS leases):
when leases ran out, nodes that all want every key (uniform KGE) took them all again in one wave
per lease; with backoff the waves thin out as a long run goes on.

Threads and ownership: everything here runs in pskv-server. It writes the manager map
`Shard.owner` and `_deferred`, which no other thread touches; rows move only through `Shard`
methods (every stripe lock). Each deferred operation is replayed on its own: one that fails gets
its ERROR (`reject`) and the later ones still run.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable

import numpy as np

from .. import _hooks
from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.wire import FORCE, Header, Kind, Payload
from ..store.shard import INCOMING, Shard

log = logging.getLogger(__name__)
_MAX_DOUBLINGS = 10  # a key's lease grows to at most 1024 leases
_MAX_MS = 2**32 - 1  # a DECLINE's `dim` (ms left) is a uint32


class Relocation:
    def __init__(
        self,
        endpoint: Endpoint,
        tracker: RequestTracker,
        *,
        serve: Callable[[Header, Payload, Shard], None],
        reject: Callable[[Header, Exception], None],
        on_declined: Callable[[int, np.ndarray, int, float], None] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self.rank = endpoint.rank
        self._tracker = tracker  # completes this node's localize requests when TRANSFERs land
        self._serve = serve  # applies a waiting pull/push/set once its keys landed
        self._reject = reject  # answers a waiting operation that failed with ERROR
        self._on_declined = on_declined  # (table id, keys, owner, seconds): where declined keys stay, how long
        self._deferred: dict[int, list[_Waiting]] = collections.defaultdict(list)  # table -> ops, in arrival order
        self._leases: dict[int, np.ndarray] = {}  # table -> (rows,) float64 monotonic end of each key's lease
        self._moves: dict[int, np.ndarray] = {}  # table -> (rows,) int64 moves of each key so far
        self.relocated_in = 0  # keys received by TRANSFER
        self.declined = 0  # manager: keys whose move it declined (held under another node's lease)

    # ---- manager, old owner, new owner ------------------------------------------------------------
    def localize(self, header: Header, p: Payload, shard: Shard) -> None:
        """Manager: record `origin` as the new owner and have each old owner hand the keys over."""
        keys = np.asarray(p.keys, np.int64)
        owner = shard.owner[keys]
        if (owner < 0).any():
            handed = owner <= -2
            if (owner == -1).any():
                raise ProtocolError(
                    f"LOCALIZE for keys {keys[owner == -1][:5].tolist()} that node {self.rank} does not manage"
                )
            for node in np.unique(owner[handed]):  # their range went on to another manager: so does this
                at = np.ascontiguousarray(keys[owner == node], np.int64)
                self._endpoint.forward(int(Shard.handed_to(int(node))), header, header.flags, keys=at)
            keys = keys[~handed]
            if not len(keys):
                return
        idx = keys
        old = shard.owner[idx].astype(np.int64)
        lease = self._leases.get(header.table)
        if lease is None:
            lease = self._leases[header.table] = np.full(len(shard.owner), -np.inf)
            self._moves[header.table] = np.zeros(len(shard.owner), np.int64)
        now = time.monotonic()
        held = (old != header.origin) & (lease[idx] > now)  # moved to another node within its lease: stays
        if header.flags & FORCE:
            held[:] = False
        if held.any():
            self.declined += int(held.sum())
            self._send_decline(
                header, np.ascontiguousarray(keys[held], np.int64), old[held], lease[idx[held]] - now, shard
            )
            keys, idx, old = keys[~held], idx[~held], old[~held]
        moving = old != header.origin
        moves = self._moves[header.table]
        moves[idx[moving]] += 1
        # contention backoff: a key's lease doubles with each move, so keys that nodes keep taking
        # from each other soon stay put, while keys moved once can move again after one lease
        lease[idx[moving]] = now + header.part / 1000.0 * np.exp2(np.minimum(moves[idx[moving]] - 1, _MAX_DOUBLINGS))
        shard.owner[idx] = header.origin
        for o in np.unique(old):
            sel = np.ascontiguousarray(keys[old == o], np.int64)
            if o == header.origin:
                continue  # already its owner (it asked twice): nothing moves
            handover = self._endpoint.reply_header(header, Kind.HANDOVER, 0)
            if o == self.rank:
                self._hand_over(handover, sel, shard)
            else:
                self._endpoint.send(int(o), handover, keys=sel)

    def release(self, table: int, keys: np.ndarray) -> None:
        """Manager: forget the leases and move counts of `keys`: one node alone intends to use them
        (server.intents), so its localize moves them whoever held them last."""
        lease = self._leases.get(table)
        if lease is not None:
            lease[keys] = -np.inf
            self._moves[table][keys] = 0

    def handover(self, header: Header, p: Payload, shard: Shard) -> None:
        """Old owner: send the rows of the keys to `origin`."""
        self._hand_over(header, np.asarray(p.keys, np.int64), shard)

    def on_decline(self, header: Header, p: Payload, shard: Shard) -> None:
        """Requester: the keys' manager declined our localize of them; they stay at node `part` for
        at least `dim` ms more (DECLINE)."""
        self._declined(header, np.asarray(p.keys, np.int64), header.part, header.dim / 1000.0, shard)

    def _send_decline(
        self, header: Header, keys: np.ndarray, owners: np.ndarray, left: np.ndarray, shard: Shard
    ) -> None:
        """Manager: tell the requester that `keys` stay where they are, one DECLINE per owner, with
        the seconds `left` of the shortest lease holding them (it need not ask again before)."""
        for owner in np.unique(owners):
            at = owners == owner
            sel, seconds = np.ascontiguousarray(keys[at]), float(left[at].min())
            if header.origin == self.rank:
                self._declined(header, sel, int(owner), seconds, shard)
            else:
                decline = self._endpoint.reply_header(header, Kind.DECLINE, 0)
                decline.part = int(owner)
                decline.dim = min(int(seconds * 1000), _MAX_MS)
                self._endpoint.send(header.origin, decline, keys=sel)

    def _declined(self, header: Header, keys: np.ndarray, owner: int, seconds: float, shard: Shard) -> None:
        """Requester: the manager keeps `keys` at `owner` for `seconds` at least. They are absent
        here again; localizes waiting for them complete; what waited for them here is replayed
        (and forwarded to the owner); the table learns where they are and for how long
        (on_declined: location cache, no asking again meanwhile)."""
        shard.unmark_incoming(keys)
        if self._on_declined is not None:
            self._on_declined(header.table, keys, owner, seconds)
        for rid, count in shard.arrived().items():
            self._tracker.on_reply(rid, count, header.sender)
        self._replay_deferred(header.table, shard)

    def transfer(self, header: Header, p: Payload, shard: Shard) -> None:
        """New owner: take the rows, wake the localize callers, then apply what waited for them."""
        keys = np.asarray(p.keys, np.int64)
        if len(np.unique(keys)) != len(keys):
            raise ProtocolError(f"TRANSFER of {len(keys)} keys of table {shard.spec.name!r} with duplicates")
        if (shard.slot[keys] >= 0).any():  # the manager made us owner (we may not have asked: accept), twice is wrong
            raise ProtocolError(
                f"TRANSFER of keys {keys[shard.slot[keys] >= 0][:5].tolist()} that node {self.rank} already owns"
            )
        _hooks.reach("server.transfer", node=self.rank, keys=keys)
        assert p.values is not None  # (unpack: a TRANSFER carries values)
        shard.insert(keys, p.values, p.state)
        self.relocated_in += len(keys)
        shard.relocated_in += len(keys)
        self.landed(header, shard)

    def landed(self, header: Header, shard: Shard) -> None:
        """Rows came here (TRANSFER, or a leaving node's HANDOFF): wake the localize callers that waited
        for them, then apply what waited for them."""
        for rid, count in shard.arrived().items():
            self._tracker.on_reply(rid, count, header.sender)
        self._replay_deferred(header.table, shard)

    def fail(self, header: Header, error: ProtocolError) -> None:
        """A TRANSFER to this node failed here: its localize request fails with `error`."""
        self._tracker.on_reply(header.request_id, 0, header.sender, error=error)

    def _hand_over(self, header: Header, keys: np.ndarray, shard: Shard) -> None:
        """Old owner: send the rows of `keys` to `origin`; keys still on their way here wait."""
        if header.origin == self.rank:  # (a leaving node handed them here, and forwarded our own HANDOVER)
            return
        incoming = shard.slot[keys] == INCOMING
        if incoming.any():
            self._deferred[header.table].append(_Waiting(header, keys[incoming], None, None))
            if incoming.all():
                return
        moved, rows, state = shard.extract(keys[~incoming])
        if len(moved) < int((~incoming).sum()):
            gone = np.setdiff1d(keys[~incoming], moved)
            owner = shard.owner[gone]
            for node in np.unique(owner[owner <= -2]):  # this node handed them on (it is leaving): so does this
                self._endpoint.send(Shard.handed_to(int(node)), header, keys=np.ascontiguousarray(gone[owner == node]))
            if (owner > -2).any():
                log.error("node %d: HANDOVER of keys it neither owns nor awaits (table %r)", self.rank, shard.spec.name)
        if not len(moved):
            return
        self._endpoint.reply(header, Kind.TRANSFER, keys=moved, values=rows, state=state)

    # ---- operations waiting for a TRANSFER --------------------------------------------------------
    def defer(self, header: Header, keys: np.ndarray, positions: np.ndarray | None, values: np.ndarray | None) -> None:
        """Keep a request's keys that are on their way here (copies: the message's buffers go)."""
        self._deferred[header.table].append(_Waiting(header, keys, positions, values))

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

    def _replay(self, w: _Waiting, shard: Shard) -> None:
        """Apply one waiting operation; if it fails, its origin hears so and the others still run."""
        try:
            if w.header.kind == Kind.HANDOVER:
                self._hand_over(w.header, w.keys, shard)
            else:
                self._serve(w.header, Payload(w.keys, w.positions, w.values, None), shard)
        except Exception as exc:  # noqa: BLE001 - answered with an ERROR, never dropped
            self._reject(w.header, exc)

    def waiting(self) -> int:
        return sum(map(len, list(self._deferred.values())))

    def describe(self, limit: int = 10) -> list[str]:
        """Deferred operations per table (the oldest `limit`), for debug dumps. Racy reads: debug only."""
        lines = []
        for table, waiting in list(self._deferred.items()):
            lines.append(f"deferred on table {table}: {len(waiting)} operation(s) waiting for a TRANSFER")
            lines += [f"  {w!r}" for w in list(waiting)[:limit]]
        return lines or ["deferred operations: none"]


class _Waiting:
    """A message's keys that wait for their TRANSFER here, with their positions in the request
    part and their rows (copies), or a HANDOVER's keys (no positions, no rows)."""

    __slots__ = ("header", "keys", "positions", "values")

    def __init__(self, header: Header, keys: np.ndarray, positions: np.ndarray | None, values: np.ndarray | None):
        self.header = header
        self.keys = keys  # (m,) int64
        self.positions = positions  # (m,) int64 or None
        self.values = values  # (m, dim) or None

    def take(self, sel: np.ndarray) -> _Waiting:
        return _Waiting(
            self.header,
            self.keys[sel],
            None if self.positions is None else self.positions[sel],
            None if self.values is None else self.values[sel],
        )

    def __repr__(self) -> str:
        return f"<Waiting {self.header!r} keys={self.keys[:5].tolist()}{'...' if len(self.keys) > 5 else ''}>"
