"""Joining: the coordinator's side of a node that joins the running cluster (membership.join is the
joiner's side), with backups or without.

    joiner -- HELLO{join, address} -->  coordinator  refuses (ABORT{reason}), or gives the next rank
                                                     and epoch e + 1: MEMBERSHIP{joined, outside} to
                                                     the members, JOINED{rank, ..., tables} to it
    with backups, once it declared the `tables` declarations begun before it came:
                                        coordinator  epoch e' + 1: MEMBERSHIP{entered, outside} to all
                                                     (the joiner ends B ranges' chains, placement.chains);
                                                     the heads send it SNAPSHOTs (server.failover)
    joiner -- SYNCED{e' + 1} -------->  coordinator  its copies are filled: from now on they count as whole

Why two epochs with backups: entering a chain means getting a SNAPSHOT of every table at once and
every write from then on, which a node can take only for tables it built. Until then the joiner
is a member `outside` the chains (membership.view): it pushes and pulls through the heads like
any member, and it is fenced, failed and counted in barriers like any member. Its declarations
of the tables declared before it are answered at once (`Collectives.decl_specs`), so it enters as soon as
its program declared them; a table declared later is built by every node with the chains of its
epoch. Its extra copies never make it a head, so nothing else changes at its entry (routes,
heads, other copies): the chains' heads pass their rows down once more, to the new tail.

Threads and ownership: pskv-coord only, as part of its `Coordinator`; members and their states
are the shared `Members` record's, the chains and joiners outside them `Changes`'.
"""

from __future__ import annotations

import logging
import time

from ..net.wire import Kind
from ..placement.chains import Chains
from .changes import Changes
from .collectives import Collectives
from .members import LIVE, Members

log = logging.getLogger(__name__)


class Joining:
    """HELLO{join} and, with backups, the joiner's entry into the chains (pskv-coord)."""

    def __init__(self, members: Members, collectives: Collectives, changes: Changes) -> None:
        self.members, self.collectives, self.changes = members, collectives, changes
        self.next_rank = members.num_nodes  # the rank the next node that joins gets (ranks are never reused)

    def join(self, address: str) -> None:
        """A node joins the running cluster: the next rank, a new epoch; it owes nothing to the barriers
        and table declarations before it (membership.join)."""
        m, changes = self.members, self.changes
        problem = self.problem()
        if problem:
            m.refuse(address, problem)
            return
        rank, self.next_rank = self.next_rank, self.next_rank + 1
        live = sorted([*m.live(), rank])
        joiners = [[r, n] for r, (_, n) in self.collectives.joined.items() if m.state.get(r) in LIVE]
        tables = self.collectives.join(rank, len(live))  # declarations begun before it came
        m.add(rank, address, time.monotonic(), state="joining")  # (in no broadcast before its JOINED)
        if m.config.backups:
            changes.outside[rank] = tables
        m.epoch += 1
        addresses = {str(r): m.addresses[r] for r in live}
        payload = {
            "epoch": m.epoch,
            "alive": live,
            "dead": -1,
            "joined": rank,
            "reason": "it joined the cluster",
            "managers": changes.managers,
            "addresses": addresses,
            **changes.outside_field(),
        }
        log.warning(
            "coordinator: node %d joined from %s; membership epoch %d goes on with nodes %s",
            rank,
            address,
            m.epoch,
            live,
        )
        m.broadcast(Kind.MEMBERSHIP, payload, states=LIVE)
        m.state[rank] = "alive"
        m.send(
            rank,
            Kind.JOINED,
            {
                **payload,
                "rank": rank,
                "num_nodes": m.num_nodes,
                "host": m.host_rank,
                "decls": {str(q): spec for q, spec in self.collectives.decl_specs.items()},
                "barrier": self.collectives.barrier_top + 1,
                "clock": self.collectives.global_clock,
                "joiners": joiners,
                "tables": tables,
                "backups": m.config.backups,
            },
        )
        self.enter_due()

    def problem(self) -> str | None:
        """Why a node cannot join now (None: it can)."""
        m = self.members
        if not m.welcomed:
            return "the cluster is still forming; join once it runs"
        if m.stalled:
            return "the cluster is stopping"
        if self.changes.leaving:
            return f"node(s) {sorted(self.changes.leaving)} are leaving right now; try again in a moment"
        if aggregated := self.collectives.aggregated():
            return (
                f"table(s) {aggregated} aggregate per node (NodeAggregate), which cannot take a node that joins "
                "later; start the cluster with the nodes it needs"
            )
        return None

    def declared(self, rank: int, error: str | None) -> None:
        """After each TABLE_DECL: a joiner whose late declaration differs from the others' never enters
        the chains; the others that declared every table begun before they came enter them now."""
        if error and rank in self.changes.outside:
            self.changes.outside[rank] = 1 << 62  # its tables differ: it never enters the chains
        self.enter_due()

    def enter_due(self) -> None:
        """With backups: each joiner outside the chains that declared every table declared before it
        came enters them, in an epoch of its own (MEMBERSHIP{entered})."""
        m, changes = self.members, self.changes
        live = m.live()
        for rank, tables in sorted(changes.outside.items()):
            if rank not in live or self.collectives.declared.get(rank, 0) < tables or m.stalled:
                continue
            del changes.outside[rank]
            m.epoch += 1
            changes.chains = Chains(m.num_nodes, m.config.backups, live - set(changes.outside))
            ends = [r for r in range(m.num_nodes) if rank in changes.chains.chain(r)]
            payload = {
                "epoch": m.epoch,
                "alive": sorted(live),
                "dead": -1,
                "entered": rank,
                "reason": "it entered the chains",
                **changes.outside_field(),
            }
            log.warning(
                "coordinator: node %d, which joined, enters the chains of key range(s) %s; membership epoch %d",
                rank,
                ends,
                m.epoch,
            )
            m.broadcast(Kind.MEMBERSHIP, payload, states=LIVE)
