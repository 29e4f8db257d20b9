"""Node: one process of the cluster. Builds the pieces, runs the pskv-server thread, runs workers.

    python -c "import pskv; node = pskv.init(); print(node)"        # a private 1-node cluster
    pskv launch -n 2 --threads 2 -- python examples/quickstart.py    # a 2-node cluster

Threads and ownership: the thread that calls `init()` owns the Node's lifecycle (`table()`,
`run()`, `shutdown()`). pskv-server reads the inbox and dispatches: requests to `Server`,
replies to `RequestTracker`, coordinator messages to `CoordinatorClient`; it also sends
heartbeats, and fails requests that made no progress for `request_timeout`. Worker threads
call `Table`/`Worker` methods. `_failure` is written once, under `_fail_lock`, by the first
failure (any thread); every API call checks it, so no call blocks on a broken cluster, and
each raises a fresh copy of it (`_failed()`), chained to the original cause.

`SIGUSR1` makes every node of this process log its outstanding requests, deferred requests,
collectives and queues (`debug_state()`), so a hang explains itself.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import logging
import signal
import sys
import threading
import time
import weakref
import zlib
from typing import Callable

import numpy as np
import zmq

from . import updaters
from .config import NodeConfig, split_address
from .consistency import Clocks, Consistency, PushBuffer, RowCache, as_consistency
from .coordinator import Coordinator, CoordinatorClient
from .errors import (ClosedError, NodeFailure, ProtocolError, PskvError, RemoteError, RequestStalled, TableError,
                     TransportError, UnknownTable)
from .future import Future, RequestTracker
from .protocol import (COORDINATOR, RELOCATION, REPLIES, REQUESTS, Kind, control_payload, frame_bytes, unpack,
                       unpack_header)
from .replication import ReplicaSync, hot_keys
from .server import Server
from .store import Replicas, Shard, Store
from .table import Placement, TableSpec, as_init
from .transport import Transport
from .worker import Table, Worker

log = logging.getLogger(__name__)

_FIRST_WORDS = frozenset({Kind.WELCOME, Kind.ABORT})  # all a node accepts from the coordinator before WELCOME


@dataclasses.dataclass
class TableState:
    """A table as this node knows it: spec, placement, local shard, and access counters."""

    spec: TableSpec
    placement: Placement
    shard: Shard
    loc_cache: np.ndarray  # (rows,) int64 last known owner per key, -1 unknown; empty when off
    sampling: object = None  # a sampling.Sampling, or None
    sync_period: float = 0.0  # seconds between replica syncs
    threshold: float = 0.0  # replica sync: send keys whose change exceeds this L2 norm
    next_sync: float = 0.0
    pulls: int = 0  # calls (counters are GIL-atomic +=, approximate under threads)
    pushes: int = 0
    local_keys: int = 0  # keys served from this node's memory without a message
    remote_keys: int = 0  # keys sent to another node
    localizes: int = 0  # keys this node asked to move here
    consistency: Consistency = dataclasses.field(default_factory=lambda: as_consistency(None))
    cache: RowCache | None = None  # BSP/SSP: copies of remote rows, shared by the node's workers
    buffer: PushBuffer | None = None  # BSP/SSP: remote updates waiting for the next flush
    aggregator: object = None  # aggregate="node": an aggregation.Aggregator (mshadow-ps level 1)


class Node:
    """One node process of a pskv cluster. Make it with `pskv.init()`."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.rank = config.rank
        self.num_nodes = config.num_nodes
        self._failure: NodeFailure | None = None  # the first failure; see _fail()
        self._fail_lock = threading.Lock()  # guards writing _failure
        self._closed = False
        self._tables: dict[str, TableState] = {}
        self._by_id: dict[int, TableState] = {}
        self._next_thread = 0
        self._lock = threading.Lock()  # guards _tables, _next_thread
        self._early: list = []  # data messages that arrived before our WELCOME (pskv-server only)
        self.dropped = 0  # messages dropped as garbage or from another cluster
        self._transport = Transport(config.host, send_timeout=config.failure_timeout, drop_rate=config.test_drop_rate)
        self._coordinator = self._start_coordinator()
        self._transport.set_address(COORDINATOR, self.config.coordinator)
        self.store = Store()
        self.tracker = RequestTracker(health=self._check)
        self._next_expiry = 0.0  # pskv-server: when to look for stalled requests next
        self.consistency = as_consistency(config.consistency)  # the default of this node's tables
        self.clocks = Clocks(lambda clock, seq: self.client.report_clock(clock, seq), self._flush_buffers, self._check)
        self.server = Server(self.store, self.send, self.rank, lambda: self.cluster, self.tracker,
                             lambda table_id: self._by_id[table_id].placement.bounds)
        self.client = CoordinatorClient(lambda frames: self._transport.send(COORDINATOR, frames), self.rank,
                                        self.config, self._fail, self.clocks.on_global, health=self._check)
        self._local_barrier = _LocalBarrier(self)
        self._main_worker: Worker | None = None
        self._replica_sync = ReplicaSync(self)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"pskv-server-{self.rank}", daemon=True)
        self._thread.start()
        try:
            self.client.join(self._transport.address, self.num_nodes)
        except BaseException:
            self._teardown()
            raise
        atexit.register(_exit_hook, weakref.ref(self))
        _live_nodes.add(self)
        _install_dump_handler()
        log.info("node %d/%d up at %s", self.rank, self.num_nodes, self._transport.address)

    @property
    def cluster(self) -> int:
        return self.client.cluster

    def _start_coordinator(self) -> Coordinator | None:
        """Start the coordinator here if this is a private cluster, or node 0 and none runs yet."""
        cfg = self.config
        if cfg.coordinator is None:
            coord = Coordinator(1, "127.0.0.1", 0, cfg).start()
            self.config = dataclasses.replace(cfg, coordinator=coord.address)
            return coord
        if cfg.rank != 0 or cfg.external_coordinator:
            return None  # `pskv launch` (PSKV_EXTERNAL_COORDINATOR=1) runs it
        host, port = split_address(cfg.coordinator)
        try:
            coord = Coordinator(cfg.num_nodes, host, port, cfg)
        except TransportError as exc:
            raise TransportError(f"node 0 cannot start the coordinator at {cfg.coordinator}: "
                                 f"{_bind_problem(exc, host, port)}") from exc
        return coord.start()

    # ---- public API -----------------------------------------------------------------------------
    def table(self, name: str, rows: int, dim: int = 1, dtype="float32", updater="add", init=0.0, *,
              location_caches: bool = False, replicate=None, frequencies=None, syncs_per_sec: float = 25.0,
              threshold: float = 0.0, sampling=None, consistency=None, cache_rows: int | None = None,
              buffer_rows: int = 1 << 16, aggregate: str | None = None) -> Table:
        """Declare table `name` on every node (collective) and return a handle for this thread.

        Blocks until every node declared it. Raises TableMismatch (on every node) if nodes declared
        it differently, TableError for a name declared twice.

        Each key is managed by one technique, fixed here: static or relocated (`localize`), or
        replicated. `location_caches=True` remembers where relocated keys were last answered from,
        to skip the hop through their manager (changes latency, never results). `replicate=KEYS`
        (or `replicate=N` with `frequencies=`, one count per row: the N most frequent keys) keeps
        a copy of those keys on every node; their changes are sent to the others `syncs_per_sec`
        times a second, for keys whose change exceeds `threshold` (L2 norm; 0: every changed
        key). `sampling=pskv.Sampling(...)` gives the table a distribution to draw keys from.

        `consistency` (default: the node's, from `pskv.init(consistency=...)`) is pskv.Async(),
        pskv.BSP() or pskv.SSP(staleness=s). A BSP/SSP table keeps up to `cache_rows` copies of
        remote rows on this node (default min(rows, 100,000); 0: none) and buffers remote
        updates, duplicates summed, until the node's clock advances or `buffer_rows` are
        waiting. `aggregate="node"` sums the pushes of this node's worker threads per round
        before one update goes to the owner (mshadow-ps's two levels)."""
        self._check()
        consistency = self.consistency if consistency is None else as_consistency(consistency)
        if aggregate not in (None, "node"):
            raise TableError(f"table {name!r}: aggregate={aggregate!r}; use None or 'node'")
        if aggregate is not None and replicate is not None:
            raise TableError(f"table {name!r}: aggregate='node' and replicate= do not mix; an aggregated "
                             "table keeps its static placement (choose one technique per table)")
        with self._lock:
            if name in self._tables:
                raise TableError(f"table {name!r} is already declared on node {self.rank}; declare each table once")
            spec = TableSpec(name, int(rows), int(dim), np.dtype(dtype), updaters.get(updater), as_init(init),
                             table_id=len(self._tables))
            placement = Placement(spec.rows, self.num_nodes)
            shard = self.store.add(spec, *placement.manager_range(self.rank), self.rank)
            cache = np.full(spec.rows if location_caches else 0, -1, np.int64)
            state = TableState(spec, placement, shard, cache, sampling=sampling, consistency=consistency)
            config = spec.config()
            config["consistency"] = consistency.spec
            if consistency.synchronous and aggregate is None:
                self._add_cache_and_buffer(state, cache_rows, buffer_rows)
            if aggregate is not None:
                from .aggregation import Aggregator
                state.aggregator = Aggregator(self, state)
                config["aggregate"] = aggregate
            if replicate is not None:
                keys = hot_keys(spec, replicate, frequencies)
                shard.replicas = Replicas(spec, keys)
                state.sync_period = 1.0 / syncs_per_sec if syncs_per_sec > 0 else float("inf")
                state.threshold = float(threshold)
                config["replicate"] = [len(keys), int(zlib.crc32(keys.tobytes())), syncs_per_sec, threshold]
            self._tables[name] = self._by_id[spec.table_id] = state
        if shard.replicas is not None:
            self._replica_sync.start()
        try:
            self.client.declare(config)
        except TableError:
            with self._lock:
                self._tables[name] = None  # keeps ids aligned; using it raises UnknownTable
            raise
        return self._main().table(name)

    def _add_cache_and_buffer(self, state: TableState, cache_rows: int | None, buffer_rows: int) -> None:
        spec = state.spec
        capacity = min(spec.rows, 100_000) if cache_rows is None else int(cache_rows)
        if capacity < 0 or buffer_rows < 1:
            raise TableError(f"table {spec.name!r}: cache_rows={cache_rows} and buffer_rows={buffer_rows}; "
                             "use cache_rows >= 0 and buffer_rows >= 1")
        if capacity:
            state.cache = RowCache(spec.rows, spec.dim, spec.dtype, capacity,
                                   additive=isinstance(spec.updater, updaters.Add))
        main = self._main()
        state.buffer = PushBuffer(spec.dim, spec.dtype, buffer_rows,
                                  lambda keys, values: main.table(spec.name)._send_push(keys, values))

    def _clear_caches(self) -> None:
        """After a barrier, cached rows may miss updates issued before it: drop them."""
        for state in list(self._tables.values()):
            if state is not None and state.cache is not None:
                state.cache.clear()

    def _flush_buffers(self) -> list[Future]:
        """Send every BSP/SSP table's buffered updates; their Futures (any thread)."""
        futures = []
        for state in list(self._tables.values()):
            if state is not None and state.buffer is not None:
                fut = state.buffer.flush()
                if fut is not None:
                    futures.append(fut)
        return futures

    def run(self, fn: Callable[[Worker], object], threads: int | None = None) -> None:
        """Run fn(worker) in `threads` new threads (default PSKV_THREADS or 1) and wait for all.

        Re-raises the first exception a worker raised (the others then fail fast with it)."""
        self._check()
        again = self.clocks.started
        workers = [self._new_worker(thread) for thread in range(threads or self.config.threads)]
        if again and any(s is not None and s.consistency.synchronous for s in self._tables.values()):
            # a later run: the workers' clocks restart at 0 on every node; no node's workers may
            # race ahead before the others registered theirs (their nodes count as done till then)
            self.client.barrier()
        errors: list[BaseException] = []

        def body(w: Worker) -> None:
            try:
                fn(w)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(exc)
                self._abort(f"worker thread {w.thread} raised {exc!r}", exc)
            finally:
                w.close()

        threads_ = [threading.Thread(target=body, args=(w,), name=f"pskv-worker-{self.rank}.{w.thread}", daemon=True)
                    for w in workers]
        for t in threads_:
            t.start()
        for t in threads_:
            while t.is_alive():
                t.join(0.2)
        if errors:
            raise errors[0]

    def worker(self) -> Worker:
        """A new Worker for a thread you made; it takes part in barriers until `worker.close()`."""
        self._check()
        with self._lock:
            thread = self._next_thread
            self._next_thread += 1
        return self._new_worker(thread)

    def _new_worker(self, thread: int) -> Worker:
        w = Worker(self, thread)
        self._local_barrier.join(w)
        self.clocks.register(w)
        return w

    def stats(self) -> dict:
        """Counters of this node: per table calls, local and remote keys; messages and bytes sent to other
        nodes (coordinator traffic such as heartbeats is not counted)."""
        tables = {name: {**{k: getattr(s, k) for k in ("pulls", "pushes", "local_keys", "remote_keys", "localizes")},
                         "forwards": s.shard.forwards, "relocated_in": s.shard.relocated_in,
                         "replica_syncs": s.shard.replicas.syncs if s.shard.replicas else 0,
                         **_consistency_stats(s)}
                  for name, s in self._tables.items() if s is not None}
        return {"rank": self.rank, "tables": tables, "messages_sent": self._transport.messages_sent,
                "bytes_sent": self._transport.bytes_sent, "requests_served": self.server.requests,
                "request_errors": self.server.errors, "dropped": self.dropped, "forwards": self.server.forwards,
                "relocated_in": self.server.relocated_in, "clock": self.clocks.global_clock,
                "clock_waits": self.clocks.waits, "clock_wait_seconds": round(self.clocks.wait_seconds, 6)}

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the cluster: wait until every node called shutdown (they may still need this
        node's rows), then stop the threads and close the sockets. Idempotent."""
        if self._closed:
            return
        failed_before = self._failure is not None
        if not failed_before and not self.client.bye(timeout):
            if self.client.failure is not None:  # the cluster failed while we waited: say so
                self._fail(self.client.failure)
            else:
                self._abort(f"node {self.rank} left before every node said bye (timeout {timeout} s)",
                            ClosedError(f"node {self.rank} was shut down"))
        self._teardown()
        if not failed_before and self._failure is not None and not isinstance(self._failure.__cause__, ClosedError):
            raise self._failed()

    close = shutdown

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        if not clean and self._failure is None:
            self._abort(f"node {self.rank} left with {exc!r}", exc)
        self.shutdown()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("failed" if self._failure else "up")
        return f"<Node {self.rank}/{self.num_nodes} {state} tables={len(self._tables)}>"

    # ---- used by Worker / Table -----------------------------------------------------------------
    def send(self, rank: int, frames: list, *, copy: bool = False) -> None:
        self._transport.send(rank, frames, copy=copy)

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"node {self.rank} was shut down; create a new one with pskv.init()")
        if self._failure is not None:
            raise self._failed()

    def _table_state(self, name: str) -> TableState:
        self._check()
        state = self._tables.get(name)
        if state is None:
            known = sorted(n for n, s in self._tables.items() if s is not None)
            raise UnknownTable(f"no table {name!r} on node {self.rank}; declared tables: {known}; "
                               "declare it with node.table() on every node first")
        return state

    def _main(self) -> Worker:
        if self._main_worker is None:
            self._main_worker = Worker(self, -1)  # the main thread's handle; takes no part in barriers
        return self._main_worker

    # ---- failure and teardown -------------------------------------------------------------------
    def _fail(self, error: NodeFailure) -> bool:
        """Record the node's first failure and fail everything that waits; False if one was recorded."""
        with self._fail_lock:
            if self._failure is not None:
                return False
            self._failure = error
        self.tracker.fail_all(self._failed)
        self._local_barrier.break_(self._failed)
        return True

    def _failed(self) -> NodeFailure:
        """A fresh copy of the first failure (its own traceback), chained to its cause."""
        exc = copy.copy(self._failure)
        exc.__cause__ = self._failure.__cause__ or self._failure
        return exc

    def _abort(self, reason: str, exc: BaseException) -> None:
        """This node cannot go on: fail local calls first (so they all raise the same error,
        whatever comes back from the coordinator), then tell the others."""
        error = NodeFailure(f"node {self.rank} stopped: {reason}; every node of the cluster stops with it",
                            self.rank, self._transport.address)
        error.__cause__ = exc
        if not self._fail(error):
            return
        try:
            self.client.abort(reason)
        except PskvError:
            pass

    def _teardown(self) -> None:
        self._closed = True
        self._stop.set()
        self._replica_sync.stop()
        self._thread.join(5)
        self.tracker.fail_all(lambda: ClosedError(f"node {self.rank} was shut down while the request was pending"))
        self._local_barrier.break_(lambda: ClosedError(f"node {self.rank} was shut down"))
        _live_nodes.discard(self)
        self._transport.close()
        if self._coordinator is not None:
            self._coordinator.close()

    # ---- liveness ------------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """pskv-server: fail requests without progress for request_timeout; log why, once per batch."""
        timeout = self.config.request_timeout
        stalled = self.tracker.expire(now, timeout, self._stalled)
        if stalled:
            log.error("node %d: %d request(s) made no progress for %g s (PSKV_REQUEST_TIMEOUT); the first: %s\n%s",
                      self.rank, len(stalled), timeout, stalled[0], self.debug_state())

    def _stalled(self, desc: str, age: float, idle: float, remaining: int, total: int, ranks: list[int],
                 seen: str) -> RequestStalled:
        where = f"sent to node(s) {ranks}" if ranks else "not sent to any node"
        address = (self.client.addresses or {}).get(ranks[0], "") if ranks else ""
        return RequestStalled(
            f"{desc}: no progress for {idle:.1f} s (request_timeout {self.config.request_timeout:g} s, age "
            f"{age:.1f} s), {remaining} of {total} key(s) unanswered, {where}; last seen: {seen}. The node(s) may "
            "be hung, overloaded or unreachable: their logs (or SIGUSR1 to them) show what they wait for; raise "
            "PSKV_REQUEST_TIMEOUT if they are only slow", ranks[0] if ranks else -1, address, desc, ranks)

    def debug_state(self) -> str:
        """What this node waits for, as text: outstanding and deferred requests, collectives, clocks,
        worker barrier, queues. Any thread; never blocks on the cluster. Also logged on SIGUSR1."""
        lines = [f"pskv node {self.rank}/{self.num_nodes} ({'closed' if self._closed else 'failed: ' + str(self._failure) if self._failure else 'up'}) "
                 f"at {self._transport.address}"]
        lines += ["  " + line for line in self.tracker.describe()]
        lines += ["  " + line for line in self.server.describe()]
        lines += ["  " + line for line in self.client.describe()]
        lines.append(f"  {self._local_barrier!r}")
        lines.append(f"  {self.clocks!r} waits={self.clocks.waits}")
        for name, st in list(self._tables.items()):
            parts = [repr(x) for x in (st.buffer, st.cache, st.aggregator, st.shard.replicas) if x is not None] if st else []
            if parts:
                lines.append(f"  table {name!r}: {' '.join(parts)}")
        lines.append(f"  transport: {self._transport!r}; early messages held: {len(self._early)}")
        return "\n".join(lines)

    # ---- pskv-server thread ---------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                frames = self._transport.recv(0.05)
                if frames is not None:
                    self._dispatch(frames)
                now = time.monotonic()
                self.client.check(now)
                if now >= self._next_expiry:
                    self._next_expiry = now + min(1.0, self.config.request_timeout / 4)
                    self._expire(now)
            except Exception:  # garbage must never kill the server thread
                self.dropped += 1
                log.exception("node %d: error while dispatching a message", self.rank)

    def _dispatch(self, frames: list) -> None:
        try:
            header = unpack_header(frame_bytes(frames[0]))
        except ProtocolError as exc:
            self.dropped += 1
            log.warning("node %d dropped a message: %s", self.rank, exc)
            return
        if header.sender == COORDINATOR:
            welcomed = self.client.addresses is not None
            if (welcomed and header.cluster != self.cluster) or (not welcomed and header.kind not in _FIRST_WORDS):
                self.dropped += 1
                log.warning("node %d dropped %r: not from this cluster's coordinator", self.rank, header)
                return
            try:
                payload = control_payload(header, frames)
            except ProtocolError as exc:
                self.dropped += 1
                log.warning("node %d dropped a coordinator message: %s", self.rank, exc)
                return
            self.client.handle(header, payload)
            if header.kind == Kind.WELCOME:
                for rank, address in self.client.addresses.items():
                    self._transport.set_address(rank, address)
                early, self._early = self._early, []
                for f in early:
                    self._dispatch(f)
            return
        if self.client.addresses is None and header.cluster and len(self._early) < 100_000:
            self._early.append(frames)  # a peer was welcomed before us; replay after our WELCOME
            return
        if header.cluster != self.cluster or not 0 <= header.sender < self.num_nodes:
            self.dropped += 1
            log.warning("node %d dropped %r: not from this cluster", self.rank, header)
            return
        if header.kind == Kind.AGG_PUSH:  # a node's level-1 sum for an aggregate="node" table
            self.server.handle(header, frames)
            return
        if header.kind in REQUESTS or header.kind in RELOCATION:
            self.server.handle(header, frames)
        elif header.kind in REPLIES:
            self._reply(header, frames)

    def _reply(self, header, frames) -> None:
        if header.kind == Kind.ERROR:
            message = frame_bytes(frames[1]).decode(errors="replace") if len(frames) > 1 else "?"
            self.tracker.on_reply(header.request_id, 0, header.sender,
                                  error=RemoteError(f"node {header.sender} rejected the request: {message}", header.sender))
            return
        try:
            payload = unpack(header, frames)
        except ProtocolError as exc:
            self.tracker.on_reply(header.request_id, 0, header.sender, error=exc)
            return
        self.tracker.on_reply(header.request_id, header.n_keys, header.sender, (header, payload))


class _LocalBarrier:
    """Barrier over this node's open workers, whose last arrival runs the cluster-wide barrier."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._cond = threading.Condition()  # guards all below; not held during the cluster barrier
        self._members: set[int] = set()
        self._arrived = 0
        self._generation = 0
        self._error: Callable[[], BaseException] | None = None  # makes the error each waiter raises

    def join(self, worker: Worker) -> None:
        with self._cond:
            self._members.add(id(worker))

    def leave(self, worker: Worker) -> None:
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
            self._node.client.barrier(timeout)
            self._node._clear_caches()  # every worker of this node waits here: no pull races the clear
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


def _consistency_stats(s: TableState) -> dict:
    """Counters of a BSP/SSP table's row cache and push buffer, and of an aggregated table's rounds."""
    out = {}
    if s.cache is not None:
        out.update(cache_hits=s.cache.hits, cache_misses=s.cache.misses, cache_evictions=s.cache.evictions,
                   cache_rows=len(s.cache))
    if s.buffer is not None:
        out.update(flushes=s.buffer.flushes, buffered_rows=s.buffer.rows_in, flushed_rows=s.buffer.rows_out)
    if s.aggregator is not None:
        out.update(aggregated_rounds=s.aggregator.rounds, aggregated_messages=s.aggregator.messages)
    return out


def _bind_problem(exc: TransportError, host: str, port: int) -> str:
    """Why binding the coordinator's port failed, and what to do, in words."""
    errno = getattr(exc.__cause__, "errno", None)
    if errno == zmq.EADDRINUSE:
        return (f"port {port} is already in use (another pskv cluster or another program holds it); choose a free "
                f"port in PSKV_COORDINATOR, or stop what listens there (`ss -ltnp | grep :{port}`)")
    if errno == zmq.EADDRNOTAVAIL:
        return (f"{host} is not an address of this machine; node 0 starts the coordinator when no launcher runs "
                "one, so PSKV_COORDINATOR must name node 0's machine (or use `pskv launch`)")
    return str(exc)


_live_nodes: "weakref.WeakSet[Node]" = weakref.WeakSet()  # for the SIGUSR1 dump
_dump_installed = False


def _install_dump_handler() -> None:
    """SIGUSR1 logs every live node's debug_state() to stderr (main thread only; never replaces
    a handler the program installed itself)."""
    global _dump_installed
    if _dump_installed or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        return
    if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
        return
    signal.signal(signal.SIGUSR1, _dump)
    _dump_installed = True


def _dump(signum=None, frame=None) -> None:
    for node in list(_live_nodes):
        print(node.debug_state(), file=sys.stderr, flush=True)


def _exit_hook(ref) -> None:
    """At interpreter exit, a node that was never shut down tells the others it is gone."""
    node = ref()
    if node is not None and not node._closed:
        node._abort("process exited without node.shutdown()", ClosedError("process exiting"))
        node._teardown()


def init(**overrides) -> Node:
    """Join the cluster described by PSKV_* (set by `pskv launch`), or start a private 1-node one.

    Blocks until every node joined (PSKV_RENDEZVOUS_TIMEOUT). Keyword overrides take precedence
    over the environment (e.g. `threads=4`, `failure_timeout=5`, `consistency=pskv.SSP(2)`).
    Use it as a context manager or call `node.shutdown()` at the end."""
    return Node(NodeConfig.from_env(**overrides))
