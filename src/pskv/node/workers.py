"""Workers: this node's worker threads (`node.run`, `node.worker()`), and what the last of them to
reach a barrier does before the cluster-wide one (`settle`).

Threads and ownership: `run` and `new` are called by the thread that owns the Node (`worker()`
by any thread: `_lock` hands out thread indexes); each worker thread owns its Worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..catalog import Catalog
from ..client.context import Context
from ..client.worker import Worker
from ..consistency.clocks import Clocks
from ..errors import BarrierTimeout
from ..membership.barrier import LocalBarrier
from ..net.requests import RequestTracker


class Workers:
    """Makes this node's Workers and runs node.run's threads."""

    def __init__(self, ctx: Context, barrier: LocalBarrier, clocks: Clocks) -> None:
        self.ctx, self.barrier, self.clocks = ctx, barrier, clocks
        self._lock = threading.Lock()  # guards _next_thread
        self._next_thread = 0

    def new(self, thread: int | None = None, restart: bool = False) -> Worker:
        """A Worker that takes part in barriers until it closes (`thread` None: the next index)."""
        if thread is None:
            with self._lock:
                thread, self._next_thread = self._next_thread, self._next_thread + 1
        w = Worker(self.ctx, thread)
        self.barrier.join(w)
        self.clocks.register(w, restart=restart)  # node.run: its workers' clocks start at 0
        return w

    def run(
        self,
        fn: Callable[[Worker], object],
        threads: int,
        on_error: Callable[[str, BaseException], None],
        barrier: Callable[[], None],
    ) -> None:
        """node.run: fn(worker) in `threads` new threads; waits for all, re-raises the first error
        (`on_error` stops the node with it first, so the other workers fail fast)."""
        again = self.clocks.started
        workers = [self.new(thread, restart=True) for thread in range(threads)]
        if again and any(s.consistency.synchronous for s in self.ctx.catalog.tables()):
            # a later run: the workers' clocks restart at 0 on every node; no node's workers may
            # race ahead before the others registered theirs (their nodes count as done till then)
            barrier()
        errors: list[BaseException] = []

        def body(w: Worker) -> None:
            try:
                fn(w)
                w.close()  # its pushes and sets complete; a failed one is the worker's error
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(exc)
                on_error(f"worker thread {w.thread} raised {exc!r}", exc)
            finally:
                try:
                    w.close()  # after an error: leaves (the node failed: its requests fail at once)
                except BaseException:  # noqa: BLE001 - the worker's first error is the one run() raises
                    pass

        started = [
            threading.Thread(target=body, args=(w,), name=f"pskv-worker-{self.ctx.rank}.{w.thread}", daemon=True)
            for w in workers
        ]
        for t in started:
            t.start()
        for t in started:
            while t.is_alive():
                t.join(0.2)
        if errors:
            raise errors[0]


def settle(
    timeout: float | None,
    *,
    rank: int,
    catalog: Catalog,
    tracker: RequestTracker,
    check: Callable[[], None],
    default: float,
) -> None:
    """The last of this node's workers to reach a barrier, before the cluster-wide one: send the
    BSP/SSP push buffers and wait until every request this node issued so far is answered,
    whichever handle issued it (a worker that closed, the main thread's, another worker), so
    the barrier covers them. Their errors are their issuers' (each Future keeps its own). Copies
    of intended keys are dropped and their pushes sent first (client.intent_sync), so that a pull
    after the barrier reads the owners' rows."""
    catalog.flush_buffers()
    for state in catalog.tables():
        if state.copies is not None:
            state.copies.round(flush=True)
    wait = default if timeout is None else timeout
    if not tracker.drain(check, wait):
        raise BarrierTimeout(
            f"barrier on node {rank}: the requests this node issued before it were not "
            f"all answered within {wait:g} s; node.debug_state() lists them",
            [],
        )
