"""Changes: a member goes (it failed, or it leaves), and with backups the chains that hold each key range.

    node  -- HEARTBEAT{low} / ABORT ->  coordinator   silence > failure_timeout or ABORT: NODE_FAILED{rank};
                                                      with backups, if every range keeps a whole copy at
                                                      its new head: MEMBERSHIP{epoch, alive, dead}
    node  -- SYNCED{epoch} -------->    coordinator   every range it backs up is filled again
    node  -- LEAVE --------------->     coordinator   with backups: MEMBERSHIP{..., left} without it, or
                                                      LEFT{error}; without: LEFT{go: range -> new manager},
                                                      the node hands its rows and ranges over
                                                      (server.handoff), then
    node  -- LEAVE{ready} -------->     coordinator   MEMBERSHIP{..., managers, leaving}; every member
    node  -- DRAINED{epoch} ------>     coordinator   answers once its earlier requests are; then LEFT{done}

After each change the collectives stop waiting for who went (`Collectives.settle`), and once no
member is alive (all said bye) and none is handing over, SHUTDOWN_OK lets them all go.

Threads and ownership: pskv-coord only, as part of its `Coordinator`; members and their states
are the shared `Members` record's.
"""

from __future__ import annotations

import logging

from ..net.wire import Kind
from ..placement.chains import Chains
from .collectives import Collectives
from .members import LIVE, Members

log = logging.getLogger(__name__)
_HOST = "node {} runs the coordinator; it cannot leave (start the cluster with pskv launch)"


class Changes:
    """Failures, leaves (with backups, and by hand-over without), drains; the chains (pskv-coord)."""

    def __init__(self, members: Members, collectives: Collectives) -> None:
        self.members = members
        self.collectives = collectives
        self.backups = members.config.backups
        self.chains: Chains | None = None  # backups: the chains of this epoch
        self.whole: list[set[int]] = []  # backups: range -> the nodes whose copy of it is whole
        self.outside: dict[int, int] = {}  # backups: joiner -> declarations it owes before it enters the chains
        self.low: dict[int, int] = {}  # rank -> its low watermark of request ids (from heartbeats)
        self.managers = list(range(members.num_nodes))  # key range -> its manager (changes when a node leaves)
        self.leaving: dict[int, dict] = {}  # without backups: rank -> {"epoch", "drained"} of a node handing over

    def formed(self) -> None:
        """Every node of the start joined: with backups, the first chains (every copy whole)."""
        if self.backups:
            self.chains = Chains(self.members.num_nodes, self.backups, self.members.addresses)
            self.whole = [set(self.chains.chain(r)) for r in range(self.members.num_nodes)]

    def heartbeat(self, rank: int, p: dict) -> None:
        if "low" in p:
            self.low[rank] = int(p["low"])

    def synced(self, rank: int, p: dict) -> None:
        """Every copy `rank` holds in this epoch is filled (its snapshots came)."""
        if int(p["epoch"]) == self.members.epoch and self.chains is not None:
            for r, whole in enumerate(self.whole):
                if rank in self.chains.chain(r):
                    whole.add(rank)

    # ---- failures -----------------------------------------------------------------------------
    def fail(self, rank: int, reason: str) -> None:
        m = self.members
        if m.state.get(rank) == "failed":
            return
        m.state[rank] = "failed"
        m.failures.append((rank, reason))
        log.info("node %d failed: %s", rank, reason)  # the launcher and the nodes report it
        if not m.welcomed:  # the cluster cannot form: let the nodes that joined stop now
            m.broadcast(Kind.ABORT, {"reason": f"node {rank} failed before the cluster formed: {reason}"})
            return
        if self._survivable(rank, reason):
            return
        m.broadcast(Kind.NODE_FAILED, m.failure_payload(rank), states=LIVE)
        if rank in m.addresses:
            m.send(rank, Kind.NODE_FAILED, m.failure_payload(rank))  # if it only stalled, it learns why

    def _survivable(self, rank: int, reason: str, left: bool = False) -> bool:
        """With backups: go on without `rank` in a new epoch (MEMBERSHIP) if every key range's new
        head holds a whole copy; False: the cluster must stop (NODE_FAILED)."""
        m = self.members
        if not self.backups or m.stalled or self.chains is None:
            return False
        live = m.live()
        self.outside.pop(rank, None)  # (a joiner that never entered the chains)
        for whole in self.whole:
            whole.discard(rank)
        chains = Chains(m.num_nodes, self.backups, self.chain_members(live))
        lost = chains.unheaded(self.whole)  # a head must hold a whole copy (a joiner's never heads)
        if not live or lost:  # every whole copy of a range was on dead nodes (the rest still filling)
            m.failures[-1] = (rank, f"{reason}; {self._lost_copies(lost, live)}")
            return False
        m.epoch += 1
        self.chains = chains
        payload = {
            "epoch": m.epoch,
            "alive": sorted(live),
            "dead": rank,
            "reason": reason,
            "left": left,
            **self.outside_field(),
        }
        log.warning(
            "coordinator: node %d %s; membership epoch %d goes on with nodes %s",
            rank,
            "left" if left else f"failed ({reason})",
            m.epoch,
            sorted(live),
        )
        m.broadcast(Kind.MEMBERSHIP, payload, states=LIVE)
        m.send(rank, Kind.MEMBERSHIP, payload)  # if it only stalled, it learns it is out
        self._after()  # its workers leave barriers and clocks
        return True

    def _lost_copies(self, lost: list[int], live) -> str:
        """Why key ranges `lost` cannot go on: who was still filling them, and joiners that hold them whole."""
        chains = self.chains
        assert chains is not None  # (ranges are lost only with backups)
        kept = sorted(set().union(*(self.whole[r] for r in lost)))  # (only joiners' copies can be left)
        filling = sorted({n for r in lost for n in chains.chain(r) if n in live} - set(kept))
        notes = ([f"node(s) {filling} had not finished copying them"] if filling else []) + (
            [f"node(s) {kept} hold one, but a node that joined never heads a range"] if kept else []
        )
        return f"key range(s) {lost} had no whole copy left on a node that can head them" + (
            f" ({'; '.join(notes)})" if notes else ""
        )

    def outside_field(self) -> dict:
        """What a MEMBERSHIP says of the members outside the chains (nothing when there are none)."""
        return {"outside": sorted(self.outside)} if self.outside else {}

    def chain_members(self, live) -> set[int]:
        """The live nodes in the chains: all but joiners that did not enter them yet (membership.joining)."""
        return set(live) - set(self.outside)

    # ---- leaves -------------------------------------------------------------------------------
    def leave(self, rank: int, p: dict) -> None:
        """node.leave(): with backups, a new epoch without `rank` if every key range keeps a whole copy
        on the others (as for a death, but no failure); else LEFT{error}, and it stays. Without
        backups, in two steps (see the module's table): go, then ready."""
        if not self.backups:
            self._hand_over(rank, p)
            return
        m, error = self.members, None
        if self.chains is None:
            error = "the cluster has not formed yet"
        elif rank == m.host_rank:
            error = _HOST.format(rank)
        elif m.stalled:
            error = "the cluster is stopping"
        else:
            live = m.live() - {rank}
            lost = Chains(m.num_nodes, self.backups, self.chain_members(live)).unheaded(
                [whole - {rank} for whole in self.whole]
            )
            if lost:
                error = (
                    f"key range(s) {lost} would have no whole copy at their head without node {rank} (copies "
                    "are still being filled after an earlier change); try again in a moment"
                )
        if error is not None:
            m.send(rank, Kind.LEFT, {"error": error})
            return
        m.state[rank] = "left"
        self._survivable(rank, "it left the cluster", left=True)

    def _hand_over(self, rank: int, p: dict) -> None:
        """Without backups: LEAVE says go (each range `rank` manages goes to the member that manages
        the fewest), LEAVE{ready} (the rows are handed over) starts the epoch without it."""
        m = self.members
        alive = sorted(m.ranks())
        if p.get("phase") == "ready":
            if m.state.get(rank) == "alive" and rank in self.leaving:
                self._handed(rank, [int(r) for r in p["managers"]])
            return
        error = None
        if rank == m.host_rank:
            error = _HOST.format(rank)
        elif m.stalled:
            error = "the cluster is stopping"
        elif self.leaving and any(
            v.get("epoch") is None or len(v["drained"]) < len(alive) for v in self.leaving.values()
        ):
            error = f"node(s) {sorted(self.leaving)} are leaving right now; try again in a moment"
        elif alive == [rank]:
            error = "it is the last member; call shutdown() instead"
        if error is not None:
            m.send(rank, Kind.LEFT, {"error": error})
            return
        others = [r for r in alive if r != rank]
        managers = list(self.managers)
        for r, manager in enumerate(managers):
            if manager == rank:  # to the member with the fewest ranges, the next on the ring first
                load = {o: managers.count(o) for o in others}
                managers[r] = min(others, key=lambda o: (load[o], (o - rank) % (max(others) + 1)))
        self.leaving[rank] = {"epoch": None, "drained": set()}
        m.send(rank, Kind.LEFT, {"go": managers})

    def _handed(self, rank: int, managers: list[int]) -> None:
        """`rank` handed its rows and ranges over: the epoch without it (it still forwards what
        reaches it, as `leaving`, until every member drained)."""
        m = self.members
        m.state[rank] = "leaving"
        self.managers = managers
        m.epoch += 1
        self.leaving[rank] = {"epoch": m.epoch, "drained": set()}
        live = sorted(m.live())
        payload = {
            "epoch": m.epoch,
            "alive": live,
            "dead": rank,
            "reason": "it left the cluster",
            "left": True,
            "managers": self.managers,
            "leaving": [rank],
            "addresses": {str(r): m.addresses[r] for r in live},
        }
        log.warning("coordinator: node %d left; membership epoch %d goes on with nodes %s", rank, m.epoch, live)
        m.broadcast(Kind.MEMBERSHIP, payload, states=LIVE)
        m.send(rank, Kind.MEMBERSHIP, payload)
        self._after()
        self.drained(rank, {"epoch": m.epoch})  # (no other member: done at once)

    def drained(self, rank: int, p: dict) -> None:
        """A member answered every request it made before a leave's epoch: when all have, the leaving
        node may go (nothing can reach it any more)."""
        m = self.members
        for leaver, v in list(self.leaving.items()):
            if v["epoch"] is None or int(p["epoch"]) < v["epoch"]:
                continue
            v["drained"].add(rank)
            if m.live() <= v["drained"] | {leaver}:
                del self.leaving[leaver]
                m.state[leaver] = "left"
                m.send(leaver, Kind.LEFT, {"done": True})
                self.finish_if_done()

    # ---- the end ------------------------------------------------------------------------------
    def _after(self) -> None:
        """A member is gone: collectives, barriers and clocks stop waiting for it."""
        self.collectives.settle()
        self.finish_if_done()

    def finish_if_done(self) -> None:
        """Every member said bye (and no node is still handing over): let them all go."""
        m = self.members
        if all(s != "alive" for s in m.state.values()) and not self.leaving:
            m.broadcast(Kind.SHUTDOWN_OK, states=("bye",))
            m.finished = True
