"""Patience: a wait that says, every PSKV_WAIT_LOG_INTERVAL seconds (30), who it still waits for,
so that a missing collective explains itself long before its timeout:

    node 0: still waiting for node(s) [1] in table declaration #0 ('emb') (30 s of 600 s)

Used by the coordinator client's collectives (table declarations, barriers), the node's worker
barrier (LocalBarrier) and pulls that wait for the global clock (consistency.clocks).

Threads and ownership: one Patience per wait, used by the waiting thread only; `check()` calls
`what()` and logs, so call it without holding a lock that the logging or `what` could need.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("pskv.wait")


class Patience:
    """One wait's log: `check()` (call it in the wait's loop) logs `what()` once every `every`
    seconds, with the time waited so far and `limit` (the wait's timeout; None: none) after it,
    or between the two parts of a (what, advice) tuple."""

    def __init__(self, every: float, limit: float | None, what: Callable[[], str | tuple[str, str]]) -> None:
        self._every = every
        self._limit = limit
        self._what = what  # e.g. "node 0: still waiting for node(s) [1] in barrier #3"
        self._start = time.monotonic()
        self._due = self._start + every
        self.logged = 0  # lines logged so far

    def check(self) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self._every
        self.logged += 1
        waited = now - self._start
        of = f" of {self._limit:g} s" if self._limit is not None else ""
        what = self._what()
        head, tail = what if isinstance(what, tuple) else (what, "")
        log.warning("%s (%.0f s%s)%s", head, waited, of, tail)


def missing(expected, arrived) -> str:
    """ "node(s) [1, 2]" for the ranks of `expected` not in `arrived`, or "the other nodes" if unknown."""
    ranks = sorted(set(expected) - set(arrived))
    return f"node(s) {ranks}" if ranks else "the other nodes"
