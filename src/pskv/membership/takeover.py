"""Takeover: when the node that runs the coordinator dies, the next live node runs it (backups >= 1).

Without a launcher, node 0's process runs the coordinator, so node 0 would be a single point of
failure. With backups every node keeps what the coordinator knows about it (the membership view,
its table declarations, the barriers and clock it waits for, the copies it is still filling), so
a new coordinator can be rebuilt from the survivors; nothing needs to be replicated while all is
well (docs/design.md §3c):

    every node   the coordinator's TICKs stop for failure_timeout
    successor    (the lowest live rank but the coordinator's host; if it stays silent too, the next
                 one after another failure_timeout) starts a ResumedCoordinator with a new term
                 (> every earlier one) and sends MOVED{address, term} to every node
    every node   sends from now on to the new address, and REJOIN{what it knows and waits for}
    coordinator  once every live node rejoined (or failure_timeout passed: those are failed too):
                 rebuilds declarations, barriers, clocks and whole copies, then fails the old
                 host as for any dead node: MEMBERSHIP with the next epoch; its ranges move

A coordinator stamps its term on every message; nodes drop a lower term (the old coordinator,
if it was only stopped, is not heard any more) and hold a higher one until its MOVED came
(membership.view). A node that waits for a MOVED longer than its candidates' turns fails with
NodeFailure, as without backups.

Threads and ownership: `Succession` is called by the node's pskv-server thread (from
CoordinatorClient.check and MOVED); `ResumedCoordinator` runs in its own pskv-coord thread like
every Coordinator.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..config import NodeConfig
from ..errors import NodeFailure, TransportError
from ..net.transport import Transport
from ..net.wire import COORDINATOR, Kind, control
from ..placement.chains import Chains
from .coordinator import Coordinator
from .view import View

log = logging.getLogger(__name__)
_TURNS = 8  # terms leave room for this many candidates per epoch (see Succession.candidates)
_UNTIL_REJOIN = 1 << 62  # a joiner outside the chains enters them only once its REJOIN said what it owes


def next_term(epoch: int, term: int, turn: int) -> int:
    """The term of a coordinator that candidate `turn` starts in membership `epoch`, taking over from
    the coordinator of `term`: above `term` and every term of an earlier epoch, and a later turn
    outranks an earlier one. A term is a generation times _TURNS plus the turn, and the generation
    is one more than the larger of the epoch and `term`'s generation, so terms grow by about _TURNS
    per takeover. (It was `(max(epoch, term) + 1) * _TURNS`, which mixed a term into the generation:
    8x per takeover, and from the sixth on the term no longer fit the header's 16-bit `epoch`
    field, so every node fenced the new coordinator.) Epochs count deaths, leaves and joins (two
    each with backups: in, then into the chains), so terms stay far inside the header's 16 bits
    (a coordinator stamps its term in `Header.epoch`) for thousands of changes."""
    return (max(epoch, term // _TURNS) + 1) * _TURNS + min(turn, _TURNS - 1)


class Succession:
    """A node's part in moving the coordinator to a survivor."""

    def __init__(self, view: View, config: NodeConfig, transport: Transport, release_held: Callable[[], None]) -> None:
        self.view = view
        self.config = config
        self._transport = transport
        self.release_held = release_held  # the dispatcher's: the new coordinator's messages held until MOVED
        self.coordinator: Coordinator | None = None  # the one this node took over, if any; the node closes it

    def possible(self) -> bool:
        """Whether the coordinator runs in a node (not a launcher) and backups can cover its death."""
        host = self.view.coordinator_host
        return bool(self.view.backups) and host is not None and host != self.view.rank and bool(self.candidates())

    def candidates(self) -> list[int]:
        """Who takes the coordinator over, in turn: candidate k does after (k + 1) failure_timeouts of
        silence (an earlier one may have died with the host, unnoticed: only the coordinator noticed deaths)."""
        return sorted(r for r in self.view.alive if r != self.view.coordinator_host)

    def after_silence(self, silent: float) -> dict | NodeFailure | None:
        """The coordinator has been silent for `silent` s (more than failure_timeout): this node's turn
        came (it takes over: the MOVED payload it tells itself), a candidate's may still come (None),
        or none of them took over (the node's failure)."""
        order, timeout = self.candidates(), self.config.failure_timeout
        turn = order.index(self.view.rank) if self.view.rank in order else len(order)
        if turn < len(order) and silent > (turn + 1) * timeout:
            address, term = self.take_over(silent)
            return {"address": address, "term": term, "host": self.view.rank}
        if silent <= (len(order) + 1) * timeout:
            return None  # a candidate takes over; its MOVED comes
        return NodeFailure(
            f"the coordinator on node {self.view.coordinator_host} has been silent for {silent:.1f} s "
            f"and none of nodes {order} took it over; this cluster cannot continue",
            -1,
            self.config.coordinator or "",
        )

    def take_over(self, silent: float) -> tuple[str, int]:
        """Start a coordinator in this process and tell every node; returns its address and term."""
        view = self.view
        term = next_term(view.epoch, view.coordinator_term, self.candidates().index(view.rank))
        dead = view.coordinator_host
        assert dead is not None and view.addresses is not None  # (a node hosted it; this node was welcomed)
        log.warning(
            "node %d: the coordinator on node %d has been silent for %.1f s; node %d takes it over (term %d)",
            view.rank,
            dead,
            silent,
            view.rank,
            term,
        )
        self.coordinator = ResumedCoordinator(self.config, view, term, dead).start()
        payload = {"address": self.coordinator.address, "term": term, "host": view.rank}
        for rank in sorted(view.addresses):
            if rank != view.rank:
                try:
                    self._transport.send(rank, control(Kind.MOVED, view.cluster, view.rank, payload))
                except TransportError as exc:
                    log.warning("node %d could not tell node %d that the coordinator moved: %s", view.rank, rank, exc)
        return self.coordinator.address, term

    def redirect(self, address: str, term: int, host: int) -> None:
        """From now on the coordinator is at `address` in node `host`'s process, speaking with `term`."""
        self.view.coordinator_host = host
        self.view.coordinator_term = term
        self._transport.set_address(COORDINATOR, address)

    def close(self) -> None:
        if self.coordinator is not None:
            self.coordinator.close()


class ResumedCoordinator(Coordinator):
    """A coordinator that takes over a running cluster: it learns the state from REJOINs, then
    goes on without the old host (`dead`)."""

    def __init__(self, config: NodeConfig, view: View, term: int, dead: int) -> None:
        super().__init__(view.num_nodes, config.host, 0, config, host_rank=view.rank, term=term)
        m = self.members
        m.cluster = view.cluster
        now = time.monotonic()
        assert view.addresses is not None  # (only a welcomed node takes over)
        for rank, address in view.addresses.items():
            m.add(rank, address, now, "alive" if rank in view.alive else "failed")
        m.welcomed = True
        m.epoch = view.epoch
        self.joining.next_rank = view.ranks  # ranks are never reused, also by the nodes that joined
        self.changes.outside = dict.fromkeys(view.outside, _UNTIL_REJOIN)  # its REJOIN says how many tables it owes
        self.changes.chains = Chains(m.num_nodes, config.backups, view.alive - view.outside)
        self._dead = dead
        self._waiting = set(view.alive) - {dead}  # ranks whose REJOIN did not come yet
        self._filling: dict[int, set[int]] = {}  # rank -> the ranges it still fills (from REJOIN)
        self._released_upto = -1  # every barrier generation up to it was released by the old coordinator
        self._deadline = now + config.failure_timeout
        self._early: dict[int, list] = {}  # rank -> (handler, payload) that came before its REJOIN

    def _handlers(self) -> dict:
        """Messages from a node that has not rejoined yet wait for its REJOIN (it sent them after
        it learned the new address, but on other threads' sockets, which may overtake it)."""

        def after_rejoin(handler):
            def handle(rank: int, p: dict) -> None:
                if rank in self._waiting:
                    self._early.setdefault(rank, []).append((handler, p))
                else:
                    handler(rank, p)

            return handle

        return {**{kind: after_rejoin(h) for kind, h in super()._handlers().items()}, Kind.REJOIN: self._rejoin}

    def _rejoin(self, rank: int, p: dict) -> None:
        if rank not in self._waiting:
            return
        self._waiting.discard(rank)
        m, changes = self.members, self.changes
        if int(p["epoch"]) > m.epoch:  # the old coordinator's last MEMBERSHIP reached it, not us
            m.epoch = int(p["epoch"])
            alive = {int(r) for r in p["alive"]}
            for r in m.state:
                if r not in alive:
                    m.state[r] = "failed"
            outside = {int(r) for r in p.get("outside", ())}
            changes.outside = {r: changes.outside.get(r, _UNTIL_REJOIN) for r in outside}
            changes.chains = Chains(m.num_nodes, self.config.backups, alive - outside)
        self.collectives.restore(rank, p)
        self._released_upto = max(self._released_upto, int(p["released"]))
        if "low" in p:
            changes.low[rank] = int(p["low"])
        self._filling[rank] = {int(r) for r in p.get("filling", ())}
        if "joined" in p and rank in changes.outside:  # a joiner outside the chains: the tables it owes
            changes.outside[rank] = int(p["joined"]["tables"])
        if p.get("bye"):
            m.state[rank] = "bye"
        for handler, payload in self._early.pop(rank, []):
            handler(rank, payload)
        if not self._waiting:
            self._resume("every live node rejoined")

    def _resume(self, why: str) -> None:
        """Every live node rejoined (or the rest stayed silent): go on without the old host."""
        m, changes = self.members, self.changes
        missing = sorted(self._waiting)
        self._waiting = set()
        log.info("coordinator (term %d) on node %d: %s; epoch %d", self.term, self.host_rank, why, m.epoch)
        live = m.live() - {self._dead}
        chains = changes.chains
        assert chains is not None  # (made in __init__, replaced only by another)
        changes.whole = [
            {n for n in chains.chain(r) if n in live and r not in self._filling.get(n, ())} for r in range(m.num_nodes)
        ]
        for gen in sorted(g for g in self.collectives.barriers if g <= self._released_upto):
            self.collectives.release(gen)  # the old coordinator released it to some nodes already
        changes.fail(
            self._dead,
            f"node {self._dead}, which ran the coordinator, went silent; node "
            f"{self.host_rank} took the coordinator over",
        )
        for rank in missing:
            changes.fail(rank, "it did not rejoin the coordinator that took over")
        self.joining.enter_due()  # a joiner that declared its tables meanwhile

    def _join(self, address: str) -> None:
        if self._waiting:  # (what it rebuilds must not change under it)
            self.members.refuse(address, f"node {self.host_rank} is taking the coordinator over; try again in a moment")
            return
        super()._join(address)

    def _tick(self, now: float) -> None:
        if self._waiting:
            if now > self._deadline:
                self._resume(f"node(s) {sorted(self._waiting)} did not rejoin within {self.config.failure_timeout:g} s")
            else:  # the nodes that rejoined must not find this one silent meanwhile (the others hold it)
                self.members.broadcast(Kind.TICK, {"barriers": {}})
            return
        super()._tick(now)
