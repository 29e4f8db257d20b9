"""Requests of a cluster with backups (`pskv.init(backups=B)`): sent to the heads of the keys'
ranges, kept until every key is answered, and sent again after a membership change.

Every write goes through its range's head, also when this node is the head (a message to its own
pskv-server): the head applies the writes of a range in one order and passes them down the chain
in that order (server.chain), which is what keeps backups equal to it. Pulls of rows this node
holds are served from memory before (client.stages.HeldRows), as without backups.

A request keeps its parts (keys, values, and which keys were answered) until it completes. When a
node dies, `retry` (pskv-server, at the membership change) sends every unanswered key again, with
the same request id and part, to the range's new head: a write that reached the chain before is
not applied twice (server.applied.Applied), and a key answered twice counts once (`Credit`).

`subscribe` is `localize` with backups: the node becomes a reader of the keys, holding a copy that
their chain keeps current (server.readers).

Threads and ownership: made by the calling thread; `on_part` runs where its replies arrive
(pskv-server, or the caller's own reply box for a blocking pull), `retry` in pskv-server, and in
the calling thread too when the membership changed while it sent (the change's retry may have run
before the last parts were sent, to the old heads). Both touch `answered`; an update lost between
them only sends a key once more.
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net.future import Future
from ..net.requests import Credit
from ..net.wire import ROWS, Kind
from ..placement import route
from ..store.shard import INCOMING


class BackedRequest:
    """One pull/push/set of a cluster with backups: its parts and which keys were answered."""

    __slots__ = ("table", "kind", "out", "rid", "parts", "reply_to", "flags")  # (kind AGG_PUSH: with rounds)

    def __init__(self, table, kind: Kind, out, flags: int = 0) -> None:
        self.table = table  # the client.table.Table that sent it
        self.kind = kind
        self.out = out  # (n, dim) the caller's result for pulls (and pushes with flag ROWS)
        self.rid = 0
        self.parts: list[tuple] = []  # part -> (keys, values or None, positions in out or None, answered (m,) bool,
        #                                       rounds (m,) or None: an aggregated table's, server.rounds)
        self.reply_to = 0
        self.flags = flags  # ROWS: a push that wants the rows after it (client.aggregate)

    def send(self, dest: int, keys: np.ndarray, values, gpos, rounds=None) -> None:
        """A new part: keep copies of its arrays (the caller may reuse its own), and send it."""
        part = len(self.parts)
        self.parts.append((keys, values, gpos, np.zeros(len(keys), bool), rounds))
        t = self.table
        t.ctx.endpoint.request(
            dest,
            self.kind,
            t.spec.table_id,
            self.rid,
            part=part,
            dim=t.dim,
            reply_to=self.reply_to,
            flags=self.flags,
            keys=keys,
            values=values,
            rounds=rounds,
        )

    def on_part(self, sender: int, payload) -> Credit | None:
        """Write a reply's rows (pulls); count only the keys no earlier reply answered."""
        if payload is None:  # served locally
            return None
        header, p = payload
        if header.part >= len(self.parts):
            raise ProtocolError(f"node {sender} answered part {header.part} of a request with {len(self.parts)} parts")
        keys, _, gpos, answered, _ = self.parts[header.part]
        if p.positions is None and self.kind != Kind.PULL and not self.flags:  # a whole write part (most acks)
            new = len(keys) - int(answered.sum()) if answered.any() else len(keys)
            answered[:] = True
            return Credit(new)
        pos = np.arange(len(keys)) if p.positions is None else np.asarray(p.positions, np.int64)
        if len(pos) and (pos.min() < 0 or pos.max() >= len(keys)):
            raise ProtocolError(f"node {sender} answered positions outside part {header.part}")
        new = ~answered[pos]
        answered[pos] = True
        if (self.kind == Kind.PULL or self.flags & ROWS) and new.any():
            t = self.table
            if p.values is None or p.values.shape != (len(pos), t.dim) or p.values.dtype != t.dtype:
                raise ProtocolError(
                    f"node {sender} answered a {self.kind.name.lower()} on table {t.name!r} with rows that do not fit"
                )
            fresh = pos[new]
            kernels.put_rows(self.out, fresh if gpos is None else gpos[fresh], np.ascontiguousarray(p.values[new]))
        return Credit(int(new.sum()))

    def retry(self) -> None:
        """pskv-server, after a membership change: send the unanswered keys of every part again, to
        their range's head now, keeping the request id and part (positions name the keys)."""
        t = self.table
        heads = t.ctx.chains().heads
        for part, (keys, values, _, answered, rounds) in enumerate(self.parts):
            left = np.flatnonzero(~answered)
            if not len(left):
                continue
            dest = heads[t.state.ranges.range_of(keys[left])]
            for d in np.unique(dest):
                sel = left[dest == d]
                t.ctx.endpoint.request(
                    int(d),
                    self.kind,
                    t.spec.table_id,
                    self.rid,
                    part=part,
                    dim=t.dim,
                    reply_to=self.reply_to,
                    flags=self.flags,
                    keys=keys[sel],
                    positions=sel,
                    values=None if values is None else values[sel],
                    rounds=None if rounds is None else rounds[sel],
                )

    def explain(self) -> str:
        """The unanswered keys (the first few), their key ranges and those ranges' heads now: for a stall report."""
        t = self.table
        left = [keys[~answered] for keys, _, _, answered, _ in self.parts if not answered.all()]
        if not left:
            return "every key answered"
        keys = np.concatenate(left)[:8]
        ranges = t.state.ranges.range_of(keys)
        heads = t.ctx.chains().heads[ranges]
        return (
            f"unanswered keys {keys.tolist()} of key ranges {ranges.tolist()}, headed by nodes {heads.tolist()} "
            f"(epoch's chains: {t.ctx.chains()!r})"
        )


def request(
    table,
    kind: Kind,
    keys: np.ndarray,
    values,
    out,
    gpos,
    direct: bool,
    rows: bool = False,
    rounds: np.ndarray | None = None,
) -> Future:
    """Send `keys` of `table` to their ranges' heads on a cluster with backups (see the module
    docstring). `rows`: a push whose Future's result is `out` filled with the rows after it (from
    the chain's tail: the aggregated tables' level 2, client.aggregate). `rounds` (kind AGG_PUSH): the round
    of each key, for a BSP/SSP aggregated table's level 2 (server.rounds)."""
    st = table.state
    ctx = table.ctx
    req = BackedRequest(table, kind, out, ROWS if rows else 0)
    req.rid, fut = ctx.tracker.new_request(
        len(keys), on_part=req.on_part, result=out, desc=table.desc(kind), retry=req.retry, explain=req.explain
    )
    if direct:
        req.reply_to = ctx.endpoint.reply_box()
    chains = ctx.chains()
    dest = chains.heads[st.ranges.range_of(keys)]
    st.remote_keys += len(keys)
    for d, idx, pk, pv in route.parts(keys, values, dest, ctx.num_nodes):
        if idx is None:  # the caller's arrays: keep copies for a resend
            req.send(d, np.array(pk, np.int64), None if pv is None else np.array(pv), gpos, rounds)
        else:
            req.send(d, pk, pv, idx if gpos is None else gpos[idx], None if rounds is None else rounds[idx])
    if ctx.chains() is not chains:  # a membership change came while we sent: its retry may have missed parts
        req.retry()
    if req.reply_to:
        fut.pumped_by(ctx.endpoint.pump)
    return fut


def subscribe(table, rid: int, keys: np.ndarray) -> None:
    """localize with backups: ask the heads of `keys` (marked incoming here, awaited by request
    `rid`) to make this node their reader (server.readers). After a membership change the keys
    still incoming are asked for again, of the new heads."""
    ctx, st = table.ctx, table.state

    def send(keys: np.ndarray) -> None:
        chains = ctx.chains()
        heads = chains.heads[st.ranges.range_of(keys)]
        for head in np.unique(heads):
            ctx.endpoint.request(int(head), Kind.SUBSCRIBE, table.spec.table_id, rid, keys=keys[heads == head])
        if ctx.chains() is not chains:  # a membership change came while we sent (see `request`)
            retry()

    def retry() -> None:
        left = keys[st.shard.slot[keys] == INCOMING]
        if len(left):
            send(left)

    ctx.tracker.set_retry(rid, retry)
    send(keys)
