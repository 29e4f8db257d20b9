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
import logging
import resource
import signal
import sys
import threading
import time
import weakref
import zlib
from typing import Callable

import numpy as np
from . import _hooks, updaters
from .catalog import Catalog, TableState
from .checkpoint import format as checkpoint_format
from .checkpoint.collective import Checkpointer, Restorer
from .client.aggregate import Aggregator
from .client.context import Context
from .client.replica_sync import ReplicaSync
from .client.table import Table
from .client.worker import Worker
from .config import NodeConfig
from .consistency.buffer import PushBuffer
from .consistency.cache import RowCache
from .consistency.clocks import Clocks
from .options import as_consistency
from .errors import ClosedError, ClusterError, ConfigError, NodeFailure, PskvError, RequestStalled, ShapeError
from .membership import client as coordinator_client
from .membership.barrier import LocalBarrier
from .membership.client import CoordinatorClient
from .membership.coordinator import start_coordinator
from .membership import join
from .membership.health import Health
from .membership.takeover import Succession
from .membership.view import View
from .monitor.prometheus import Exporter
from .net import auth, endpoint as endpoint_
from .net.dispatch import Dispatcher
from .net.endpoint import Endpoint
from .net.requests import RequestTracker
from .net.transport import Transport
from .net.wire import COORDINATOR
from .options import TableOptions
from .placement.hot import hot_keys
from .server import handoff, serve
from .server.aggregate import Owner
from .server.rounds import Rounds
from .server.chain import Chain
from .server.serve import Server
from .store.replicas import Replicas
from .store.disk import DiskRows
from .store.spec import SPARSE_ROWS, TableSpec, as_init
from .store.shard import Store

log = logging.getLogger(__name__)


class Node:
    """One node process of a pskv cluster. Make it with `pskv.init()`."""

    def __init__(self, config: NodeConfig) -> None:
        self._transport = Transport(config.host, send_timeout=config.failure_timeout, drop_rate=config.test_drop_rate,
                                    keys=auth.keys_for(config))
        self._joined: dict | None = None  # JOINED: this node joined a running cluster (membership.join)
        if config.join:
            try:
                cluster, self._joined = join.ask(self._transport, config)
            except BaseException:
                self._transport.close()
                raise
            config = dataclasses.replace(config, rank=int(self._joined["rank"]), num_nodes=int(self._joined["num_nodes"]),
                                         coordinator=config.join, external_coordinator=True)
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
        self._on_membership: list[Callable[[list[int]], None]] = []
        self._membership_changes = 0  # pskv-server counts, the metrics exporter reads
        self._exporter: Exporter | None = None  # PSKV_METRICS_PORT: started below, closed in _teardown
        self._dispatcher = Dispatcher(self._transport, self.rank, self.view.admit, on_refused=self.health.fail)
        if chain is not None:
            self._dispatcher.at_burst_end(chain.batches.flush)
        self.succession = None
        if chain is not None:
            self.succession = Succession(self.view, self.config, self._transport, self._dispatcher.release_held,
                                         lambda: {"low": self.tracker.low_watermark(), "filling": chain.filling()})
        self.client = CoordinatorClient(lambda frames: self._transport.send(COORDINATOR, frames), self.view,
                                        self.config, self.health.fail, self.clocks.on_global, health=self.health.check,
                                        on_welcome=self._welcomed, on_membership=self._membership_changed,
                                        low_watermark=self.tracker.low_watermark if chain else None,
                                        on_low=chain.prune if chain else None, succession=self.succession)
        self._barrier = LocalBarrier(self.client.barrier, self.catalog.clear_caches)
        self._stop = threading.Event()
        self._replica_sync = ReplicaSync(self.endpoint, self.config.num_nodes, self.catalog, self._stop,
                                         lambda: self.health.failure is not None, lambda: self.members)
        self._checkpointer = Checkpointer(self.rank, self.catalog, self.tracker, self.health.check,
                                          members=lambda: self.members, barrier=self.client.barrier,
                                          flush_replicas=self._replica_sync.flush, clock=lambda: self.clocks.global_clock,
                                          epoch=lambda: self.view.epoch)
        self._ctx = Context(self.rank, self.config.num_nodes, self.endpoint, self.tracker, self.catalog, self.health.check,
                            self.clocks, self._barrier, self._replica_sync, config.collective_timeout,
                            lambda: self.view.chains, lambda: sorted(self.view.alive), self._checkpointer.gate)
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
        self._drain_mark: tuple[int, int] | None = None  # (epoch, request id): report DRAINED once below it
        self._dispatcher.every(self._report_drained)
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
        except BaseException:
            self._teardown()
            raise
        atexit.register(_exit_hook, weakref.ref(self))
        _live_nodes.add(self)
        _install_dump_handler()
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
        self._on_membership.append(fn)

    def _membership_changed(self, payload: dict) -> None:
        """pskv-server, at MEMBERSHIP: new chains, promoted ranges and snapshots, held messages,
        requests sent again to the new heads, then the user's callbacks."""
        epoch, dead = int(payload["epoch"]), int(payload["dead"])
        if self.server.chain is not None:
            self.server.chain.batches.flush()  # what this epoch passed on leaves stamped with it
        self._membership_changes += 1
        previous = self.view.change(epoch, [int(r) for r in payload["alive"]], payload.get("managers"),
                                    [int(r) for r in payload.get("leaving", ())], payload.get("addresses"))
        for rank, address in (payload.get("addresses") or {}).items():
            self._transport.set_address(int(rank), address)
        if previous is not None and self.server.chain is not None:
            self.server.chain.on_membership(previous, self.store.get)
        if "managers" in payload:  # without backups: ranges changed hands; nothing may route to who left
            for state in self.catalog.tables():
                state.ranges = self.view.key_ranges(state.spec.rows)
                if state.loc_cache.size:
                    state.loc_cache[np.isin(state.loc_cache, list(self.view.leaving))] = -1
            self._drain_mark = (epoch, self.tracker.issued())
        self._dispatcher.release_held()
        resent = self.tracker.retry_all()
        what = "left" if payload.get("left") else f"failed ({payload.get('reason')})"
        if "joined" in payload:
            dead, what = int(payload["joined"]), "joined"
        log.warning("node %d: node %d %s; membership epoch %d, members %s; %d request(s) sent again",
                    self.rank, dead, what, epoch, self.members, resent)
        for fn in self._on_membership:
            try:
                fn(self.members)
            except Exception:  # noqa: BLE001 - a user's callback must not stop pskv-server
                log.exception("node %d: on_membership_change callback %r raised", self.rank, fn)

    @property
    def dropped(self) -> int:
        """Messages dropped as garbage or from another cluster (malformed packed frames count once)."""
        return self._dispatcher.dropped + self._transport.dropped + self.endpoint.dropped

    def _welcomed(self) -> None:
        """pskv-server, at WELCOME: learn the others' addresses, then take what they sent us early."""
        for rank, address in self.view.addresses.items():
            self._transport.set_address(rank, address)
        self._dispatcher.release_held()

    # ---- public API -----------------------------------------------------------------------------
    def table(self, name: str, rows: int | None, dim: int = 1, dtype="float32", updater="add", init=0.0, *,
              placement=None, replicate=None, sampling=None, consistency=None, cache=None, aggregate=None,
              key_space: str = "dense", storage: str = "memory", cache_rows: int | None = None, path=None,
              **deprecated) -> Table:
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
        asynchronous only, without the techniques above, backups or elastic membership (ConfigError).

        `storage="disk", cache_rows=N, path=DIR`: this node's rows live in files under DIR, with
        at most about N rows' pages in memory (store.disk; Bösen's out-of-core tables)."""
        self.health.check()
        if storage != "disk" and cache_rows is not None:  # the old flat keyword of BSP/SSP's row cache
            deprecated["cache_rows"], cache_rows = cache_rows, None
        options = TableOptions.of(name, placement, replicate, sampling, cache, aggregate, **deprecated)
        consistency = self.consistency if consistency is None else as_consistency(consistency)
        if key_space == "uint64":
            self._check_sparse(name, rows, options, consistency)
            rows = SPARSE_ROWS
        elif rows is None:
            raise ShapeError(f"table {name!r}: rows=None is for key_space='uint64' tables; give the row count")
        spec = TableSpec(name, int(rows), int(dim), np.dtype(dtype), updaters.get(updater), as_init(init),
                         table_id=self.catalog.next_id(name), key_space=key_space)
        saved, mismatch = self._restorer.match(spec.config()) if self._restorer is not None else (None, None)
        disk = self._disk(spec, storage, cache_rows, path)
        state, config = self._build(spec, options, consistency, fill=saved is None, disk=disk)
        _hooks.reach("node.built", node=self.rank, table=name)
        self.catalog.add(state)
        self._current_ranges(state)
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
            self._take_share(state)
        if saved is not None:  # every node loads its range (and its backup copies), then all go on together
            copies = self.server.chain.copies(spec.table_id) if self.server.chain is not None else []
            loaded = sum(self._restorer.load(saved, shard) for shard in [state.shard, *copies])
            log.info("node %d restored %d rows of table %r from %s", self.rank, loaded, name, self._restorer.path)
            self.client.barrier()
        return self._main_worker.table(name)

    def _current_ranges(self, state: TableState) -> None:
        """Give a table just added to the catalog the key ranges of the view as it is now.
        pskv-server renews the ranges (a node joined or left) only of tables in the catalog: one
        built meanwhile kept the old view's and refused the new node's requests as from no member.
        Until the view's epoch holds still while we read it: a change that lands between reading
        the view and writing the ranges is read again (the view sets its epoch last)."""
        for _ in range(100):  # (bounded: membership epochs do not change 100 times in a few microseconds)
            epoch = self.view.epoch
            state.ranges = self.view.key_ranges(state.spec.rows)
            if self.view.epoch == epoch:
                return

    def _check_sparse(self, name: str, rows, options: TableOptions, consistency) -> None:
        """What a sparse table cannot do yet, said before anything is declared."""
        where = f"table {name!r} (key_space='uint64')"
        if rows is not None:
            raise ShapeError(f"{where}: has no row count; pass rows=None")
        used = [what for what, on in (("placement=Relocate", options.placement.location_caches),
                                      ("replicate", options.replicate is not None),
                                      ("sampling", options.sampling is not None),
                                      ("aggregate", options.aggregate is not None)) if on]
        if used or consistency.synchronous:
            raise ConfigError(f"{where}: sparse tables are asynchronous and keep keys at their range's node; "
                              f"drop {used or ['consistency=BSP/SSP']} (bounded delay: worker.clock() and "
                              "worker.wait_clock(), as the lr app does)")
        if self.config.backups or self._joined is not None:
            raise ConfigError(f"{where}: sparse tables do not run with backups or on a node that joined a "
                              "running cluster yet; use dense tables there")

    def _take_share(self, state: TableState) -> None:
        """A node that joined a running cluster takes its share of a table's rows from every key range
        (membership.join.share), by relocation forced past leases; blocks until they are here."""
        members, joiners = len(self._joined["alive"]), self._joined["joiners"]
        ranges, keys = state.ranges, []
        for r in range(ranges.num_ranges):
            lo, hi = ranges.range_bounds(r)
            taken = sum((hi - lo) // int(m) for _, m in joiners)
            a, b = join.share(lo, hi, taken, members)
            keys.append(np.arange(a, b, dtype=np.int64))
        keys = np.concatenate(keys)
        if len(keys) and state.aggregator is None:
            self._main_worker.table(state.spec.name).localize(keys, _force=True).wait(self.config.collective_timeout)
            log.info("node %d took %d rows of table %r", self.rank, len(keys), state.spec.name)

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
        aggregated = [s.spec.name for s in self.catalog.tables() if s.aggregator is not None]
        sparse = [s.spec.name for s in self.catalog.tables() if s.spec.sparse]
        if sparse:
            raise ConfigError(f"node {self.rank}: leave() cannot hand over sparse table(s) {sparse} yet; "
                              "checkpoint or export them (table.pull_range) and start a new cluster")
        if not self.config.backups and aggregated:
            raise ConfigError(f"node {self.rank}: leave() without backups cannot move the aggregation state of "
                              f"table(s) {aggregated} (pskv.NodeAggregate); start the cluster with backups=1")
        wait = timeout or self.config.collective_timeout
        self.catalog.flush_buffers()
        self._replica_sync.flush(wait)  # its changes of replicated keys reach the others first
        if not self.tracker.drain(self.health.check, wait):
            raise ClusterError(f"node {self.rank}: its requests were not answered within {wait:g} s; it did not leave")
        if self.config.backups:
            self.client.leave(wait)
        else:
            plan = self.client.leave_plan(wait)
            self._hand_over(plan, wait)
            self.client.leave_handed(plan, wait)
        log.info("node %d left the cluster", self.rank)
        self._teardown()

    def _hand_over(self, plan: list[int], timeout: float) -> None:
        """Without backups: give every row and key range away (server.handoff) and wait for the ACKs.
        It runs in pskv-server, which alone writes the manager maps."""
        started: list = []

        def hand_over() -> None:
            try:
                tables = [(s.spec.table_id, handoff.give(s.shard, s.ranges, self.rank, plan))
                          for s in self.catalog.tables()]
                total = sum(m[-1] for _, messages in tables for m in messages)
                rid, fut = self.tracker.new_request(total, desc=f"node {self.rank} hands its rows over (leave)")
                for table, messages in tables:
                    handoff.send(self.endpoint, table, rid, messages)
                started.append(fut)
            except BaseException as exc:  # noqa: BLE001 - raised in the leaving thread
                started.append(exc)

        self._dispatcher.soon(hand_over)
        deadline = time.monotonic() + timeout
        while not started:
            self.health.check()
            if time.monotonic() > deadline:
                raise ClusterError(f"node {self.rank}: its server did not start the handover within {timeout:g} s")
            time.sleep(0.001)
        if isinstance(started[0], BaseException):
            raise started[0]
        started[0].wait(timeout)

    def _report_drained(self, now: float) -> None:
        """pskv-server: after a node left, tell the coordinator once every earlier request is answered."""
        mark = self._drain_mark
        if mark is not None and self.tracker.low_watermark() >= mark[1]:
            self._drain_mark = None
            self.client.drained(mark[0])

    @property
    def restored(self) -> dict:
        """What the checkpoint this cluster started from (`restore=`) saved as `extra`; {} if none."""
        return dict(self._restorer.extra) if self._restorer is not None else {}


    def _disk(self, spec: TableSpec, storage: str, cache_rows, path) -> DiskRows | None:
        """The files of a storage="disk" table on this node (ConfigError for what cannot be on disk)."""
        if storage == "memory":
            return None
        where = f"table {spec.name!r} (storage={storage!r})"
        if storage != "disk":
            raise ConfigError(f"{where}: storage is 'memory' or 'disk'")
        if path is None:
            raise ConfigError(f"{where}: give path=DIR, a directory for this node's rows")
        if spec.sparse or self.config.backups:
            raise ConfigError(f"{where}: disk tables are dense tables without backups for now")
        return DiskRows(path, spec.name, self.rank, cache_rows, spec.dim * np.dtype(spec.dtype).itemsize)

    def _build(self, spec: TableSpec, options: TableOptions, consistency, fill: bool = True,
               disk: DiskRows | None = None) -> tuple[TableState, dict]:
        """The table's parts on this node, and what every node must agree on (`fill=False`: rows
        left unset for a checkpoint to fill)."""
        ranges = self.view.key_ranges(spec.rows)
        if spec.sparse:  # keys stay at their range's node: no technique parts (node.table checked)
            state = TableState(spec, ranges, self.store.add_sparse(spec, self.rank, ranges.manager_range(self.rank)), options, consistency,
                               np.empty(0, np.int64))
            return state, {**spec.config(), "consistency": consistency.spec}
        shard = self.store.add(spec, *ranges.manager_range(self.rank), self.rank, fill, disk=disk)
        for r in ranges.managed_by(self.rank):
            if r != self.rank:  # a range whose first manager left the cluster before this table came
                shard.adopt(*ranges.range_bounds(r), self.rank, fill)
        asynchronous = consistency.staleness == float("inf")
        rounds = options.aggregate is not None and not asynchronous and self.server.chain is not None
        if self.server.chain is not None:
            self.server.chain.add_table(spec, shard, ranges, rounds=rounds)
        loc_cache = np.full(spec.rows if options.placement.location_caches else 0, -1, np.int64)
        state = TableState(spec, ranges, shard, options, consistency, loc_cache)
        config = {**spec.config(), "consistency": consistency.spec}
        if options.aggregate is not None:
            if rounds:  # level 2 at each range's head, rounds replicated (server.rounds)
                level2 = Rounds(spec, self.config.num_nodes, self.server.chain, shard, self.endpoint, lambda: self.view.alive)
                state.aggregator = Aggregator(self._ctx, state, None)
                self.server.aggregators[spec.table_id] = level2.serve
            else:
                owner = Owner(spec, shard, self.config.num_nodes, asynchronous, self.endpoint)
                state.aggregator = Aggregator(self._ctx, state, owner)
                self.server.aggregators[spec.table_id] = state.aggregator.serve
            config["aggregate"] = "node"
        elif consistency.synchronous:
            capacity = options.cache.capacity(spec.rows)
            if capacity:
                state.cache = RowCache(spec.rows, spec.dim, spec.dtype, capacity,
                                       additive=isinstance(spec.updater, updaters.Add))
            flusher = Table(self._ctx, state, None)  # a flush is a plain push of arrays nobody else holds
            state.buffer = PushBuffer(spec.dim, spec.dtype, options.cache.buffer_rows, flusher._send_push)
        if options.replicate is not None:
            keys = hot_keys(spec, options.replicate)
            shard.replicas = Replicas(spec, keys)
            config["replicate"] = [len(keys), int(zlib.crc32(keys.tobytes())), options.replicate.syncs_per_sec,
                                   options.replicate.threshold]
        return state, config

    def run(self, fn: Callable[[Worker], object], threads: int | None = None) -> None:
        """Run fn(worker) in `threads` new threads (default PSKV_THREADS or 1) and wait for all.

        Re-raises the first exception a worker raised (the others then fail fast with it)."""
        self.health.check()
        again = self.clocks.started
        workers = [self._new_worker(thread) for thread in range(threads or self.config.threads)]
        if again and any(s.consistency.synchronous for s in self.catalog.tables()):
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
        self.health.check()
        with self._lock:
            thread = self._next_thread
            self._next_thread += 1
        return self._new_worker(thread)

    def _new_worker(self, thread: int) -> Worker:
        w = Worker(self._ctx, thread)
        self._barrier.join(w)
        self.clocks.register(w)
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
                "rss_bytes": _rss_now()}

    def _monitor_sample(self) -> dict:
        """stats() and what only the metrics exporter reads (pskv.monitor): request latencies, queue
        depths, membership changes. Any thread (a scrape's); never blocks on the cluster."""
        return {**self.stats(), "latency": self.tracker.latency(), "messages_received": self._transport.messages_received,
                "bytes_received": self._transport.bytes_received,
                "pending_requests": len(self.tracker), "deferred_requests": self.server.relocation.waiting(),
                "held_messages": self._dispatcher.held(), "membership_changes": self._membership_changes,
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
        _live_nodes.discard(self)
        self._transport.close()
        if self._coordinator is not None:
            self._coordinator.close()
        if self.succession is not None:
            self.succession.close()

    # ---- liveness ------------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        """pskv-server: fail requests without progress for request_timeout; log why, once per batch."""
        if now < self._next_expiry:
            return
        timeout = self.config.request_timeout
        self._next_expiry = now + min(1.0, timeout / 4)
        stalled = self.tracker.expire(now, timeout, self._stalled)
        if stalled:
            log.error("node %d: %d request(s) made no progress for %g s (PSKV_REQUEST_TIMEOUT); the first: %s\n%s",
                      self.rank, len(stalled), timeout, stalled[0], self.debug_state())

    def _stalled(self, desc: str, age: float, idle: float, remaining: int, total: int, ranks: list[int],
                 seen: str) -> RequestStalled:
        where = f"sent to node(s) {ranks}" if ranks else "not sent to any node"
        return RequestStalled(
            f"{desc}: no progress for {idle:.1f} s (request_timeout {self.config.request_timeout:g} s, age "
            f"{age:.1f} s), {remaining} of {total} key(s) unanswered, {where}; last seen: {seen}. The node(s) may "
            "be hung, overloaded or unreachable: their logs (or SIGUSR1 to them) show what they wait for; raise "
            "PSKV_REQUEST_TIMEOUT if they are only slow", ranks[0] if ranks else -1,
            self.view.address(ranks[0]) if ranks else "", desc, ranks)

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
    if node is not None and not node.health.closed:
        node._abort("process exited without node.shutdown()", ClosedError("process exiting"))
        node._teardown()


def _rss_now() -> int:
    """This process's resident memory now (VmRSS), or 0 where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def init(**overrides) -> Node:
    """Join the cluster described by PSKV_* (set by `pskv launch`), or start a private 1-node one.

    Blocks until every node joined (PSKV_RENDEZVOUS_TIMEOUT). Keyword overrides take precedence
    over the environment (e.g. `threads=4`, `failure_timeout=5`, `consistency=pskv.SSP(2)`).
    Use it as a context manager or call `node.shutdown()` at the end."""
    return Node(NodeConfig.from_env(**overrides))
