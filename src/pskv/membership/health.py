"""Health: a node's first failure, which every API call checks, so that no call blocks on a broken cluster.

Threads and ownership: any thread may record a failure (`fail`) or check (`check`); `_lock`
guards writing the failure, which is written once. Listeners (`on_failure`) run in the failing
thread, after the failure is recorded, and get a function that makes a fresh copy of it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

from ..errors import ClosedError, ClusterError


class Health:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.failure: ClusterError | None = None  # the first failure; see fail()
        self.closed = False
        self._lock = threading.Lock()  # guards writing `failure`
        self._listeners: list[Callable[[Callable[[], ClusterError]], None]] = []

    def on_failure(self, listener: Callable[[Callable[[], ClusterError]], None]) -> None:
        """`listener(error_for)` runs once, at the first failure (fail everything that waits)."""
        self._listeners.append(listener)

    def check(self) -> None:
        """Raise if the node was shut down or failed (a fresh copy of the first failure)."""
        if self.closed:
            raise ClosedError(f"node {self.rank} was shut down; create a new one with pskv.init()")
        if self.failure is not None:
            raise self.failed()

    def has_failed(self) -> bool:
        """Whether a failure was recorded (any thread; never raises)."""
        return self.failure is not None

    def fail(self, error: ClusterError) -> bool:
        """Record the node's first failure and tell the listeners; False if one was recorded before."""
        with self._lock:
            if self.failure is not None:
                return False
            self.failure = error
        for listener in self._listeners:
            listener(self.failed)
        return True

    def failed(self) -> ClusterError:
        """A fresh copy of the first failure (its own traceback), chained to its cause."""
        failure = self.failure
        assert failure is not None  # (listeners get this after the failure is set)
        exc = copy.copy(failure)
        exc.__cause__ = failure.__cause__ or failure
        return exc

    @property
    def state(self) -> str:
        return "closed" if self.closed else "failed" if self.failure else "up"

    def __repr__(self) -> str:
        return f"failed: {self.failure}" if self.failure and not self.closed else self.state
