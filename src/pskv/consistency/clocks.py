"""Worker clocks, the node's applied clock and the cluster's global clock (see consistency.models)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ConsistencyError, WaitTimeout
from ..net.future import Future

if TYPE_CHECKING:
    from ..membership.waiting import Patience

INF = 1 << 62  # "no open worker holds the clock back" (JSON-safe integer)
_WAIT_POLL = 0.2  # seconds between health checks while a pull waits for the global clock


class Clocks:
    """A node's worker clocks, its applied clock, and the cluster's global clock."""

    def __init__(
        self, report: Callable[[int, int], None], flush: Callable[[], list[Future]], health: Callable[[], None]
    ) -> None:
        self._report = report  # (clock, seq): sends this node's applied clock to the coordinator
        self._flush = flush  # flushes every push buffer; returns the flushes' Futures
        self._health = health  # raises if the node failed or closed
        self._cond = threading.Condition()  # guards all below; never held while calling out
        self._ended: dict[int, int] = {}  # id(worker) -> clocks it ended (open workers only)
        self._outstanding: dict[int, int] = {}  # clock c -> unacknowledged updates stamped c
        self._ever = False  # a worker registered once: with none open, the node holds nobody back
        self._node_ended = 0  # min over open workers of their ended clocks
        self._applied = 0  # every update stamped < applied is acknowledged (reported to the coordinator)
        self.global_clock = 0  # G: from the coordinator
        self._report_lock = threading.Lock()  # guards _report_seq; held while reporting
        self._report_seq = 0
        self.waits = 0  # pulls that had to wait for G
        self.wait_seconds = 0.0
        self._base = 0  # the clock new workers start at: the global clock when this node joined a running cluster
        # set by the node: (clock, timeout) -> a Patience (membership.waiting) whose check() logs who
        # holds the global clock back, every 30 s of a wait
        self.waiting: Callable[[int, float | None], Patience] | None = None

    def start_at(self, clock: int) -> None:
        """This node joined a running cluster whose global clock is `clock`: its workers start there.
        INF (no worker of any node was open) is no clock to start at: they start at 0, as the next
        workers of the others do (they started at INF and held every clock of the others back)."""
        clock = int(clock) if int(clock) < INF else 0
        with self._cond:
            self._base = self._node_ended = self._applied = self.global_clock = clock

    # ---- worker threads -----------------------------------------------------------------------
    def register(self, worker, restart: bool = False) -> None:
        """A worker of `node.worker()` starts at the global clock while workers of some node still run
        (it must not take the clock back: their waits for it would stall, see wait_for), else at 0.
        `restart`: a worker of `node.run()`, whose runs start at clock 0 on every node (node.run
        keeps a later run's nodes together), or where this node joined."""
        with self._cond:
            self._ever = True
            running = self.global_clock < INF and not restart
            self._ended[id(worker)] = max(self._base, self.global_clock) if running else self._base
            self._node_ended = min(self._ended.values())
        self._advance()  # a new worker holds the others back again, from where it starts

    @property
    def started(self) -> bool:
        """A worker registered here before (so clocks restart at 0 with the next ones)."""
        return self._ever

    def clock_of(self, worker) -> int:
        return self._ended.get(id(worker), self._base)

    def takes_part(self, worker) -> bool:
        """Whether `worker` ticks clocks (a thread of node.run() or node.worker(), not yet closed)."""
        return id(worker) in self._ended

    def tick(self, worker, updates: list[Future]) -> int:
        """End the worker's current clock; `updates` are its updates stamped with it. Returns the new clock."""
        with self._cond:
            key = id(worker)
            if key not in self._ended:
                raise ConsistencyError(
                    f"{worker!r} does not take part in clocks; call clock() from threads "
                    "started by node.run() or made with node.worker()"
                )
            stamp = self._ended[key]
            self._ended[key] = stamp + 1
            self._outstanding[stamp] = self._outstanding.get(stamp, 0) + len(updates)
            advanced = self._recompute()
        self._watch(stamp, updates)
        self._after(advanced)
        return stamp + 1

    def close(self, worker, updates: list[Future]) -> None:
        """The worker leaves: it no longer holds the node's clock back once `updates` are acknowledged."""
        with self._cond:
            stamp = self._ended.pop(id(worker), None)
            if stamp is None:
                return
            self._outstanding[stamp] = self._outstanding.get(stamp, 0) + len(updates)
            advanced = self._recompute()
        self._watch(stamp, updates)
        self._after(advanced)

    def wait_for(self, needed: int, timeout: float | None = None) -> None:
        """Block until the global clock reaches `needed` (every update stamped < needed is applied)."""
        if self.global_clock >= needed:
            return
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        patience = self.waiting(needed, timeout) if self.waiting is not None else None
        with self._cond:
            while self.global_clock < needed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeout(
                        f"pull waited {timeout} s for the global clock to reach {needed} "
                        f"(it is {self.global_clock}): a worker is more than the staleness behind"
                    )
                self._cond.release()
                try:
                    self._health()
                    if patience is not None:
                        patience.check()
                finally:
                    self._cond.acquire()
                self._cond.wait(_WAIT_POLL if left is None else min(_WAIT_POLL, left))
            self.waits += 1
            self.wait_seconds += time.monotonic() - start

    # ---- pskv-server thread (coordinator) ------------------------------------------------------
    def on_global(self, clock: int) -> None:
        """The coordinator's global clock: the minimum over the nodes' reports, so never above this
        node's own applied clock (a GLOBAL_CLOCK sent before our lower report arrived, e.g. INF from
        when no worker ran anywhere, must not let this node's new workers' pulls through)."""
        with self._cond:
            self.global_clock = min(int(clock), self._applied) if self._ever else int(clock)
            self._cond.notify_all()

    # ---- internals ----------------------------------------------------------------------------
    def _recompute(self) -> int | None:
        """Under _cond: update node_ended. If it advanced, hold the old value's clock (so nothing
        counts as applied before the buffers are flushed) and return it; else None."""
        new = min(self._ended.values()) if self._ended else (INF if self._ever else 0)
        old, self._node_ended = self._node_ended, new
        if new > old:
            self._outstanding[old] = self._outstanding.get(old, 0) + 1
            return old
        return None

    def _after(self, held: int | None) -> None:
        if held is not None:  # flush what the node's workers buffered, then release the hold
            flushes = self._flush()
            with self._cond:
                self._outstanding[held] += len(flushes) - 1
            self._watch(held, flushes)
        self._advance()

    def _watch(self, stamp: int, futures: list[Future]) -> None:
        for fut in futures:
            fut.add_done_callback(lambda _f: self._acked(stamp))

    def _acked(self, stamp: int) -> None:
        with self._cond:
            self._outstanding[stamp] -= 1
        self._advance()

    def _advance(self) -> None:
        with self._cond:
            for c in [c for c, n in self._outstanding.items() if n <= 0]:
                del self._outstanding[c]
            applied = min(self._node_ended, min(self._outstanding, default=INF))
            if applied == self._applied:
                return
            self._applied = applied
            # a new worker here holds the global clock back from now on
            self.global_clock = min(self.global_clock, applied)
        with self._report_lock:  # each report carries the latest value and a sequence number:
            self._report_seq += 1  # threads send on sockets of their own, so reports may overtake
            self._report(self._applied, self._report_seq)

    def __repr__(self) -> str:
        return f"<Clocks node={self._node_ended} applied={self._applied} global={self.global_clock}>"
