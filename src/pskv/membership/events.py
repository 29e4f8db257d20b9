"""Events: what a node does with the coordinator's news, in one object instead of a callback each.

`CoordinatorClient` (membership.client) calls these; this base class does nothing, which is all a
node without tables needs (the unit tests' fake nodes). The node's composition root passes a
subclass made from its parts (node.events.NodeEvents).

Threads and ownership: pskv-server calls them, in the order the coordinator's messages came,
except `failed` (whichever thread noticed the failure) and `check` (any thread that waits on the
coordinator). The client never holds its lock while calling them.
"""

from __future__ import annotations

from ..errors import NodeFailure


class Events:
    """The node's side of what the coordinator says; override what the node acts on."""

    def failed(self, exc: NodeFailure) -> None:
        """The cluster failed (or this node was fenced): record it before any waiter sees it."""

    def check(self) -> None:
        """Raise the node's own failure, if it has one, so every waiting call raises the same error."""

    def welcomed(self) -> None:
        """WELCOME came (the view has every node's address): connect, take the messages held till now."""

    def global_clock(self, clock: int) -> None:
        """GLOBAL_CLOCK: every node applied every update stamped below `clock` (BSP/SSP)."""

    def membership(self, payload: dict) -> None:
        """MEMBERSHIP: a new epoch (a node died with backups, left or joined), plus "unfinished": the
        tables this node declared whose TABLE_OK has not come."""

    def low_watermark(self) -> int | None:
        """This node's oldest pending request id, sent with each heartbeat (None: nothing to send)."""
        return None

    def low_watermarks(self, lows: dict[int, int]) -> None:
        """Every node's low watermark, from a TICK (backups prune what every node has answered)."""

    def rejoin_state(self) -> dict:
        """What else this node tells a coordinator that took over (membership.takeover), with backups:
        its low watermark and the copies it still fills."""
        return {}
