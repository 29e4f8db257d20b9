"""`RequestTracker`: which request waits on which parts (the Future of each: net.future).

Threads and ownership: any thread may create requests; the pskv-server thread delivers reply
parts; a failure handler may fail requests from any thread. `RequestTracker._lock` guards
`_pending` and is never held while a part is written or a Future resolved.

Latency: each request that completes adds its age to a fixed-bucket histogram, one per request
description (`desc`, e.g. "pull on table 'emb' by node 0"), under `_lock`, which completion
takes anyway: a bisect and three additions per request, nothing per key. `latency()` copies
them for pskv.monitor, which reads them only when scraped.
"""

from __future__ import annotations

import itertools
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from ..errors import PskvError
from .future import Future

# Upper bounds (seconds) of the latency buckets, and +Inf after them: from a loopback round trip of
# a few keys (~100 us) to a request stuck behind a relocation or a GC pause (seconds). Fixed, so that
# counting is one bisect, and histograms of all nodes add up (Prometheus' histogram_quantile).
LATENCY_BUCKETS = (
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    1e-2,
    2.5e-2,
    5e-2,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class Credit(int):
    """What `on_part` may return instead of a result: how many keys the reply answered that no
    earlier reply did (a request sent again after a membership change may be answered twice)."""


class _Pending:
    __slots__ = (
        "future",
        "total",
        "remaining",
        "on_part",
        "result",
        "ranks",
        "born",
        "progress",
        "seen",
        "retry",
        "explain",
    )

    def __init__(self, future, total, on_part, result, retry=None, explain=None):
        self.future = future
        self.total = total
        self.remaining = total  # keys (or other units) still to be answered
        self.on_part = on_part  # fn(sender, payload) writes a reply into the result
        self.result = result
        self.retry = retry  # fn() sends the unanswered keys again (after a membership change), or None
        self.ranks: set[int] = set()  # nodes some of it was sent to, for stall reports
        self.born = self.progress = time.monotonic()  # progress: the last send or reply
        self.seen: tuple = ()  # the last thing that happened to it: (rank,) sent, (rank, keys, error) reply
        self.explain = explain  # fn() -> str: which keys are unanswered and where they went (stall reports), or None

    @property
    def last(self) -> str:
        if not self.seen:
            return "registered, nothing sent yet"
        if len(self.seen) == 1:
            return f"sent to node {self.seen[0]}"
        rank, count, error = self.seen
        return f"an error from node {rank}" if error else f"a reply for {count} key(s) from node {rank}"

    def describe(self, now: float) -> str:
        line = (
            f"{self.future.desc}: {self.remaining}/{self.total} unanswered, age {now - self.born:.1f} s, "
            f"idle {now - self.progress:.1f} s, nodes {sorted(self.ranks)}, last: {self.last}"
        )
        if self.explain is not None:
            try:
                line += f"; {self.explain()}"
            except Exception as exc:  # noqa: BLE001 - a report must not fail the node
                line += f"; (its keys could not be described: {exc!r})"
        return line


class Latency:
    """The completed requests of one description: a count per bucket of LATENCY_BUCKETS (the last one
    +Inf; not cumulative), their total seconds and keys, and how many failed instead."""

    __slots__ = ("counts", "seconds", "keys", "failed")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.seconds = 0.0
        self.keys = 0
        self.failed = 0

    def copy(self) -> Latency:
        other = Latency()
        other.counts, other.seconds, other.keys, other.failed = list(self.counts), self.seconds, self.keys, self.failed
        return other


class RequestTracker:
    """Counts the answered keys of every outstanding request and decides when it is complete.

    A request of n keys may be answered in any number of replies, from any nodes (the owner of
    a key answers the requester directly, however often the request was forwarded); each
    reply says how many keys it answers."""

    def __init__(self, health: Callable[[], None] | None = None) -> None:
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._next = 1  # the next request id (for low_watermark)
        self._lock = threading.Lock()  # guards _pending, _next and _latency; never held while writing parts or
        # resolving
        self._health = health
        self._latency: dict[str, Latency] = {}  # by request description (a handful per table)

    def new_request(
        self,
        total: int,
        *,
        on_part: Callable | None = None,
        result: Any = None,
        desc: str = "",
        retry: Callable[[], object] | None = None,
        explain: Callable[[], str] | None = None,
    ) -> tuple[int, Future]:
        """Register a request that completes when `total` keys have been answered.

        `on_part(sender, payload)` writes each reply part into the result; if it returns a
        `Credit`, that many keys count as answered (not the reply's key count); anything else
        but None becomes the request's result instead of `result`. `retry()` sends the
        unanswered keys again (`retry_all`); `explain()` says which keys are unanswered, for stall reports.

        A request with nothing outstanding (total <= 0) is complete at once and never registered:
        no reply will ever come for it, so waiting for one would wait forever."""
        fut = Future(desc, self._health)
        if total <= 0:
            fut.resolve(result)
            return next(self._ids), fut
        with self._lock:  # (id and registration together: see low_watermark)
            rid = next(self._ids)
            self._next = rid + 1
            self._pending[rid] = _Pending(fut, total, on_part, result, retry, explain)
        return rid, fut

    def set_retry(self, rid: int, retry: Callable[[], object]) -> None:
        """Give pending request `rid` a `retry` (for `retry_all`); a completed one needs none."""
        with self._lock:
            p = self._pending.get(rid)
            if p is not None:
                p.retry = retry

    def drain(self, check: Callable[[], None], timeout: float) -> bool:
        """Wait until every request registered so far is complete; `check()` raises the node's failure
        meanwhile. False if `timeout` passed first."""
        mark = self.issued()
        deadline = time.monotonic() + timeout
        while self.low_watermark() < mark:
            check()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def issued(self) -> int:
        """The id the next request will get: every request registered so far has a lower one."""
        with self._lock:
            return self._next

    def low_watermark(self) -> int:
        """No request with a smaller id is pending or will be made: its replies or resends never come."""
        with self._lock:
            return min(self._pending, default=self._next)

    def retry_all(self) -> int:
        """Send every pending request that can be sent again (after a membership change); returns how many."""
        with self._lock:
            hit = [(rid, p) for rid, p in self._pending.items() if p.retry is not None]
        for rid, p in hit:
            try:
                p.retry()
            except Exception as exc:  # noqa: BLE001 - fail that request, not the caller
                with self._lock:
                    if self._pending.get(rid) is p:
                        del self._pending[rid]
                        self._count(p, 0.0, True)
                p.future.resolve(None, exc)
        return len(hit)

    def pending(self, rid: int) -> bool:
        """Whether request `rid` still waits for replies (any thread; a dict look-up, GIL-atomic)."""
        return rid in self._pending

    def sent_to(self, rid: int, rank: int) -> None:
        p = self._pending.get(rid)
        if p is not None:
            p.ranks.add(rank)
            p.progress = time.monotonic()
            p.seen = (rank,)

    def on_reply(
        self, rid: int, count: int, sender: int = -1, payload: Any = None, error: BaseException | None = None
    ) -> bool:
        """Deliver a reply that answers `count` keys; returns False for an unknown request (dropped)."""
        p = self._pending.get(rid)
        if p is None:
            return False
        if error is None and p.on_part is not None:
            try:
                result = p.on_part(sender, payload)
                if type(result) is Credit:
                    count = int(result)
                elif result is not None:  # the part is the whole result (e.g. a pull answered by one reply)
                    p.result = result
            except PskvError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - fail the waiter, not the server thread
                error = PskvError(f"{p.future.desc}: a reply from node {sender} could not be written: {exc!r}")
        with self._lock:
            if self._pending.get(rid) is not p:
                return False
            p.remaining -= count
            now = p.progress = time.monotonic()
            p.seen = (sender, count, error is not None)
            finished = error is not None or p.remaining <= 0
            if finished:
                del self._pending[rid]
                self._count(p, now, error is not None or p.remaining < 0)
        if finished:
            if error is None and p.remaining < 0:
                error = PskvError(f"{p.future.desc}: {-p.remaining} more keys were answered than requested")
            p.future.resolve(p.result if error is None else None, error)
        return True

    def expire(self, now: float, timeout: float, error_for: Callable[..., BaseException]) -> list[str]:
        """Fail every request without progress (a send or reply) for `timeout` seconds with
        error_for(desc, age, idle, remaining, total, ranks, seen); returns their descriptions."""
        with self._lock:
            hit = [(rid, p) for rid, p in self._pending.items() if now - p.progress > timeout]
            for rid, p in hit:
                del self._pending[rid]
                self._count(p, now, True)
        for _, p in hit:
            p.future.resolve(
                None,
                error_for(p.future.desc, now - p.born, now - p.progress, p.remaining, p.total, sorted(p.ranks), p.last),
            )
        return [p.describe(now) for _, p in hit]

    def describe(self, limit: int = 20) -> list[str]:
        """One line per outstanding request (the oldest `limit`), for debug dumps."""
        now = time.monotonic()
        with self._lock:
            pending = sorted(self._pending.values(), key=lambda p: p.born)
        lines = [f"outstanding requests: {len(pending)}"]
        lines += ["  " + p.describe(now) for p in pending[:limit]]
        if len(pending) > limit:
            lines.append(f"  ... and {len(pending) - limit} more")
        return lines

    def fail_all(self, error_for: Callable[[], BaseException]) -> None:
        with self._lock:
            hit, self._pending = list(self._pending.values()), {}
            for p in hit:
                self._count(p, 0.0, True)
        for p in hit:
            p.future.resolve(None, error_for())

    def _count(self, p: _Pending, now: float, failed: bool, _bounds=LATENCY_BUCKETS) -> None:
        """Under _lock: request `p` completed at `now` (monotonic), or failed. (Positional, with the
        bounds a local: this is per request; measured ~0.2 us, benchmarks/RESULTS.md.)"""
        lat = self._latency.get(p.future.desc)
        if lat is None:
            lat = self._latency[p.future.desc] = Latency()
        if failed:
            lat.failed += 1
            return
        seconds = now - p.born
        lat.counts[bisect_left(_bounds, seconds)] += 1  # bucket i: seconds <= LATENCY_BUCKETS[i]
        lat.seconds += seconds
        lat.keys += p.total

    def latency(self) -> dict[str, Latency]:
        """A copy of the latency histograms, by request description. Any thread."""
        with self._lock:
            return {desc: lat.copy() for desc, lat in self._latency.items()}

    def __len__(self) -> int:
        return len(self._pending)

    def __repr__(self) -> str:
        return f"<RequestTracker pending={len(self._pending)}>"
