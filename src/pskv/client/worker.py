"""Worker: a worker thread's view of the cluster (tables, clock, barrier, wait_all)."""

from __future__ import annotations

import threading

from ..errors import PskvError
from ..net.future import Future, wait as wait_futures
from .context import Context
from .intents import WorkerIntents
from .sparse import SparseTable
from .table import Table


class Worker:
    """A worker thread's view of the cluster. Made by `node.run()` or `node.worker()`."""

    def __init__(self, ctx: Context, thread: int) -> None:
        self._ctx = ctx
        self.rank = ctx.rank
        self.thread = thread
        self._tables: dict[str, Table] = {}
        self._pending: list[Future] = []  # outstanding futures for wait_all(); pruned as it grows
        self._updates: list[Future] = []  # pushes/sets since the last clock(), stamped with the current clock
        self._prune_at = self._prune_updates_at = 4096  # sizes at which _pending / _updates drop done futures
        self._lock = threading.Lock()  # guards _pending and _updates
        self._closed = False
        self._intents: WorkerIntents | None = None  # the intent clock and windows, at the first intent

    def table(self, name: str) -> Table:
        """This worker's handle on table `name`. Raises UnknownTable."""
        handle = self._tables.get(name)
        if handle is None:
            self._ctx.check()
            state = self._ctx.catalog.get(name)
            kind = SparseTable if state.spec.sparse else Table
            handle = self._tables[name] = kind(self._ctx, state, self)
        return handle

    @property
    def members(self) -> list[int]:
        """The ranks of the live nodes (as `node.members`): fewer after a node died in a cluster with backups."""
        return self._ctx.members()

    @property
    def num_nodes(self) -> int:
        """How many nodes the cluster has now (as `node.num_nodes`)."""
        return len(self._ctx.members())

    @property
    def current_clock(self) -> int:
        """This worker's clock: how many times it called clock() (updates it issues now are stamped with it)."""
        return self._ctx.clocks.clock_of(self)

    def clock(self) -> int:
        """End this worker's current clock (Bösen's Clock); never blocks. Returns the new clock.

        Under BSP/SSP, a later pull by any worker at clock c waits until every worker's updates
        stamped <= c - s - 1 are applied; buffered updates are sent once every worker of this
        node has ended the clock. Raises ConsistencyError on the main thread's worker (use
        node.run() or node.worker())."""
        self._ctx.check()
        with self._lock:
            updates, self._updates = self._updates, []
        return self._ctx.clocks.tick(self, [f for f in updates if not f.done()])

    def advance_clock(self, ticks: int = 1) -> int:
        """Move this worker's intent clock on by `ticks` and act on its intents (`table.intent`):
        windows that come near are told to the keys' managers, one message per manager and table,
        and keys they said move here start moving (asynchronously, as `table.localize`). Returns the
        new intent clock. `ticks=0` acts on the intents signaled so far without moving the clock.
        The intent clock is apart from clock() (BSP/SSP): it never makes a pull wait. Never blocks
        but for a checkpoint in progress (as localize)."""
        self._ctx.check()
        return self.intents().advance(int(ticks))

    @property
    def intent_clock(self) -> int:
        """How often this worker advanced its intent clock (advance_clock)."""
        return 0 if self._intents is None else self._intents.clock

    @property
    def ctx(self) -> Context:
        """What the node handed in (client.context), for the parts that act for this worker."""
        return self._ctx

    def intents(self) -> WorkerIntents:
        """This worker's intent clock and windows (client.intents), made at its first intent."""
        if self._intents is None:
            self._intents = WorkerIntents(self)
        return self._intents

    def wait_clock(self, clock: int, timeout: float | None = None) -> None:
        """Block until every worker of every node ended clock `clock - 1` and the pushes and sets it
        issued before were applied (the global clock reached `clock`): bounded delay on
        asynchronous tables, e.g. `worker.clock(); worker.wait_clock(worker.current_clock - s)`.
        Raises WaitTimeout after `timeout` seconds (default: PSKV_COLLECTIVE_TIMEOUT)."""
        self._ctx.check()
        self._ctx.clocks.wait_for(clock, timeout if timeout is not None else self._ctx.collective_timeout)

    def wait_all(self, timeout: float | None = None) -> None:
        """Block until every request this worker issued so far completed; raises the first error.

        Buffered updates of BSP/SSP tables are sent first."""
        self._ctx.catalog.flush_buffers()
        with self._lock:
            pending, self._pending = self._pending, []
        wait_futures(*pending, timeout=timeout)

    def barrier(self, timeout: float | None = None) -> None:
        """Wait for this worker's requests, then for every open worker of every node to arrive.

        After it returns, a pull by any worker sees every push that any worker issued before
        its barrier call."""
        self._ctx.check()
        self.wait_all(timeout)
        self._ctx.barrier.wait(timeout, self)

    def bind_thread(self) -> None:
        """Only the calling thread uses this worker: a barrier that another worker enters from this
        thread counts this one as arrived too (pskv.torch.DataParallel's own worker; LocalBarrier)."""
        self._ctx.barrier.bind(self, threading.get_ident())

    def wait_replica_sync(self, timeout: float | None = None) -> None:
        """Send this node's unsent changes of replicated keys now, and block until every node has
        applied every change this node made so far (to all replicated tables)."""
        self._ctx.check()
        self._ctx.replica_sync.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Complete this worker's requests, then leave the node's barriers, clocks and aggregation
        rounds (node.run() does this when the worker function returns). Idempotent.

        Blocks until every push, set and pull it issued is answered (buffered updates of BSP/SSP
        tables are sent first), so they are applied before any later barrier. Raises the first
        error among them (RemoteError, NodeFailure; RequestStalled after PSKV_REQUEST_TIMEOUT), or
        WaitTimeout after `timeout` seconds; the worker has left either way."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._intents is not None:
                try:
                    self._intents.close()  # its windows end: the managers hear of it
                except PskvError:
                    pass  # (hints only; a failed node's error comes from wait_all below)
            # before leaving: a barrier of the others cannot pass before these are applied (it
            # settles the node's requests too, but only this worker can raise their errors)
            self.wait_all(timeout)
        finally:
            self._leave()

    def _leave(self) -> None:
        self._ctx.barrier.leave(self)
        for state in self._ctx.catalog.tables():  # NodeAggregate: rounds stop waiting for it
            if state.aggregator is not None:
                state.aggregator.leave(self)
        with self._lock:
            updates, self._updates = self._updates, []
        self._ctx.clocks.close(self, [f for f in updates if not f.done()])

    def note_write(self, fut: Future) -> Future:
        """Remember a push/set for clock(): the node's clock waits until it is applied."""
        if not fut.done():
            with self._lock:
                if self._updates and self._updates[-1] is fut:  # pushes into one buffer share its Future
                    return fut
                self._updates.append(fut)
                if len(self._updates) >= self._prune_updates_at:
                    self._updates = [f for f in self._updates if not f.done()]
                    self._prune_updates_at = max(4096, 2 * len(self._updates))
        return fut

    def track(self, fut: Future) -> None:
        """An asynchronous call's Future, for wait_all()."""
        with self._lock:
            if self._pending and self._pending[-1] is fut:  # pushes into one buffer share its Future
                return
            self._pending.append(fut)
            if len(self._pending) >= self._prune_at:
                # keep failures: wait_all() must still raise them
                self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]
                self._prune_at = max(4096, 2 * len(self._pending))  # amortized O(1), however many stay pending

    def __repr__(self) -> str:
        return f"<Worker node={self.rank}/{self._ctx.num_nodes} thread={self.thread}>"
