"""Node: one process of the cluster, and the composition root: it builds the layers and wires them.

    python -c "import pskv; node = pskv.init(); print(node)"        # a private 1-node cluster
    pskv launch -n 2 --threads 2 -- python examples/quickstart.py    # a 2-node cluster

Nothing below this module imports it; each part gets what it needs through its constructor
(docs/design.md shows the layers and a request's life). The pieces, bottom up:

    net         Transport (sockets), Endpoint (every header and send; replies in), Dispatcher
                (pskv-server's receive loop, one handler per Kind), RequestTracker
    membership  View (ranks, addresses, epoch; admits messages), CoordinatorClient, Health (the
                first failure), LocalBarrier (this node's workers)
    store       Store of Shards; catalog: the tables, each with its technique parts
    server      Server (requests, forwards, relocation, replica syncs, aggregation owners)
    client      Worker and Table (the user API), Aggregator, ReplicaSync (pskv-replica thread)

Threads and ownership: the thread that calls `init()` owns the Node's lifecycle (`table()`,
`run()`, `shutdown()`). pskv-server runs `Dispatcher.run`: it dispatches what arrives, sends
heartbeats and fails requests that made no progress for `request_timeout`. Worker threads call
`Table`/`Worker` methods. `health` holds the first failure (any thread records it); every API
call checks it, so no call blocks on a broken cluster.

`SIGUSR1` makes every node of this process log its outstanding requests, deferred requests,
collectives and queues (`debug_state()`), so a hang explains itself.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import resource
import threading
import weakref
from typing import Callable

import numpy as np

from .. import _hooks, updaters
from ..catalog import Catalog
from ..checkpoint import format as checkpoint_format
from ..checkpoint.collective import Checkpointer
from ..checkpoint.restore import Restorer
from ..client import compat
from ..client.context import Context
from ..client.filters import table_codec
from ..client.replica_sync import ReplicaSync
from ..client.table import Table
from ..client.worker import Worker
from ..config import NodeConfig
from ..consistency.clocks import Clocks
from ..errors import BarrierTimeout, ClosedError, ClusterError, NodeFailure, PskvError, ShapeError
from ..membership import client as coordinator_client
from ..membership import join
from ..membership.barrier import LocalBarrier
from ..membership.client import CoordinatorClient
from ..membership.coordinator import start_coordinator
from ..membership.health import Health
from ..membership.takeover import Succession
from ..membership.view import View
from ..monitor.prometheus import Exporter
from ..net import auth, endpoint as endpoint_
from ..net.dispatch import Dispatcher
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.transport import Transport
from ..net.wire import COORDINATOR
from ..options import TableOptions, as_consistency
from ..server import serve
from ..server.chain import Chain
from ..server.serve import Server
from ..store import shm
from ..store.peer import Neighbors
from ..store.shard import Store
from ..store.spec import SPARSE_ROWS, TableSpec, as_init
from . import diagnostics, elastic
from .tables import TableBuilder

log = logging.getLogger(__name__)


class Node:
    """One node process of a pskv cluster. Make it with `pskv.init()`."""

    def __init__(self, config: NodeConfig) -> None:
        self._transport = Transport(config.host, send_timeout=config.failure_timeout, drop_rate=config.test_drop_rate,
                                    keys=auth.keys_for(config), ipc=config.shared_memory)
        self._joined: dict | None = None  # JOINED: this node joined a running cluster (membership.join)
        if config.join:
            try:
                cluster, self._joined = join.ask(self._transport, config)
            except BaseException:
                self._transport.close()
                raise
            config = dataclasses.replace(config, rank=int(self._joined["rank"]), num_nodes=int(self._joined["num_nodes"]),
                                         coordinator=config.join, external_coordinator=True,
                                         backups=int(self._joined.get("backups", 0)))  # the cluster's, not ours
        self.config = config
        self.rank = config.rank
        # a checkpoint to start from: checked whole on every node before anything starts (CheckpointError)
        self._restorer = Restorer(config.restore, self.rank) if config.restore else None
        self.health = Health(self.rank)
        self.view = View(self.rank, self.config.num_nodes, config.backups)
        if self._joined is not None:
            self.view.joined(cluster, self._joined)
        self._coordinator, self.config = start_coordinator(self.config)  # here if a private cluster or node 0
        self._transport.set_address(COORDINATOR, self.config.coordinator)
        self.tracker = RequestTracker(health=self.health.check)
        self.endpoint = Endpoint(self.rank, self._transport, self.tracker, lambda: self.view.cluster,
                                 epoch=lambda: self.view.epoch,
                                 admit=lambda h: h.sender in self.view.alive or h.sender in self.view.leaving)
        self.store = Store()
        self.neighbors = Neighbors()  # co-located nodes' shards, once welcomed (store.peer)
        self._sharing = threading.Lock()  # guards _shared (set up at WELCOME, or at the first table if sooner)
        self._shared = False
        self.catalog = Catalog(self.rank)
        self.consistency = as_consistency(config.consistency)  # the default of this node's tables
        self.clocks = Clocks(lambda clock, seq: self.client.report_clock(clock, seq), self.catalog.flush_buffers,
                             self.health.check)
        self.server = Server(self.store, self.endpoint, self.tracker, lambda table_id: self.catalog.by_id(table_id).ranges,
                             on_declined=lambda table, keys, owner, seconds: self.catalog.by_id(table).note_declined(
                                 keys, owner, seconds))
        chain = None
        if config.backups:
            chain = self.server.chain = Chain(self.endpoint, lambda: self.view.chains,
                                              lambda: self.view.epoch, self.server.forward,
                                              lambda epoch: self.client.synced(epoch))
        self._exporter: Exporter | None = None  # PSKV_METRICS_PORT: started below, closed in _teardown
        self._dispatcher = Dispatcher(self._transport, self.rank, self.view.admit, on_refused=self.health.fail)
        if chain is not None:
            self._dispatcher.at_burst_end(chain.batches.flush)
        self.succession = None
        if chain is not None:
            self.succession = Succession(self.view, self.config, self._transport, self._dispatcher.release_held,
                                         lambda: {"low": self.tracker.low_watermark(), "filling": chain.filling()})
        self._membership = elastic.MembershipChanges(self.rank, self.view, self._transport, self.server, self.store,
                                                     self.catalog, self.tracker, self._dispatcher.release_held,
                                                     lambda epoch: self.client.drained(epoch))
        self.client = CoordinatorClient(lambda frames: self._transport.send(COORDINATOR, frames), self.view,
                                        self.config, self.health.fail, self.clocks.on_global, health=self.health.check,
                                        on_welcome=self._welcomed, on_membership=self._membership.changed,
                                        low_watermark=self.tracker.low_watermark if chain else None,
                                        on_low=chain.prune if chain else None, succession=self.succession)
        self._barrier = LocalBarrier(self.client.barrier, self.catalog.clear_caches, self._settle, rank=self.rank,
                                     log_every=config.wait_log_interval, patience=config.collective_timeout)
        self.clocks.waiting = diagnostics.clock_waits(self.rank, config.wait_log_interval, self.clocks, self.client)
        self._stop = threading.Event()
        self._replica_sync = ReplicaSync(self.endpoint, self.config.num_nodes, self.catalog, self._stop,
                                         lambda: self.health.failure is not None, lambda: self.members)
        self._checkpointer = Checkpointer(self.rank, self.catalog, self.tracker, self.health.check,
                                          members=lambda: self.members, barrier=self.client.barrier,
                                          flush_replicas=self._replica_sync.flush, clock=lambda: self.clocks.global_clock,
                                          epoch=lambda: self.view.epoch)
        self._ctx = Context(self.rank, self.config.num_nodes, self.endpoint, self.tracker, self.catalog, self.health.check,
                            self.clocks, self._barrier, self._replica_sync, config.collective_timeout,
                            lambda: self.view.chains, lambda: sorted(self.view.alive), self._checkpointer.gate,
                            self.neighbors)
        self._tables = TableBuilder(self.rank, self.config, self.view, self.store, self.server, self.endpoint, self._ctx,
                                    joined=self._joined is not None)
        self.health.on_failure(self.tracker.fail_all)
        self.health.on_failure(self._barrier.break_)
        self._main_worker = Worker(self._ctx, -1)  # the main thread's handle; takes no part in barriers
        self._next_thread = 0
        self._lock = threading.Lock()  # guards _next_thread
        self._dispatcher.register(coordinator_client.HANDLES, self.client.on_message)
        self._dispatcher.register(endpoint_.HANDLES, self.endpoint.on_reply)
        self._dispatcher.register(serve.HANDLES, self.server.handle)
        self._dispatcher.every(self.client.check)
        self._next_expiry = 0.0  # pskv-server: when to look for stalled requests next
        self._dispatcher.every(self._expire)
        self._dispatcher.every(self._membership.drained)
        self._thread = threading.Thread(target=self._dispatcher.run, args=(self._stop,), name=f"pskv-server-{self.rank}",
                                        daemon=True)
        if self._joined is not None:  # the cluster runs: start as if welcomed, where the others are
            self.clocks.start_at(int(self._joined["clock"]))
            self.client.joined(self._joined)
            self._welcomed()
        self._thread.start()
        try:
            if self.config.metrics_port:  # before joining: a port in use fails this node alone
                self._exporter = Exporter(self.config.host, self.config.metrics_port + self.rank, self.rank,
                                          self._monitor_sample)
            if self._joined is None:
                self.client.join(self._transport.address, self.config.num_nodes)
            else:  # with backups and no table yet: into the chains at once (membership.joining)
                self.client.await_entry(self.config.collective_timeout)
        except BaseException:
            self._teardown()
            raise
        atexit.register(diagnostics.exit_hook, weakref.ref(self))
        diagnostics.live.add(self)
        diagnostics.install_dump_handler()
        diagnostics.install_excepthook(self.config.full_tracebacks)
        log.info("node %d/%d up at %s", self.rank, self.config.num_nodes, self._transport.address)

    @property
    def cluster(self) -> int:
        return self.view.cluster

    @property
    def members(self) -> list[int]:
        """The ranks of the live nodes: all of them until a node dies (backups), leaves or joins."""
        return sorted(self.view.alive)

    @property
    def num_nodes(self) -> int:
        """How many nodes the cluster has now (`len(members)`; the launch size until it is up)."""
        return len(self.view.alive) if self.view.welcomed else self.config.num_nodes

    def on_membership_change(self, fn: Callable[[list[int]], None]) -> None:
        """Call fn(members) after each membership change (a node died and backups took over its
        key ranges). It runs in the node's pskv-server thread: keep it short, do not call pskv in it."""
        self._membership.callbacks.append(fn)

    @property
    def dropped(self) -> int:
        """Messages dropped as garbage or from another cluster (malformed packed frames count once)."""
        return self._dispatcher.dropped + self._transport.dropped + self.endpoint.dropped

    def _welcomed(self) -> None:
        """pskv-server, at WELCOME: learn the others' addresses, then take what they sent us early."""
        for rank, address in self.view.addresses.items():
            self._transport.set_address(rank, address)
        self._share_memory()
        self._dispatcher.release_held()

    def _share_memory(self) -> None:
        """Shards in shared memory with the nodes of this host (store.shm), unless PSKV_SHARED_MEMORY=0
        or this is a private 1-node cluster (no other process could use it)."""
        cfg = self.config
        if not cfg.shared_memory or (cfg.num_nodes == 1 and not cfg.external_coordinator and self._joined is None):
            return
        with self._sharing:  # (pskv-server at WELCOME, or the first table() if it comes sooner: once)
            if self._shared:
                return
            self._shared = True
            shm.sweep()  # (files of processes that died here)
            directory = shm.host_dir(self.view.cluster, cfg.host)
            if directory is not None:
                self.store.share(shm.Segments(directory, self.rank))
                self.neighbors.open(directory, self.rank)

    # ---- public API -----------------------------------------------------------------------------
    def table(self, name: str, rows: int | None, dim: int = 1, dtype="float32", updater="add", init=0.0, *,
              placement=None, replicate=None, sampling=None, consistency=None, cache=None, aggregate=None,
              key_space: str = "dense", storage: str = "memory", cache_rows: int | None = None, path=None,
              filters=None, **deprecated) -> Table:
        """Declare table `name` on every node (collective) and return a handle for this thread.

        Blocks until every node declared it. Raises TableMismatch (on every node) if nodes declared
        it differently, TableError for a name declared twice.

        Techniques are options, one object each (see pskv.options): `placement=pskv.Relocate(
        location_caches=True)` (every table can `localize`; location caches skip the hop through a
        relocated key's manager), `replicate=pskv.Replicate(keys=... | hottest=N, frequencies=...)`
        (a copy of hot keys on every node), `sampling=pskv.Sampling(weights)`, `consistency=`
        pskv.Async() / pskv.BSP() / pskv.SSP(staleness=s) (default: the node's, from
        `pskv.init(consistency=...)`), `cache=pskv.Cache(rows=, buffer_rows=)` (BSP/SSP row cache
        and push buffer), `aggregate=pskv.NodeAggregate()` (sum this node's worker threads' pushes
        per round, mshadow-ps). The keywords of earlier releases still work, with a DeprecationWarning.

        `key_space="uint64", rows=None`: a sparse table whose keys are any uint64 ids (hashed
        features), rows created on first write, key ranges split over the nodes (store.sparse);
        Async, BSP or SSP (a push buffer, no row cache: `cache=pskv.Cache(rows=)` is inert there),
        without the other techniques above or backups (ConfigError). `leave()` hands
        each range it manages, whole, to another member; a node that joins holds none until then.

        `storage="disk", cache_rows=N, path=DIR`: this node's rows live in files under DIR, with
        at most about N rows' pages in memory (store.disk; Bösen's out-of-core tables).

        `filters=`: wire filters (pskv.filters.KeyCache, Compress, Quantize, or their `parse` form)
        that this node's pushes and pulls of the table travel with when a call gives none.

        Options that do not compose (with each other, the table's kind or the cluster) raise
        ConfigError naming both before anything is declared; docs/compatibility.md lists them
        (pskv.client.compat). The table's path is composed once, here (pskv.client.path)."""
        self.health.check()
        if storage != "disk" and cache_rows is not None:  # the old flat keyword of BSP/SSP's row cache
            deprecated["cache_rows"], cache_rows = cache_rows, None
        consistency = self.consistency if consistency is None else as_consistency(consistency)
        # what does not compose, before anything is made (client.compat: the one list of refused pairs)
        compat.check_declaration(name, compat.declared(
            key_space=key_space, storage=storage, placement=placement, replicate=replicate, sampling=sampling,
            aggregate=aggregate, consistency=consistency, filters=filters, old=deprecated,
            backups=self.config.backups, joined=self._joined is not None))
        options = TableOptions.of(name, placement, replicate, sampling, cache, aggregate, **deprecated)
        codec = None if filters is None else table_codec(filters, name, dtype)
        if key_space == "uint64":
            if rows is not None:
                raise ShapeError(f"table {name!r} (key_space='uint64'): has no row count; pass rows=None")
            rows = SPARSE_ROWS
        elif rows is None:
            raise ShapeError(f"table {name!r}: rows=None is for key_space='uint64' tables; give the row count")
        spec = TableSpec(name, int(rows), int(dim), np.dtype(dtype), updaters.get(updater), as_init(init),
                         table_id=self.catalog.next_id(name), key_space=key_space)
        saved, mismatch = self._restorer.match(spec.config()) if self._restorer is not None else (None, None)
        disk = self._tables.disk(spec, storage, cache_rows, path)
        self._share_memory()  # (WELCOME's pskv-server may not have got to it yet)
        state, config = self._tables.build(spec, options, consistency, fill=saved is None, disk=disk)
        state.codec = codec
        _hooks.reach("node.built", node=self.rank, table=name)
        self.catalog.add(state)
        self._tables.current_ranges(state)
        if state.shard.replicas is not None:
            self._replica_sync.start()
        try:
            self.client.declare(config)
            if mismatch is not None:  # after the collective: every node gets here, and raises it
                raise mismatch
        except PskvError:
            self.catalog.discard(name)
            raise
        if self._joined is not None:
            localize = functools.partial(self._main_worker.table(name).localize, _force=True)
            elastic.take_share(state, self._joined, localize, self.rank, self.config.collective_timeout)
            self._replica_sync.catch_up(state, self.config.collective_timeout)  # its replicas: the cluster's values
        if saved is not None:  # every node loads its range (and its backup copies), then all go on together
            copies = self.server.chain.copies(spec.table_id) if self.server.chain is not None else []
            loaded = sum(self._restorer.load(saved, shard) for shard in [state.shard, *copies])
            log.info("node %d restored %d rows of table %r from %s", self.rank, loaded, name, self._restorer.path)
            self.client.barrier()
        return self._main_worker.table(name)

    def checkpoint(self, directory, keep: int | None = None, *, extra: dict | None = None,
                   timeout: float | None = None) -> checkpoint_format.CheckpointInfo:
        """Write a checkpoint of every table under `directory` (collective: every node calls it).

        A consistent cut: every push issued on any node before that node entered the call is in
        it, none issued later (writes wait meanwhile). Every node writes the rows it owns in
        parallel; the lowest live node writes manifest.json last, so a checkpoint is complete
        or ignored. `keep=N` keeps the N newest. `extra` (JSON) is saved in the manifest (an
        app's epoch and RNG state). Returns a CheckpointInfo (`.path`, `.step`). Call it from
        one thread per node (the main thread, or e.g. each node's worker thread 0), not while
        another thread of the node is in barrier(). Raises CheckpointError."""
        self.health.check()
        return self._checkpointer.take(directory, keep, extra, timeout or self.config.collective_timeout)

    def leave(self, timeout: float | None = None) -> None:
        """Leave a running cluster for good, then close this node (call it when this node's workers
        are done). Every request this node sent completes first; then the others go on without it
        in a new membership epoch (`node.on_membership_change` fires on them), with nothing lost.
        With backups its ranges are served by their backups, which copy them on, as when a node
        dies. Without, it first hands every row it owns (with updater state) and every key range it
        manages to the others (server.handoff), and it forwards whatever still reaches it until
        the others drained their requests. Raises ClusterError when the coordinator refuses (this
        node runs it, another node is leaving, a range would lose its last whole copy: try again),
        ConfigError for aggregated tables without backups."""
        self.health.check()
        elastic.check_leave(self.rank, self.catalog, self.config.backups)
        wait = timeout or self.config.collective_timeout
        self.catalog.flush_buffers()
        self._replica_sync.flush(wait)  # its changes of replicated keys reach the others first
        if not self.tracker.drain(self.health.check, wait):
            raise ClusterError(f"node {self.rank}: its requests were not answered within {wait:g} s; it did not leave")
        if self.config.backups:
            self.client.leave(wait)
        else:
            plan = self.client.leave_plan(wait)
            elastic.hand_over(plan, wait, rank=self.rank, catalog=self.catalog, tracker=self.tracker,
                              endpoint=self.endpoint, soon=self._dispatcher.soon, check=self.health.check)
            self.client.leave_handed(plan, wait)
        log.info("node %d left the cluster", self.rank)
        self._teardown()

    @property
    def restored(self) -> dict:
        """What the checkpoint this cluster started from (`restore=`) saved as `extra`; {} if none."""
        return dict(self._restorer.extra) if self._restorer is not None else {}

    def run(self, fn: Callable[[Worker], object], threads: int | None = None) -> None:
        """Run fn(worker) in `threads` new threads (default PSKV_THREADS or 1) and wait for all.

        When fn returns, its worker completes the requests it issued and did not wait for
        (`worker.close()`): when run() returns, every push of its workers is applied. Re-raises
        the first exception a worker raised, or a failure of one of those requests (the others
        then fail fast with it)."""
        self.health.check()
        again = self.clocks.started
        workers = [self._new_worker(thread, restart=True) for thread in range(threads or self.config.threads)]
        if again and any(s.consistency.synchronous for s in self.catalog.tables()):
            # a later run: the workers' clocks restart at 0 on every node; no node's workers may
            # race ahead before the others registered theirs (their nodes count as done till then)
            self.client.barrier()
        errors: list[BaseException] = []

        def body(w: Worker) -> None:
            try:
                fn(w)
                w.close()  # its pushes and sets complete; a failed one is the worker's error
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(exc)
                self._abort(f"worker thread {w.thread} raised {exc!r}", exc)
            finally:
                try:
                    w.close()  # after an error: leaves (the node failed: its requests fail at once)
                except BaseException:  # noqa: BLE001 - the worker's first error is the one run() raises
                    pass

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
        self.health.check()
        with self._lock:
            thread = self._next_thread
            self._next_thread += 1
        return self._new_worker(thread)

    def _settle(self, timeout: float | None) -> None:
        """The last of this node's workers to reach a barrier, before the cluster-wide one: send the
        BSP/SSP push buffers and wait until every request this node issued so far is answered,
        whichever handle issued it (a worker that closed, the main thread's, another worker), so
        the barrier covers them. Their errors are their issuers' (each Future keeps its own)."""
        self.catalog.flush_buffers()
        wait = self.config.collective_timeout if timeout is None else timeout
        if not self.tracker.drain(self.health.check, wait):
            raise BarrierTimeout(f"barrier on node {self.rank}: the requests this node issued before it were not "
                                 f"all answered within {wait:g} s; node.debug_state() lists them", [])

    def _new_worker(self, thread: int, restart: bool = False) -> Worker:
        w = Worker(self._ctx, thread)
        self._barrier.join(w)
        self.clocks.register(w, restart=restart)  # node.run: its workers' clocks start at 0
        return w

    def stats(self) -> dict:
        """Counters of this node: per table calls, local and remote keys; messages and bytes sent to other
        nodes (coordinator traffic such as heartbeats is not counted)."""
        tables = {s.spec.name: {**s.counters(), "forwards": s.shard.forwards, "relocated_in": s.shard.relocated_in,
                                "replica_syncs": s.shard.replicas.syncs if s.shard.replicas else 0}
                  for s in self.catalog.tables()}
        return {"rank": self.rank, "epoch": self.view.epoch, "members": self.members, "tables": tables,
                "messages_sent": self._transport.messages_sent,
                "bytes_sent": self._transport.bytes_sent, "requests_served": self.server.requests,
                "request_errors": self.server.errors, "dropped": self.dropped, "fenced": self._dispatcher.fenced,
                "forwards": self.server.forwards,
                "relocated_in": self.server.relocation.relocated_in,
                "declined": self.server.relocation.declined, "clock": self.clocks.global_clock,
                "clock_waits": self.clocks.waits, "clock_wait_seconds": round(self.clocks.wait_seconds, 6),
                "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # (Linux: KiB)
                "rss_bytes": diagnostics.rss_now()}

    def _monitor_sample(self) -> dict:
        """stats() and what only the metrics exporter reads (pskv.monitor): request latencies, queue
        depths, membership changes. Any thread (a scrape's); never blocks on the cluster."""
        return {**self.stats(), "latency": self.tracker.latency(), "messages_received": self._transport.messages_received,
                "bytes_received": self._transport.bytes_received,
                "pending_requests": len(self.tracker), "deferred_requests": self.server.relocation.waiting(),
                "held_messages": self._dispatcher.held(), "membership_changes": self._membership.count,
                "failed": self.health.failure is not None,
                "staleness": {s.spec.name: s.consistency.staleness for s in self.catalog.tables()}}

    def shutdown(self, timeout: float | None = None) -> None:
        """Leave the cluster: wait until every node called shutdown (they may still need this
        node's rows), then stop the threads and close the sockets. Idempotent."""
        if self.health.closed:
            return
        failed_before = self.health.failure is not None
        if not failed_before and not self.client.bye(timeout):
            if self.client.failure is not None:  # the cluster failed while we waited: say so
                self.health.fail(self.client.failure)
            else:
                self._abort(f"node {self.rank} left before every node said bye (timeout {timeout} s)",
                            ClosedError(f"node {self.rank} was shut down"))
        self._teardown()
        failure = self.health.failure
        if not failed_before and failure is not None and not isinstance(failure.__cause__, ClosedError):
            raise self.health.failed()

    close = shutdown

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        if not clean and self.health.failure is None:
            self._abort(f"node {self.rank} left with {exc!r}", exc)
        self.shutdown()

    def __repr__(self) -> str:
        return f"<Node {self.rank}/{self.config.num_nodes} {self.health.state} tables={len(self.catalog)}>"

    # ---- failure and teardown -------------------------------------------------------------------
    def _abort(self, reason: str, exc: BaseException) -> None:
        """This node cannot go on: fail local calls first (so they all raise the same error,
        whatever comes back from the coordinator), then tell the others."""
        error = NodeFailure(f"node {self.rank} stopped: {reason}; every node of the cluster stops with it",
                            self.rank, self._transport.address)
        error.__cause__ = exc
        if not self.health.fail(error):
            return
        try:
            self.client.abort(reason)
        except PskvError:
            pass

    def _teardown(self) -> None:
        self.health.closed = True
        if self._exporter is not None:
            self._exporter.close()
        self._stop.set()
        self._replica_sync.stop()
        self._thread.join(5)
        self.tracker.fail_all(lambda: ClosedError(f"node {self.rank} was shut down while the request was pending"))
        self._barrier.break_(lambda: ClosedError(f"node {self.rank} was shut down"))
        diagnostics.live.discard(self)
        self._transport.close()
        if self._coordinator is not None:
            self._coordinator.close()
        if self.succession is not None:
            self.succession.close()
        self.store.close()  # (shared memory: its files go; peers fall back to messages)

    # ---- liveness ------------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """pskv-server: fail requests without progress for request_timeout; log why, once per batch."""
        if now < self._next_expiry:
            return
        timeout = self.config.request_timeout
        self._next_expiry = now + min(1.0, timeout / 4)
        stalled = self.tracker.expire(now, timeout, functools.partial(diagnostics.stalled, timeout=timeout,
                                                                      address=self.view.address))
        if stalled:
            log.error("node %d: %d request(s) made no progress for %g s (PSKV_REQUEST_TIMEOUT); the first: %s\n%s",
                      self.rank, len(stalled), timeout, stalled[0], self.debug_state())

    def debug_state(self) -> str:
        """What this node waits for, as text: outstanding and deferred requests, collectives, clocks,
        worker barrier, queues. Any thread; never blocks on the cluster. Also logged on SIGUSR1."""
        lines = [f"pskv node {self.rank}/{self.config.num_nodes} ({self.health!r}) at {self._transport.address}"]
        lines += ["  " + line for line in self.tracker.describe()]
        lines += ["  " + line for line in self.server.describe()]
        lines += ["  " + line for line in self.client.describe()]
        lines.append(f"  {self._barrier!r}")
        lines.append(f"  {self.clocks!r} waits={self.clocks.waits}")
        lines += [f"  table {s.spec.name!r}: {' '.join(s.parts())}" for s in self.catalog.tables() if s.parts()]
        lines.append(f"  transport: {self._transport!r}; early messages held: {self._dispatcher.held()}")
        return "\n".join(lines)


def init(**overrides) -> Node:
    """Join the cluster described by PSKV_* (set by `pskv launch`), or start a private 1-node one.

    Blocks until every node joined (PSKV_RENDEZVOUS_TIMEOUT). Keyword overrides take precedence
    over the environment (e.g. `threads=4`, `failure_timeout=5`, `consistency=pskv.SSP(2)`).
    Use it as a context manager or call `node.shutdown()` at the end."""
    return Node(NodeConfig.from_env(**overrides))
