"""Joining: the coordinator's side of a node that joins the running cluster (membership.join is the
joiner's side), with backups or without.

    joiner -- HELLO{join, address} -->  coordinator  refuses (ABORT{reason}), or gives the next rank
                                                     and epoch e + 1: MEMBERSHIP{joined, outside} to
                                                     the members, JOINED{rank, ..., tables} to it
    with backups, once it declared the `tables` declarations begun before it came:
                                        coordinator  epoch e' + 1: MEMBERSHIP{entered, outside} to all
                                                     (the joiner ends B ranges' chains, placement.chains);
                                                     the heads send it SNAPSHOTs (server.chain)
    joiner -- SYNCED{e' + 1} -------->  coordinator  its copies are filled: from now on they count as whole

Why two epochs with backups: entering a chain means getting a SNAPSHOT of every table at once and
every write from then on, which a node can take only for tables it built. Until then the joiner
is a member `outside` the chains (membership.view): it pushes and pulls through the heads like
any member, and it is fenced, failed and counted in barriers like any member. Its declarations
of the tables declared before it are answered at once (`_decl_specs`), so it enters as soon as
its program declared them; a table declared later is built by every node with the chains of its
epoch. Its extra copies never make it a head, so nothing else changes at its entry (routes,
heads, other copies): the chains' heads pass their rows down once more, to the new tail.

Threads and ownership: the methods run in pskv-coord, as part of `Coordinator` (a mixin: it uses
the coordinator's state, declared in `Coordinator.__init__`).
"""

from __future__ import annotations

import logging
import time

from ..net.wire import COORDINATOR, Kind, control
from ..placement.chains import Chains

log = logging.getLogger(__name__)


class Joining:
    """HELLO{join} and, with backups, the joiner's entry into the chains (pskv-coord)."""

    def _join(self, address: str) -> None:
        """A node joins the running cluster: the next rank, a new epoch; it owes nothing to the barriers
        and table declarations before it (membership.join)."""
        problem = self._join_problem()
        if problem:
            self._transport.send_once(address, control(Kind.ABORT, self.cluster, COORDINATOR, {"reason": problem},
                                                       self.term))
            return
        rank, self._next_rank = self._next_rank, self._next_rank + 1
        live = sorted([r for r, s in self._state.items() if s in ("alive", "bye")] + [rank])
        self._transport.set_address(rank, address)
        self._addresses[rank] = address
        self._last_seen[rank] = time.monotonic()
        self._clocks[rank] = self._global_clock  # its workers start at the global clock
        self._declared[rank] = 0
        joiners = [[r, m] for r, (_, m) in self._joined.items() if self._state.get(r) in ("alive", "bye")]
        self._joined[rank] = (self._barrier_top + 1, len(live))
        tables = max([*self._decl_specs, *self._decls], default=-1) + 1  # declarations begun before it came
        if self.config.backups:
            self._outside[rank] = tables
        self._epoch += 1
        addresses = {str(r): self._addresses[r] for r in live}
        payload = {"epoch": self._epoch, "alive": live, "dead": -1, "joined": rank, "reason": "it joined the cluster",
                   "managers": self._managers, "addresses": addresses, **self._outside_field()}
        log.warning("coordinator: node %d joined from %s; membership epoch %d goes on with nodes %s", rank, address,
                    self._epoch, live)
        self._broadcast(Kind.MEMBERSHIP, payload, states=("alive", "bye"))
        self._state[rank] = "alive"
        self._send(rank, Kind.JOINED, {**payload, "rank": rank, "num_nodes": self.num_nodes, "host": self.host_rank,
                                       "decls": {str(q): spec for q, spec in self._decl_specs.items()},
                                       "barrier": self._barrier_top + 1, "clock": self._global_clock,
                                       "joiners": joiners, "tables": tables, "backups": self.config.backups})
        self._enter_due()

    def _join_problem(self) -> str | None:
        """Why a node cannot join now (None: it can)."""
        if not self._welcomed:
            return "the cluster is still forming; join once it runs"
        if self._stalled:
            return "the cluster is stopping"
        if self._leaving:
            return f"node(s) {sorted(self._leaving)} are leaving right now; try again in a moment"
        if aggregated := self._aggregated():
            return (f"table(s) {aggregated} aggregate per node (NodeAggregate), which cannot take a node that joins "
                    "later; start the cluster with the nodes it needs")
        return None

    def _enter_due(self) -> None:
        """With backups: each joiner outside the chains that declared every table declared before it
        came enters them, in an epoch of its own (MEMBERSHIP{entered})."""
        live = {r for r, s in self._state.items() if s in ("alive", "bye")}
        for rank, tables in sorted(self._outside.items()):
            if rank not in live or self._declared.get(rank, 0) < tables or self._stalled:
                continue
            del self._outside[rank]
            self._epoch += 1
            self._chains = Chains(self.num_nodes, self.config.backups, live - set(self._outside))
            ends = [r for r in range(self.num_nodes) if rank in self._chains.chain(r)]
            payload = {"epoch": self._epoch, "alive": sorted(live), "dead": -1, "entered": rank,
                       "reason": "it entered the chains", **self._outside_field()}
            log.warning("coordinator: node %d, which joined, enters the chains of key range(s) %s; membership epoch %d",
                        rank, ends, self._epoch)
            self._broadcast(Kind.MEMBERSHIP, payload, states=("alive", "bye"))

    def _outside_field(self) -> dict:
        """What a MEMBERSHIP says of the members outside the chains (nothing when there are none)."""
        return {"outside": sorted(self._outside)} if self._outside else {}

    def _chain_members(self, live) -> set[int]:
        """The live nodes in the chains: all but joiners that did not enter them yet."""
        return set(live) - set(self._outside)

    def _lost_copies(self, lost: list[int], live) -> str:
        """Why key ranges `lost` cannot go on: who was still filling them, and joiners that hold them whole
        (the coordinator's `_survivable`)."""
        kept = sorted(set().union(*(self._whole[r] for r in lost)))  # (only joiners' copies can be left)
        filling = sorted({n for r in lost for n in self._chains.chain(r) if n in live} - set(kept))
        notes = ([f"node(s) {filling} had not finished copying them"] if filling else []) + (
            [f"node(s) {kept} hold one, but a node that joined never heads a range"] if kept else [])
        return (f"key range(s) {lost} had no whole copy left on a node that can head them"
                + (f" ({'; '.join(notes)})" if notes else ""))

    def _aggregated(self) -> list[str]:
        """Tables that aggregate per node, declared or still being declared: either refuses a join (their
        level-2 arrays are sized by the nodes the cluster started with)."""
        specs = [*self._decl_specs.values(), *(spec for got in self._decls.values() for spec in got.values())]
        return sorted({str(spec.get("name")) for spec in specs if spec.get("aggregate")})

    def _refused(self, spec: dict) -> str | None:
        """Why a table every node declared alike cannot be made in this cluster (None: it can): one that
        aggregates per node, once a node that joined the running cluster is a member."""
        joiners = sorted(r for r in self._joined if self._state.get(r) in ("alive", "bye"))
        if not spec.get("aggregate") or not joiners:
            return None
        return (f"table {spec.get('name')!r} aggregates per node (NodeAggregate), which node(s) {joiners} that "
                f"joined the running cluster cannot take part in (its per-node arrays are sized by the "
                f"{self.num_nodes} nodes the cluster started with); declare it without aggregate=, or before any "
                "node joins")
