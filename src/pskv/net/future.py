"""`Future`: the wait handle of one request (pull, push, set, ...), and `wait` for several.

A Future resolves exactly once; its callbacks run in the thread that resolves it (usually
pskv-server), after the result is in place, so they must be short and must not block on pskv. A
thread that receives its own replies (`pump`) reads its reply box while it waits.

Before a wait blocks, it sends what is held back for it (client.coalesce: small pulls wait to
leave merged): the waiting thread's own held requests (`holding.flush`, set per thread), and the
Future's own held request (`kick`), whichever thread waits.
"""

from __future__ import annotations

import _thread
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ..errors import WaitTimeout

log = logging.getLogger(__name__)

_POLL = 0.2  # seconds between checks of the owner's health while waiting without a timeout
_PUMP = 0.02  # seconds a thread that receives its own replies waits on its box between looks at the Future


class _Holding(threading.local):
    flush: Callable[[], None] | None = None  # sends every request the calling thread holds back (client.coalesce)


holding = _Holding()


class Future:
    """The result of an asynchronous pull, push or set.

    `wait()` blocks until the request completed and returns its result (an ndarray for pulls,
    None otherwise) or raises its error. Thread-safe."""

    __slots__ = (
        "_done",
        "_gate",
        "_result",
        "_error",
        "_tb",
        "_callbacks",
        "_lock",
        "_health",
        "_deadline",
        "_on_stall",
        "_pump",
        "kick",
        "desc",
    )

    def __init__(self, desc: str = "", health: Callable[[], None] | None = None) -> None:
        # Done-ness is a flag plus a gate: a bare lock, held while pending and released once by
        # _resolve; a waiter blocks acquiring it and releases it at once for the next waiter.
        # (threading.Event builds a Condition per Future and a waiter lock per wait: that cost
        # was a measurable share of a 1-key round trip.)
        self._done = False
        self._gate = _thread.allocate_lock()
        self._gate.acquire()
        self._result: Any = None
        self._error: BaseException | None = None
        # the error's traceback when it was delivered: each wait() raises it anew from there
        self._tb: TracebackType | None = None
        self._deadline: float | None = None  # see stall_after()
        self._on_stall: Callable[[], BaseException] | None = None
        self._callbacks: list[Callable[[Future], None]] = []
        self._lock = threading.Lock()  # guards _callbacks against resolve; never held while calling them
        self._health = health  # raises if the node can no longer complete this (closed, failed)
        self._pump: Callable[..., None] | None = None  # see pumped_by()
        self.kick: Callable[[], None] | None = None  # sends the held request this Future waits for (client.coalesce)
        self.desc = desc

    @classmethod
    def completed(cls, result: Any = None, desc: str = "") -> Future:
        fut = cls(desc)
        fut._result = result
        fut._done = True
        fut._gate.release()
        return fut

    def _unhold(self) -> None:
        """About to block: send what is held back for this wait (see the module docstring)."""
        flush = holding.flush
        if flush is not None:
            flush()
        if self.kick is not None:
            self.kick()

    def done(self) -> bool:
        return self._done

    def pumped_by(self, pump: Callable[..., None] | None) -> Future:
        """Replies to this request come to a reply box (net.endpoint's `pump` of the calling thread):
        a thread that waits runs pump(seconds, done) (receive and deliver them) instead of sleeping; the
        owner thread usually, any other under the box's lock (pskv-server sweeps the boxes too)."""
        self._pump = pump
        return self

    def _sleep(self, seconds: float) -> bool:
        """Block until done or `seconds` passed; True if done."""
        if self._done:
            return True
        if self._pump is not None:
            # at most _PUMP at a time: a failure (fail_all, expiry) resolves us without a reply
            self._pump(min(seconds, _PUMP), self.done)
            return self._done
        if self._gate.acquire(True, seconds):
            self._gate.release()  # for the next waiter
            return True
        return self._done

    def wait(self, timeout: float | None = None) -> Any:
        """Block until done; return the result or raise the error. TimeoutError after `timeout` seconds."""
        if not self._done:
            self._unhold()
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._sleep(_POLL if deadline is None else max(0.0, min(_POLL, deadline - time.monotonic()))):
                if self._health is not None and not self._done:
                    self._health()
                on_stall = self._on_stall  # (set with the deadline: stall_after)
                if on_stall is not None and self._deadline is not None and time.monotonic() >= self._deadline:
                    self._resolve(None, on_stall())
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(f"{self.desc or 'request'} did not complete within {timeout} s")
        if self._error is not None:
            raise self._error.with_traceback(self._tb)  # no growth: every wait() starts from the same traceback
        return self._result

    def stall_after(self, seconds: float, error_for: Callable[[], BaseException]) -> Future:
        """A waiter fails this Future with error_for() once it has been pending `seconds` (for
        Futures that no RequestTracker watches, e.g. ones that wait for other local threads)."""
        self._deadline = time.monotonic() + seconds
        self._on_stall = error_for
        return self

    result = wait

    def exception(self) -> BaseException | None:
        return self._error if self._done else None

    def add_done_callback(self, fn: Callable[[Future], None]) -> None:
        """Run fn(self) once when done (at once, in this thread, if already done)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        self._run_callback(fn)

    def then(self, fn: Callable[[Any], None]) -> Future:
        """A Future that resolves with this one's result after fn(result) ran (not if this one failed).

        fn runs in the thread that resolves this Future; if it raises, the new Future fails with
        that error. This is how pull_async(callback=) runs a callback before wait() returns."""
        nxt = Future(self.desc, self._health)
        nxt._pump = self._pump  # it completes when this one does
        nxt.kick = self.kick

        def chain(f: Future) -> None:
            if f._error is not None:
                nxt._resolve(None, f._error)
                return
            try:
                fn(f._result)
            except Exception as exc:  # noqa: BLE001 - delivered to the waiter
                nxt._resolve(None, exc)
                return
            nxt._resolve(f._result)

        self.add_done_callback(chain)
        return nxt

    def map(self, fn: Callable[[Any], Any]) -> Future:
        """A Future that resolves with fn(result) once this one resolved (fails as this one does).
        fn runs in the thread that resolves this Future: keep it short."""
        nxt = Future(self.desc, self._health)
        nxt._pump = self._pump
        nxt.kick = self.kick

        def chain(f: Future) -> None:
            if f._error is not None:
                nxt._resolve(None, f._error)
                return
            try:
                value = fn(f._result)
            except Exception as exc:  # noqa: BLE001 - delivered to the waiter
                nxt._resolve(None, exc)
                return
            nxt._resolve(value)

        self.add_done_callback(chain)
        return nxt

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        """Complete this Future, once: with `result`, or failed with `error` (later calls do nothing).
        Its callbacks run now, in the calling thread. For the code that completes requests: the
        RequestTracker, a stage or buffer that answers a call itself, a Future that follows another."""
        with self._lock:
            if self._done:
                return
            self._result, self._error = result, error
            self._tb = None if error is None else error.__traceback__
            self._done = True
            self._gate.release()  # exactly once: _done is set under _lock
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._run_callback(fn)

    _resolve = resolve  # (the name this module's own code calls it by)

    def outcome(self) -> tuple[Any, BaseException | None]:
        """(result, error) of a done Future, without waiting or raising; (None, None) while pending."""
        return (self._result, self._error) if self._done else (None, None)

    def _run_callback(self, fn) -> None:
        try:
            fn(self)
        except Exception:  # a callback's bug must not kill the server thread (nor the caller)
            log.exception("callback of %s raised", self.desc)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error else "done")
        return f"<Future {self.desc} {state}>"


def both(first: Future, second: Future) -> Future:
    """A Future of `second`'s result once `first` is done too; it fails as soon as either fails, with
    that error (Table.exchange: its push, then its pull). `second` itself when `first` is done fine."""
    if first.done() and first.outcome()[1] is None:
        return second
    nxt = Future(second.desc, second._health)
    nxt._pump = second._pump  # (waiting pumps the pull's box; the push's ACK may come through the inbox)
    nxt.kick = second.kick
    lock, left = threading.Lock(), [2]

    def one(f: Future) -> None:
        with lock:
            left[0] -= 1
            last = not left[0]
        error = f.outcome()[1]
        if error is not None:  # (at once: the other may wait for ever on what failed)
            nxt.resolve(None, error)
        elif last:
            nxt.resolve(second.outcome()[0])

    first.add_done_callback(one)
    second.add_done_callback(one)
    return nxt


def wait(*futures: Future, timeout: float | None = None) -> list:
    """Wait for every future; return their results in order. Raises the first error met."""
    deadline = None if timeout is None else time.monotonic() + timeout
    return [f.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for f in futures]
