"""Rounds: level 2 of an aggregated BSP/SSP table with backups, at the head of each key range.

Without backups, level 2 is `server.aggregate.Owner`: the owner adds the nodes' round-r sums of
a key and, once every node sent its own, runs the updater once on the total and answers every
node with the rows after it. With backups the same happens at the range's head, and the round's
total is then a write of the head's own (a CHAIN with flag ROUNDS) that every copy applies in
chain order and counts (`Copies.rounds`, replicated, in snapshots too). The nodes are answered
(PULL_REPLY with the rows after the round) only once the chain's tail acknowledged that write,
so an answered round is on every live copy.

A node's sums are a request like any other with backups (client.backed, kind AGG_PUSH, flag
ROWS): kept until answered and sent again, with their rounds, to the new head after a
membership change. At the head, for each key:

    round == done   (done = rounds completed, Copies.rounds) the sum joins the round, once per
                    node (a resend of a sum already here only renews where to answer);
    round <  done   the round completed: if its write still waits for the tail, the answer
                    will come with it; else (a new head that got the round from the chain) the
                    rows now are the rows after it (round + 1 cannot complete without this
                    node's next sum, which it sends only after this answer): answered at once;
    round >  done   cannot happen (a node sends round r + 1 only after round r's answer): an
                    error for that request.

A round completes when every live node sent its sum. A node that dies leaves the rounds: what
it sent stays in the sums, and after the membership change the rounds that waited only for it
complete (`Failover.on_change`). Sums that a dead head had collected are sent again by the
survivors; a round it completed but whose write never reached the backups is collected again.

Threads and ownership: pskv-server only (this node's own sums come as messages to itself).
"""

from __future__ import annotations

import logging

import numpy as np

from .. import _hooks
from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.wire import ROUNDS, Header, Kind, Payload
from ..store.shard import Shard
from ..store.spec import TableSpec
from .backups import Backups

log = logging.getLogger(__name__)


class Rounds:
    """Level 2 of one aggregated BSP/SSP table with backups, for the ranges this node heads."""

    def __init__(
        self,
        spec: TableSpec,
        num_nodes: int,
        backups: Backups,
        main: Shard,
        endpoint: Endpoint,
        tracker: RequestTracker,
        alive,
    ) -> None:
        self.spec = spec
        self._copies = backups.copies  # heads, ranges, rounds counted per key
        self._chain = backups.chain  # the write path: a completed round's write
        self._main = main
        self._endpoint = endpoint
        self._tracker = tracker  # our round writes are this node's requests
        self._alive = alive  # alive() -> the live ranks
        rows = spec.rows
        self._acc = np.zeros((rows, spec.dim), spec.dtype)  # (rows, dim) the nodes' sums of each key's open round
        self._got = np.zeros((rows, num_nodes), bool)  # (rows, nodes) node n sent its sum of the open round
        self._to = np.zeros((rows, num_nodes, 3), np.int64)  # (rows, nodes, 3) where to answer: request, part,
        # position
        self._waiting: dict[int, list] = {}  # our round write's request id -> its answers [(node, rid, part, pos,
        # keys)]
        self._pending = np.zeros(rows, bool)  # (rows,) a completed round of the key waits for the tail
        self.completed = 0  # key-rounds completed here
        self.answered_again = 0  # sums of completed rounds that came again and were answered at once
        backups.failover.on_change(self._membership_changed)

    # ---- a node's sums (AGG_PUSH) -----------------------------------------------------------------
    def serve(self, header: Header, p: Payload) -> None:
        keys = np.asarray(p.keys, np.int64)
        if len(keys) > 1 and not (np.diff(keys) > 0).all():
            raise ProtocolError(f"{header!r}: an aggregated push needs sorted distinct keys")
        if p.rounds is None or p.values is None:
            raise ProtocolError(f"{header!r}: an aggregated push with backups carries a round per key and values")
        rounds, sums = np.asarray(p.rounds, np.int64), p.values
        positions = np.arange(len(keys)) if p.positions is None else np.asarray(p.positions, np.int64)
        here = self._copies.heads(header.table, keys) == self._endpoint.rank
        if not here.all():  # sent before a membership change we saw: its sender sends them again
            keys, rounds, sums, positions = keys[here], rounds[here], sums[here], positions[here]
        done = self._copies.rounds[header.table][keys]
        if (rounds > done).any():
            bad = np.flatnonzero(rounds > done)[:5]
            raise ProtocolError(
                f"node {header.origin} sent rounds {rounds[bad].tolist()} of keys {keys[bad].tolist()} "
                f"of table {self.spec.name!r}, which completed {done[bad].tolist()} rounds"
            )
        past = rounds < done
        if past.any():
            again = past & ~self._pending[keys]  # (pending ones are answered with their round's write)
            if again.any():
                self.answered_again += int(again.sum())
                self._answer(header.origin, header.request_id, header.part, positions[again], keys[again])
            keys, sums, positions = keys[~past], sums[~past], positions[~past]
        if not len(keys):
            return
        o = header.origin
        new = ~self._got[keys, o]
        self._acc[keys[new]] += sums[new]
        self._got[keys, o] = True
        self._to[keys, o] = np.stack(
            [np.full(len(keys), header.request_id), np.full(len(keys), header.part), positions], axis=1
        )
        self._complete(keys)

    def _membership_changed(self) -> None:
        """Rounds that waited only for a node that died complete now."""
        self._complete(np.flatnonzero(self._got.any(axis=1)))

    # ---- a round completes --------------------------------------------------------------------------
    def _complete(self, keys: np.ndarray) -> None:
        alive = sorted(self._alive())
        if not len(keys) or not alive:
            return
        keys = keys[self._copies.heads(self.spec.table_id, keys) == self._endpoint.rank]
        full = keys[self._got[keys][:, alive].all(axis=1)]
        if not len(full):
            return
        ranges = self._copies.range_of(self.spec.table_id, full)
        for r in np.unique(ranges).tolist():
            self._write(full[ranges == r], alive)

    def _write(self, keys: np.ndarray, alive: list[int]) -> None:
        """The round of `keys` (one range) is complete: our write of the total down the chain, and
        the answers for when the tail has it."""
        sums = self._acc[keys].copy()  # (m, dim)
        answers = []
        for node in alive:
            sent = self._got[keys, node]
            if sent.any():
                k, to = keys[sent], self._to[keys[sent], node]
                for rid, part in np.unique(to[:, :2], axis=0).tolist():
                    sel = (to[:, 0] == rid) & (to[:, 1] == part)
                    answers.append((node, rid, part, to[sel, 2], k[sel]))
        self._acc[keys] = 0
        self._got[keys] = False
        self._pending[keys] = True
        self.completed += len(keys)
        rid, fut = self._tracker.new_request(len(keys), desc=f"round of table {self.spec.name!r}")
        header = self._endpoint.own_request(Kind.CHAIN, self.spec.table_id, rid, dim=self.spec.dim, flags=ROUNDS)
        self._waiting[rid] = answers
        self._tracker.set_retry(rid, lambda: self._chain.write_round(header, keys, sums, self._main))
        fut.add_done_callback(lambda f: self._written(rid, keys, f.exception()))
        if not self._chain.write_round(header, keys, sums, self._main):  # cannot happen: _complete checked
            raise ProtocolError(f"node {self._endpoint.rank} completed a round of keys it does not head")

    def _written(self, rid: int, keys: np.ndarray, error) -> None:
        """The tail has our round write (or it failed): answer the nodes that sent sums to it."""
        answers = self._waiting.pop(rid, [])
        self._pending[keys] = False
        if error is not None:  # the node is failing; its requests fail with it
            log.warning(
                "node %d: a round of table %r was not acknowledged: %s", self._endpoint.rank, self.spec.name, error
            )
            return
        if _hooks.points:
            _hooks.reach("rounds.written", node=self._endpoint.rank, keys=keys)
        alive = self._alive()
        for node, nrid, part, positions, k in answers:
            if node in alive:
                self._answer(node, nrid, part, positions, k)

    def _answer(self, node: int, rid: int, part: int, positions: np.ndarray, keys: np.ndarray) -> None:
        rows = np.empty((len(keys), self.spec.dim), self.spec.dtype)  # (n, dim) the rows after the round
        self._main.pull(keys, rows)
        self._endpoint.answer(
            node,
            Kind.PULL_REPLY,
            self.spec.table_id,
            rid,
            part=part,
            n_keys=len(keys),
            positions=positions,
            values=rows,
        )

    def __repr__(self) -> str:
        return (
            f"<Rounds table={self.spec.name!r} completed={self.completed} waiting={len(self._waiting)} "
            f"answered_again={self.answered_again}>"
        )
