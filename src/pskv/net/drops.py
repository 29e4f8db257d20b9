"""Drops: what a node throws away, counted per peer and logged at most once a minute per peer.

Garbage, another cluster's messages and refused connections used to cost one log line each, so
anyone who could reach a port could fill the disk. Now the first drop from a peer is logged at
once, and later ones are counted: the next line for that peer comes no sooner than `interval`
later and says how many were dropped meanwhile (`flush` writes the counts of quiet peers once
their minute is over). A peer is whatever the caller knows about the sender: `node 3` once a
header names it, else its address, else "unknown". Lines carry the reason the caller gives,
never a frame's bytes or a secret.

Threads and ownership: any thread may call `add` (pskv-server, a thread that waits on its reply
box, pskv-coord); `_lock` guards the per-peer state and is never held while logging.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .wire import COORDINATOR

INTERVAL = 60.0  # seconds between two lines about one peer: readable, and a flood costs one line a minute
_MAX_PEERS = 1024  # peers tracked at most; beyond, they share one entry (a sender field is easy to vary)


class _Peer:
    __slots__ = ("logged_at", "count", "reason")

    def __init__(self, logged_at: float) -> None:
        self.logged_at = logged_at  # when the last line about this peer was written
        self.count = 0  # drops since then, not logged yet
        self.reason = ""  # the last of them


class Drops:
    """Per-peer drop counts of one part of a node (`what`: "node 2", "the coordinator")."""

    def __init__(
        self, log: logging.Logger, what: str, *, interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = log
        self.what = what
        self._interval = interval
        self._clock = clock
        self._peers: dict[str, _Peer] = {}
        self._lock = threading.Lock()  # guards _peers and total; never held while logging
        self.total = 0  # every drop counted here

    def add(self, peer: str, reason: str, *, exc_info: BaseException | None = None) -> None:
        """Count one drop from `peer` because of `reason`; log it if the peer's minute is over."""
        now = self._clock()
        with self._lock:
            self.total += 1
            if peer not in self._peers and len(self._peers) >= _MAX_PEERS:
                peer = "other peers"
            state = self._peers.get(peer)
            line: tuple[int, str, float | None] | None
            if state is None:
                self._peers[peer] = _Peer(now)
                line = (1, reason, None)
            else:
                state.count += 1
                state.reason = reason
                line = self._take(state, now)
        if line is not None:
            count, why, seconds = line
            self._write(peer, count, why, seconds, exc_info=exc_info)

    def flush(self) -> None:
        """Log the counts of peers whose minute is over (pskv-server's loop calls it)."""
        if not self._peers:
            return
        now = self._clock()
        with self._lock:
            lines = [
                (peer, line) for peer, state in self._peers.items() if (line := self._take(state, now)) is not None
            ]
        for peer, line in lines:
            self._write(peer, *line)

    def _take(self, state: _Peer, now: float) -> tuple[int, str, float] | None:
        if state.count == 0 or now - state.logged_at < self._interval:
            return None
        line = (state.count, state.reason, now - state.logged_at)
        state.logged_at, state.count = now, 0
        return line

    def _write(
        self, peer: str, count: int, reason: str, seconds: float | None, exc_info: BaseException | None = None
    ) -> None:
        if seconds is None:
            self._log.warning(
                "%s dropped a message from %s: %s (more from it are counted, one line a minute)",
                self.what,
                peer,
                reason,
                exc_info=exc_info,
            )
        else:
            self._log.warning(
                "%s dropped %d message(s) from %s in the last %.0f s; the last: %s",
                self.what,
                count,
                peer,
                seconds,
                reason,
                exc_info=exc_info,
            )

    def __repr__(self) -> str:
        return f"<Drops {self.what!r} total={self.total} peers={len(self._peers)}>"


def peer_of(frames: list, sender: int | None = None) -> str:
    """Who sent `frames`, as far as we know: the header's sender, else the TCP peer's address."""
    if sender is not None:
        return "the coordinator" if sender == COORDINATOR else f"node {sender}"
    try:
        return f"{frames[0].get('Peer-Address')} (no valid header)"  # a zmq.Frame from TCP knows its peer's IP
    except Exception:  # noqa: BLE001 - bytes, inproc, or no frames: nothing to tell
        return "unknown (no valid header)"
