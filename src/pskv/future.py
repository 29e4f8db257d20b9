"""`Future` (a wait handle for one request) and `RequestTracker` (which request waits on which parts).

Threads and ownership: any thread may create requests; the pskv-server thread delivers reply
parts; a failure handler may fail requests from any thread. `RequestTracker._lock` guards
`_pending` and is never held while a part is written or a Future resolved. A Future resolves
exactly once; its callbacks run in the thread that resolves it (usually pskv-server), after
the result is in place, so they must be short and must not block on pskv.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable

from .errors import PskvError

log = logging.getLogger(__name__)

_POLL = 0.2  # seconds between checks of the owner's health while waiting without a timeout


class Future:
    """The result of an asynchronous pull, push or set.

    `wait()` blocks until the request completed and returns its result (an ndarray for pulls,
    None otherwise) or raises its error. Thread-safe."""

    __slots__ = ("_event", "_result", "_error", "_callbacks", "_lock", "_health", "desc")

    def __init__(self, desc: str = "", health: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[["Future"], None]] = []
        self._lock = threading.Lock()  # guards _callbacks against resolve; never held while calling them
        self._health = health  # raises if the node can no longer complete this (closed, failed)
        self.desc = desc

    @classmethod
    def completed(cls, result: Any = None, desc: str = "") -> "Future":
        fut = cls(desc)
        fut._result = result
        fut._event.set()
        return fut

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until done; return the result or raise the error. TimeoutError after `timeout` seconds."""
        if not self._event.is_set():
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._event.wait(_POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))):
                if self._health is not None and not self._event.is_set():
                    self._health()
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.desc or 'request'} did not complete within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    result = wait

    def exception(self) -> BaseException | None:
        return self._error if self._event.is_set() else None

    def add_done_callback(self, fn: Callable[["Future"], None]) -> None:
        """Run fn(self) once when done (at once, in this thread, if already done)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        self._run_callback(fn)

    def _resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._result, self._error = result, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._run_callback(fn)

    def _run_callback(self, fn) -> None:
        try:
            fn(self)
        except Exception:  # a callback's bug must not kill the server thread (nor the caller)
            log.exception("callback of %s raised", self.desc)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error else "done")
        return f"<Future {self.desc} {state}>"


def wait(*futures: Future, timeout: float | None = None) -> list:
    """Wait for every future; return their results in order. Raises the first error met."""
    deadline = None if timeout is None else time.monotonic() + timeout
    return [f.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for f in futures]


class _Pending:
    __slots__ = ("future", "ranks", "remaining", "on_part", "result", "error")

    def __init__(self, future, ranks, on_part, result):
        self.future = future
        self.ranks = ranks  # part index -> rank it was sent to
        self.remaining = set(range(len(ranks)))
        self.on_part = on_part  # fn(part, arrays) writes a reply part into the result
        self.result = result
        self.error = None


class RequestTracker:
    """Counts the reply parts of every outstanding request and decides when it is complete."""

    def __init__(self, health: Callable[[], None] | None = None) -> None:
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _pending; never held while writing parts or resolving
        self._health = health

    def new_request(self, ranks: list[int], *, on_part: Callable | None = None, result: Any = None,
                    desc: str = "") -> tuple[int, Future]:
        """Register a request with one part per entry of `ranks`; returns (request_id, future)."""
        fut = Future(desc, self._health)
        rid = next(self._ids)
        with self._lock:
            self._pending[rid] = _Pending(fut, list(ranks), on_part, result)
        return rid, fut

    def on_reply(self, rid: int, part: int, arrays: Any = None, error: BaseException | None = None) -> bool:
        """Deliver one part; returns False for an unknown or duplicate part (dropped)."""
        with self._lock:
            p = self._pending.get(rid)
            if p is None or part not in p.remaining:
                return False
        if error is None and p.on_part is not None:
            try:
                p.on_part(part, arrays)
            except PskvError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - fail the waiter, not the server thread
                error = PskvError(f"{p.future.desc}: reply part {part} could not be written: {exc!r}")
        with self._lock:
            if part not in p.remaining:
                return False
            p.remaining.discard(part)
            if error is not None and p.error is None:
                p.error = error
            finished = not p.remaining
            if finished:
                del self._pending[rid]
        if finished:
            p.future._resolve(p.result if p.error is None else None, p.error)
        return True

    def fail_rank(self, rank: int, error_for: Callable[[], BaseException]) -> int:
        """Fail every request with a part outstanding at `rank`; returns how many."""
        with self._lock:
            hit = [(rid, p) for rid, p in self._pending.items() if any(p.ranks[i] == rank for i in p.remaining)]
            for rid, _ in hit:
                del self._pending[rid]
        for _, p in hit:
            p.future._resolve(None, error_for())
        return len(hit)

    def fail_all(self, error_for: Callable[[], BaseException]) -> None:
        with self._lock:
            hit, self._pending = list(self._pending.values()), {}
        for p in hit:
            p.future._resolve(None, error_for())

    def __len__(self) -> int:
        return len(self._pending)

    def __repr__(self) -> str:
        return f"<RequestTracker pending={len(self._pending)}>"
