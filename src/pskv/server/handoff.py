"""Handoff: a node leaving a cluster without backups gives its rows and its key ranges to the others.

`node.leave()` (elastic membership) runs `give` in pskv-server once the coordinator said which
member takes over each range the node manages. For every table:

    rows it owns of other nodes' ranges   HANDOFF part=0 to their manager, which owns them again
    each range r it manages               OWNERS part=x (the keys node x owns) to the new manager,
                                          then HANDOFF part=r+1 with the rows it owns itself

and it writes `Shard.handed_to(m)` into its own manager map for every key it gave to m. From then
on whatever still reaches it for those keys goes on to m (requests: route.forward_hops; a
LOCALIZE or HANDOVER: server.relocate), so a request that was on its way completes once, at the
row's new place. Every message is answered by ACK; the leaving node's request completes when all
are, and only then does the coordinator start the membership epoch in which the others send to
the new managers. The node keeps forwarding until every member drained what it sent before that
epoch (membership.coordinator).

A sparse table (store.sparse) hands each range it manages as one HANDOFF of every written key
(`SparseShard.give`); what still reaches it for them goes on to the range's new manager
(`SparseShard.away`, server.serve).

Receiving (any member): HANDOFF inserts the rows; the receiver becomes their owner in its own
manager map where it manages them, except for keys its map gives to a third node (a LOCALIZE
moved them on meanwhile: the HANDOVER it sent the leaving node comes back to it, forwarded, and
passes the rows on). OWNERS writes the manager map.

Threads and ownership: pskv-server only (the leaving node's `give` through Dispatcher.soon).
"""

from __future__ import annotations

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import Header, Kind, Payload
from ..placement.ranges import KeyRanges
from ..store.shard import INCOMING, Shard
from ..store.sparse import SparseShard


def give(shard: Shard, ranges: KeyRanges, me: int, to: list[int]) -> list[tuple]:
    """Leaving node: take `shard`'s rows and managed ranges out (range r goes to node to[r]); returns
    the messages to send, (dest, kind, part, keys, rows, state, keys the ACK counts), in order."""
    if isinstance(shard, SparseShard):
        return _give_sparse(shard, ranges, me, to)
    if (shard.slot == INCOMING).any():
        raise ProtocolError(f"node {me} leaves while keys of table {shard.spec.name!r} are on their way to it")
    out: list[tuple] = []
    for r in ranges.managed_by(me):
        lo, hi = ranges.range_bounds(r)
        m = int(to[r])
        owners = shard.owner[lo:hi]  # (hi - lo,)
        for x in np.unique(owners):
            if x != me and x >= 0:
                keys = lo + np.flatnonzero(owners == x)
                out.append((m, Kind.OWNERS, int(x), keys, None, None, len(keys)))
        keys, rows, state = shard.extract(lo + np.flatnonzero(owners == me))
        out.append((m, Kind.HANDOFF, r + 1, keys, rows, state, max(len(keys), 1)))  # (empty: the range counts one)
        shard.owner[lo:hi] = Shard.handed_to(m)
    held = np.flatnonzero(shard.slot >= 0)  # what is left: rows of other nodes' ranges that moved here
    if len(held):
        managers = ranges.manager_of(held)
        for g in np.unique(managers):
            keys, rows, state = shard.extract(held[managers == g])
            out.append((int(g), Kind.HANDOFF, 0, keys, rows, state, len(keys)))
            shard.owner[keys] = Shard.handed_to(int(g))
    return out


def _give_sparse(shard: SparseShard, ranges: KeyRanges, me: int, to: list[int]) -> list[tuple]:
    """A sparse table: each range r `me` manages, every written key with its row and state, in one
    HANDOFF part=r+1 to to[r] (no OWNERS: a sparse key lives at its range's manager only)."""
    managed = ranges.managed_by(me)
    given = shard.give([(*ranges.range_bounds(r), int(to[r])) for r in managed])
    return [
        (int(to[r]), Kind.HANDOFF, r + 1, keys, rows, state, max(len(keys), 1))
        for r, (keys, rows, state) in zip(managed, given, strict=True)
    ]


def send(endpoint: Endpoint, table: int, rid: int, messages: list[tuple]) -> None:
    """Send what `give` took out as parts of request `rid`."""
    for dest, kind, part, keys, rows, state, _count in messages:
        if kind == Kind.OWNERS:
            endpoint.request(dest, kind, table, rid, part=part, keys=keys)
        else:
            endpoint.request(dest, kind, table, rid, part=part, dim=rows.shape[1], keys=keys, values=rows, state=state)


def on_handoff(endpoint: Endpoint, header: Header, p: Payload, shard: Shard) -> None:
    """HANDOFF: take the rows; manage range part - 1 from now if part > 0."""
    keys = np.asarray(p.keys, np.int64)
    if shard.spec.sparse:  # (the keys of a whole range; the next epoch routes it here)
        shard.insert(keys, np.asarray(p.values), None if p.state is None else np.asarray(p.state))
        endpoint.reply(header, Kind.ACK, n_keys=max(len(keys), 1))
        return
    if (shard.slot[keys] >= 0).any():
        raise ProtocolError(
            f"HANDOFF of keys {keys[shard.slot[keys] >= 0][:5].tolist()} of table "
            f"{shard.spec.name!r} that node {endpoint.rank} already owns"
        )
    if len(keys):
        shard.insert(keys, np.asarray(p.values), None if p.state is None else np.asarray(p.state))
        owner = shard.owner[keys]
        ours = (owner == header.sender) | (owner < 0) if header.part else owner == header.sender
        shard.owner[keys[ours]] = endpoint.rank
    endpoint.reply(header, Kind.ACK, n_keys=max(len(keys), 1) if header.part else len(keys))


def on_owners(endpoint: Endpoint, header: Header, p: Payload, shard: Shard) -> None:
    """OWNERS: node `part` owns these keys of a range this node takes over."""
    keys = np.asarray(p.keys, np.int64)
    shard.owner[keys] = header.part
    endpoint.reply(header, Kind.ACK, n_keys=len(keys))
