"""LocalBarrier: a barrier over this node's open workers whose last arrival runs the cluster-wide one.

The last arrival first settles the node (`settle`: every request the node issued so far is
answered, whichever handle issued it: a worker that closed without waiting, the main thread's
handle, a worker that is not a member), then runs the cluster barrier: so a barrier covers every
push its node issued before it, not only its members' own (which each waited for on arrival).

A worker may be *bound* to a thread (`bind`: DataParallel(model, node) binds the worker it makes
to the thread that made it): a barrier that another worker enters from that thread counts the
bound worker as arrived too. That thread cannot be in two barriers at once, so without this the
README's `node.worker().barrier()` beside a DataParallel would wait for the DataParallel's idle
worker until the collective timeout; its pushes are covered anyway (settle).

A worker that waits for the others longer than `log_every` seconds logs which of them have not
arrived (membership.waiting), and again every `log_every` seconds.

Threads and ownership: worker threads join, wait and leave; `_cond` guards the members and the
generation and is never held during the settling, the cluster barrier or logging. The members
are also the node's threads that take part in aggregation rounds (`size`).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable

from ..errors import BarrierTimeout, PskvError
from .waiting import Patience


class LocalBarrier:
    """Barrier over this node's open workers, whose last arrival runs the cluster-wide barrier."""

    def __init__(
        self,
        cluster_barrier: Callable[[float | None], None],
        on_release: Callable[[], None],
        settle: Callable[[float | None], None] = lambda timeout: None,
        *,
        rank: int = 0,
        log_every: float = 30.0,
        patience: float | None = None,
    ) -> None:
        self._settle = settle  # waits until every request this node issued so far is answered
        self._cluster_barrier = cluster_barrier  # the barrier over every node (the coordinator's)
        self._on_release = on_release  # runs while every worker of this node waits (drops row caches)
        self._rank = rank  # (for the wait log)
        self._log_every = log_every  # seconds between "still waiting" lines of a worker that waits here
        self._patience = patience  # the collective timeout, told in those lines
        self._cond = threading.Condition()  # guards all below; not held during the cluster barrier
        self._members: dict[int, str] = {}  # id(worker) -> repr(worker), the open workers
        self._bound: dict[int, int] = {}  # id(worker) -> the thread ident whose barriers stand for it
        self._arrived: set[int] = set()  # ids of the members in this generation's barrier
        self._generation = 0
        self._error: Callable[[], BaseException] | None = None  # makes the error each waiter raises

    def join(self, worker: object) -> None:
        with self._cond:
            self._members[id(worker)] = repr(worker)

    def bind(self, worker: object, thread: int) -> None:
        """A barrier entered by another worker from thread `thread` (an ident) counts `worker` as
        arrived too (DataParallel's own worker: only its thread uses it)."""
        with self._cond:
            self._bound[id(worker)] = thread

    def leave(self, worker: object) -> None:
        with self._cond:
            self._members.pop(id(worker), None)
            self._bound.pop(id(worker), None)
            self._arrived.discard(id(worker))
            lead = bool(self._members) and bool(self._arrived) and self._members.keys() <= self._arrived
        if lead:
            try:
                self._lead(None)
            except PskvError:
                pass  # recorded in _error for the waiting workers; the leaving one has nothing to raise

    def wait(self, timeout: float | None = None, worker: object = None) -> None:
        """`worker` arrives (None: an anonymous arrival, counted for no member); blocks until every
        member did, the last one running the cluster barrier."""
        me, here = id(worker), threading.get_ident()
        with self._cond:
            gen = self._generation
            mine = {me} | {w for w, t in self._bound.items() if t == here and w in self._members} - self._arrived
            self._arrived |= mine
            lead = self._members.keys() <= self._arrived
        if lead:
            self._lead(timeout)
            return
        patience = Patience(self._log_every, timeout or self._patience, lambda: self._waiting(me))
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._generation == gen and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._arrived -= mine  # it leaves this generation: the others still wait for it
                    late = [text for w, text in self._members.items() if w not in self._arrived and w not in mine]
                    raise BarrierTimeout(
                        f"barrier on node {self._rank}: {len(late)} of this node's open worker(s) "
                        f"did not arrive within {timeout:g} s: {', '.join(late)}; every open worker "
                        "must call barrier(), or close()",
                        [],
                    )
                self._cond.wait(0.2 if left is None else min(0.2, left))
                if self._generation == gen and self._error is None:
                    self._cond.release()
                    try:
                        patience.check()
                    finally:
                        self._cond.acquire()
            if self._error is not None:
                raise self._error()

    def _waiting(self, me: int) -> tuple[str, str]:
        with self._cond:
            late = [text for w, text in self._members.items() if w not in self._arrived]
            who = self._members.get(me, "a thread")
        return (
            f"node {self._rank}: {who} still waiting in the node's barrier for {len(late)} of its "
            f"{len(self._members)} open worker(s): {', '.join(late)}",
            "; every open worker (node.run()'s, each node.worker() not closed yet) must call barrier(), or close()",
        )

    def _lead(self, timeout: float | None) -> None:
        error = None
        try:
            self._settle(timeout)
            self._cluster_barrier(timeout)
            self._on_release()  # every worker of this node waits here: nothing races it
        except BaseException as exc:  # noqa: BLE001 - raised below, and to every worker of this barrier
            error = exc
        with self._cond:
            self._arrived = set()
            self._generation += 1
            if error is not None and self._error is None:
                self._error = lambda: copy.copy(error)
            self._cond.notify_all()
        if error is not None:
            raise error

    @property
    def size(self) -> int:
        """The open workers of this node."""
        with self._cond:
            return len(self._members)

    def break_(self, error_for: Callable[[], BaseException]) -> None:
        """Fail every waiting and later wait() with a fresh error_for() each."""
        with self._cond:
            if self._error is None:
                self._error = error_for
            self._cond.notify_all()

    def __repr__(self) -> str:
        with self._cond:
            return (
                f"<worker barrier members={len(self._members)} arrived={len(self._arrived)} "
                f"generation={self._generation}{' broken' if self._error else ''}>"
            )
