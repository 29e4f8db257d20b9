"""LocalBarrier: a barrier over this node's open workers whose last arrival runs the cluster-wide one.

The last arrival first settles the node (`settle`: every request the node issued so far is
answered, whichever handle issued it: a worker that closed without waiting, the main thread's
handle, a worker that is not a member), then runs the cluster barrier: so a barrier covers every
push its node issued before it, not only its members' own (which each waited for on arrival).

Threads and ownership: worker threads join, wait and leave; `_cond` guards the members and the
generation and is never held during the settling or the cluster barrier. The members are also
the node's threads that take part in aggregation rounds (`size`).
"""

from __future__ import annotations

import copy
import threading
from typing import Callable

from ..errors import PskvError


class LocalBarrier:
    """Barrier over this node's open workers, whose last arrival runs the cluster-wide barrier."""

    def __init__(self, cluster_barrier: Callable[[float | None], None], on_release: Callable[[], None],
                 settle: Callable[[float | None], None] = lambda timeout: None) -> None:
        self._settle = settle  # waits until every request this node issued so far is answered
        self._cluster_barrier = cluster_barrier  # the barrier over every node (the coordinator's)
        self._on_release = on_release  # runs while every worker of this node waits (drops row caches)
        self._cond = threading.Condition()  # guards all below; not held during the cluster barrier
        self._members: set[int] = set()
        self._arrived = 0
        self._generation = 0
        self._error: Callable[[], BaseException] | None = None  # makes the error each waiter raises

    def join(self, worker: object) -> None:
        with self._cond:
            self._members.add(id(worker))

    def leave(self, worker: object) -> None:
        with self._cond:
            self._members.discard(id(worker))
            lead = self._members and self._arrived == len(self._members)
        if lead:
            try:
                self._lead(None)
            except PskvError:
                pass  # recorded in _error for the waiting workers; the leaving one has nothing to raise

    def wait(self, timeout: float | None = None) -> None:
        with self._cond:
            gen = self._generation
            self._arrived += 1
            lead = self._arrived >= len(self._members)
        if lead:
            self._lead(timeout)
            return
        with self._cond:
            while self._generation == gen and self._error is None:
                self._cond.wait(0.2)
            if self._error is not None:
                raise self._error()

    def _lead(self, timeout: float | None) -> None:
        error = None
        try:
            self._settle(timeout)
            self._cluster_barrier(timeout)
            self._on_release()  # every worker of this node waits here: nothing races it
        except BaseException as exc:
            error = exc
        with self._cond:
            self._arrived = 0
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
            return (f"<worker barrier members={len(self._members)} arrived={self._arrived} "
                    f"generation={self._generation}{' broken' if self._error else ''}>")
