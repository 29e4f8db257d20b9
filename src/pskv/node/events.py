"""NodeEvents: what this node does with the coordinator's news (membership.events), from its parts.

    failed         health records the first failure (every call then raises it)
    check          health raises it in any thread that waits on the coordinator
    welcomed       every node's address to the transport; shared memory with this host's nodes;
                   the messages held until WELCOME
    global_clock   the worker clocks (BSP/SSP)
    membership     elastic.MembershipChanges: new view, ranges, chains, requests sent again
    low_watermark  with backups, this node's oldest pending request id (heartbeats), and every
    low_watermarks node's (TICKs): the chains prune what every node has answered
    rejoin_state   with backups, what a coordinator that took over learns besides (low, filling)

Threads and ownership: pskv-server calls them (membership.events says which others); the parts
are the Node's, built before pskv-server starts.
"""

from __future__ import annotations

from ..consistency.clocks import Clocks
from ..errors import NodeFailure
from ..membership.events import Events
from ..membership.health import Health
from ..membership.view import View
from ..net.dispatch import Dispatcher
from ..net.requests import RequestTracker
from ..net.transport import Transport
from ..server.backups import Backups
from .elastic import MembershipChanges
from .sharing import SharedMemory


class NodeEvents(Events):
    """The coordinator's news, handed to the node's parts."""

    def __init__(
        self,
        *,
        health: Health,
        view: View,
        transport: Transport,
        dispatcher: Dispatcher,
        sharing: SharedMemory,
        clocks: Clocks,
        changes: MembershipChanges,
        tracker: RequestTracker,
        backups: Backups | None,
    ) -> None:
        self.health, self.view, self.transport, self.dispatcher = health, view, transport, dispatcher
        self.sharing, self.clocks, self.changes, self.tracker = sharing, clocks, changes, tracker
        self.backups = backups

    def failed(self, exc: NodeFailure) -> None:
        self.health.fail(exc)

    def check(self) -> None:
        self.health.check()

    def welcomed(self) -> None:
        """Learn the others' addresses, then take what they sent us early."""
        assert self.view.addresses is not None  # (WELCOME brought them)
        for rank, address in self.view.addresses.items():
            self.transport.set_address(rank, address)
        self.sharing.start()
        self.dispatcher.release_held()

    def global_clock(self, clock: int) -> None:
        self.clocks.on_global(clock)

    def membership(self, payload: dict) -> None:
        self.changes.changed(payload)

    def low_watermark(self) -> int | None:
        return self.tracker.low_watermark() if self.backups is not None else None

    def low_watermarks(self, lows: dict[int, int]) -> None:
        if self.backups is not None:
            self.backups.copies.prune(lows)

    def rejoin_state(self) -> dict:
        if self.backups is None:
            return {}
        return {"low": self.tracker.low_watermark(), "filling": self.backups.copies.filling_ranges()}
