"""Members: the coordinator's record of the nodes, shared by its protocol parts.

Each part of the coordinator speaks one group of protocols (membership.rendezvous, .collectives,
.changes, .joining) and keeps its own state; what they all read is here: every node's address and
state, when it was last heard, the membership epoch, whether the cluster formed or is stopping,
and how to reach the nodes (`send`, `broadcast`, `refuse`).

    state of a rank   "alive" -> "bye" (shutdown)      -> the cluster ends once none is alive
                      "alive" -> "failed"              (silence, ABORT, the launcher's report)
                      "alive" -> "leaving" -> "left"   (node.leave(); with backups straight to "left")

Threads and ownership: pskv-coord alone reads and writes a Members (its `Coordinator` owns it).
"""

from __future__ import annotations

import logging
import random

from ..config import NodeConfig
from ..net.transport import Transport
from ..net.wire import COORDINATOR, Kind, control

log = logging.getLogger(__name__)

LIVE = ("alive", "bye")  # the states of members: still serving their rows, counted in a membership


class Members:
    """Who is in the cluster, as the coordinator knows it; `send`/`broadcast` reach them."""

    def __init__(
        self, num_nodes: int, config: NodeConfig, transport: Transport, *, host_rank: int | None, term: int
    ) -> None:
        self.num_nodes = num_nodes  # the nodes the cluster started with (ranks of joiners go on from here)
        self.config = config
        self.host_rank = host_rank  # the node whose process runs this coordinator (None: a launcher)
        self.term = term  # stamped on every message: 0, or the epoch in which it took over (membership.takeover)
        self.transport = transport
        self.drops = transport.drops  # what it drops: counted per peer, one log line a minute (net.drops)
        self.cluster = random.randrange(1, 1 << 32)
        self.addresses: dict[int, str] = {}
        self.state: dict[int, str] = {}  # rank -> "alive" | "bye" | "failed" | "leaving" | "left"
        self.last_seen: dict[int, float] = {}  # rank -> monotonic time of its last message
        self.epoch = 1  # the membership epoch; WELCOME starts epoch 1
        self.welcomed = False  # every node of the start joined: the cluster runs
        self.stalled = False  # a STALLED went out: the cluster is stopping
        self.finished = False  # the coordinator's loop ends
        self.failures: list[tuple[int, str]] = []  # (rank, reason), for the launcher's report

    def add(self, rank: int, address: str, now: float, state: str = "alive") -> None:
        """`rank` is at `address` (a HELLO, a join, or a coordinator that took over learning them)."""
        self.transport.set_address(rank, address)
        self.addresses[rank] = address
        self.state[rank] = state
        self.last_seen[rank] = now

    def ranks(self, states=("alive",)) -> set[int]:
        """The ranks in one of `states`."""
        return {r for r, s in self.state.items() if s in states}

    def live(self) -> set[int]:
        """The members: alive, or said bye and still serving their rows."""
        return self.ranks(LIVE)

    def heard_all(self, now: float) -> None:
        """Count every node as heard now (this process did not run for a while: their silence was ours)."""
        for rank in self.last_seen:
            self.last_seen[rank] = now

    def silent(self, now: float, timeout: float) -> list[tuple[int, float]]:
        """(rank, seconds) of members (and nodes still handing over) not heard for longer than `timeout`."""
        return [
            (rank, now - self.last_seen[rank])
            for rank, state in list(self.state.items())
            if state in ("alive", "bye", "leaving") and now - self.last_seen[rank] > timeout
        ]

    def send(self, rank: int, kind: Kind, payload: dict | None = None) -> None:
        try:
            self.transport.send(rank, control(kind, self.cluster, COORDINATOR, payload, self.term))
        except Exception as exc:  # noqa: BLE001 - a dead node's full queue must not stop the coordinator
            log.warning("coordinator could not send %s to node %d: %s", kind.name, rank, exc)

    def broadcast(self, kind: Kind, payload: dict | None = None, states=("alive",)) -> None:
        for rank, state in list(self.state.items()):
            if state in states:
                self.send(rank, kind, payload)

    def refuse(self, address: str, reason: str) -> None:
        """ABORT{reason} to a node that is no member (a refused HELLO), on a one-off socket: never
        replace the address of a rank that joined."""
        self.transport.send_once(address, control(Kind.ABORT, self.cluster, COORDINATOR, {"reason": reason}, self.term))

    def failure_payload(self, rank: int) -> dict:
        """NODE_FAILED's payload for `rank`: its address and the reason it failed."""
        reason = next((r for k, r in self.failures if k == rank), "failed")
        return {"rank": rank, "address": self.addresses.get(rank, ""), "reason": reason}

    def __repr__(self) -> str:
        return (
            f"<Members epoch={self.epoch} {sorted(self.state.items())}"
            f"{' stalled' if self.stalled else ''}{' finished' if self.finished else ''}>"
        )
