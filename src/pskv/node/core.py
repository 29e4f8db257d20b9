"""Node: one process of the cluster, and the composition root: its public API; `Parts` (node/parts.py),
its base, builds the layers, wires them, starts and ends them.

    python -c "import pskv; node = pskv.init(); print(node)"        # a private 1-node cluster
    pskv launch -n 2 --threads 2 -- python examples/quickstart.py    # a 2-node cluster

Nothing below this module imports it; each part gets what it needs through its constructor, the
membership view read-only (its bound accessors), never the Node; no Node method is on the data
path (docs/design.md shows the layers and a request's life). The pieces, bottom up:

    net         Transport (sockets), Endpoint (every header and send; replies in), Dispatcher
                (pskv-server's receive loop, one handler per Kind), RequestTracker
    membership  View (ranks, addresses, epoch; admits messages), CoordinatorClient, Health (the
                first failure), LocalBarrier (this node's workers)
    store       Store of Shards; catalog: the tables, each with its technique parts
    server      Server (requests, forwards, relocation, replica syncs, aggregation owners)
    client      Worker and Table (the user API), Aggregator, ReplicaSync (pskv-replica thread)
    node        NodeEvents (the coordinator's news to the parts), SharedMemory, Workers (node.run),
                TableBuilder and Declarations (node.table), MembershipChanges (elastic), Report
                (stats, the metrics sample, debug_state, request expiry: diagnostics)

Threads and ownership: the thread that calls `init()` owns the Node's lifecycle (`table()`,
`run()`, `shutdown()`). pskv-server runs `Dispatcher.run`: it dispatches what arrives, sends
heartbeats and fails requests that made no progress for `request_timeout`. Worker threads call
`Table`/`Worker` methods. `health` holds the first failure (any thread records it); every API
call checks it, so no call blocks on a broken cluster.

`SIGUSR1` makes every node of this process log its outstanding requests, deferred requests,
collectives and queues (`debug_state()`), so a hang explains itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np

from .. import updaters
from ..checkpoint import format as checkpoint_format
from ..checkpoint.restore import Restorer
from ..client import compat
from ..client.filters import table_codec
from ..client.table import Table
from ..client.worker import Worker
from ..config import NodeConfig
from ..errors import ClosedError, ClusterError, ShapeError
from ..membership import join
from ..membership.coordinator import start_coordinator
from ..membership.health import Health
from ..membership.view import View
from ..net import auth
from ..net.transport import Transport
from ..net.wire import COORDINATOR
from ..options import TableOptions, as_consistency
from ..store.spec import SPARSE_ROWS, TableSpec, as_init
from . import elastic
from .parts import Parts

log = logging.getLogger(__name__)


class Node(Parts):
    """One node process of a pskv cluster. Make it with `pskv.init()`."""

    def __init__(self, config: NodeConfig) -> None:
        self._transport = Transport(
            config.host,
            send_timeout=config.failure_timeout,
            drop_rate=config.test_drop_rate,
            keys=auth.keys_for(config),
            ipc=config.shared_memory,
        )
        self._joined: dict | None = None  # JOINED: this node joined a running cluster (membership.join)
        if config.join:
            try:
                cluster, self._joined = join.ask(self._transport, config)
            except BaseException:
                self._transport.close()
                raise
            # the cluster's rank, size and backups, not ours
            config = dataclasses.replace(
                config,
                rank=int(self._joined["rank"]),
                num_nodes=int(self._joined["num_nodes"]),
                coordinator=config.join,
                external_coordinator=True,
                backups=int(self._joined.get("backups", 0)),
            )
        self.rank = config.rank
        # a checkpoint to start from: checked whole on every node before anything starts (CheckpointError)
        self._restorer = Restorer(config.restore, self.rank) if config.restore else None
        self.health = Health(self.rank)
        self.view = View(self.rank, config.num_nodes, config.backups)
        if self._joined is not None:
            self.view.joined(cluster, self._joined)
        self._coordinator, self.config = start_coordinator(config)  # here if a private cluster or node 0
        assert self.config.coordinator is not None  # (start_coordinator set it: a private cluster's own)
        self._transport.set_address(COORDINATOR, self.config.coordinator)
        self._build()
        self._start()
        log.info("node %d/%d up at %s", self.rank, self.config.num_nodes, self._transport.address)

    @property
    def cluster(self) -> int:
        return self.view.cluster

    @property
    def members(self) -> list[int]:
        """The ranks of the live nodes: all of them until a node dies (backups), leaves or joins."""
        return self.view.members()

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
        return self._report.dropped()

    # ---- public API -----------------------------------------------------------------------------
    def table(
        self,
        name: str,
        rows: int | None,
        dim: int = 1,
        dtype="float32",
        updater="add",
        init=0.0,
        *,
        placement=None,
        replicate=None,
        sampling=None,
        consistency=None,
        cache=None,
        aggregate=None,
        key_space: str = "dense",
        storage: str = "memory",
        cache_rows: int | None = None,
        path=None,
        filters=None,
        **deprecated,
    ) -> Table:
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
        compat.check_declaration(
            name,
            compat.declared(
                key_space=key_space,
                storage=storage,
                placement=placement,
                replicate=replicate,
                sampling=sampling,
                aggregate=aggregate,
                consistency=consistency,
                filters=filters,
                old=deprecated,
                backups=self.config.backups,
                joined=self._joined is not None,
            ),
        )
        options = TableOptions.of(name, placement, replicate, sampling, cache, aggregate, **deprecated)
        codec = None if filters is None else table_codec(filters, name, dtype)
        if key_space == "uint64":
            if rows is not None:
                raise ShapeError(f"table {name!r} (key_space='uint64'): has no row count; pass rows=None")
            rows = SPARSE_ROWS
        elif rows is None:
            raise ShapeError(f"table {name!r}: rows=None is for key_space='uint64' tables; give the row count")
        spec = TableSpec(
            name,
            int(rows),
            int(dim),
            np.dtype(dtype),
            updaters.get(updater),
            as_init(init),
            table_id=self.catalog.next_id(name),
            key_space=key_space,
        )
        return self._declarations.declare(spec, options, consistency, codec, disk=(storage, cache_rows, path))

    def checkpoint(
        self, directory, keep: int | None = None, *, extra: dict | None = None, timeout: float | None = None
    ) -> checkpoint_format.CheckpointInfo:
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
            elastic.hand_over(
                plan,
                wait,
                rank=self.rank,
                catalog=self.catalog,
                tracker=self.tracker,
                endpoint=self.endpoint,
                soon=self._dispatcher.soon,
                check=self.health.check,
            )
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
        self._workers.run(fn, threads or self.config.threads, self._abort, self.client.barrier)

    def worker(self) -> Worker:
        """A new Worker for a thread you made; it takes part in barriers until `worker.close()`."""
        self.health.check()
        return self._workers.new()

    def stats(self) -> dict:
        """Counters of this node: per table calls, local and remote keys; messages and bytes sent to other
        nodes (coordinator traffic such as heartbeats is not counted)."""
        return self._report.stats()

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
                self._abort(
                    f"node {self.rank} left before every node said bye (timeout {timeout} s)",
                    ClosedError(f"node {self.rank} was shut down"),
                )
        self._teardown()
        failure = self.health.failure
        if not failed_before and failure is not None and not isinstance(failure.__cause__, ClosedError):
            raise self.health.failed()

    close = shutdown

    def __enter__(self) -> Node:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        if not clean and self.health.failure is None:
            self._abort(f"node {self.rank} left with {exc!r}", exc)
        self.shutdown()

    def __repr__(self) -> str:
        return f"<Node {self.rank}/{self.config.num_nodes} {self.health.state} tables={len(self.catalog)}>"

    def debug_state(self) -> str:
        """What this node waits for, as text: outstanding and deferred requests, collectives, clocks,
        worker barrier, queues. Any thread; never blocks on the cluster. Also logged on SIGUSR1."""
        return self._report.debug_state()


def init(**overrides) -> Node:
    """Join the cluster described by PSKV_* (set by `pskv launch`), or start a private 1-node one.

    Blocks until every node joined (PSKV_RENDEZVOUS_TIMEOUT). Keyword overrides take precedence
    over the environment (e.g. `threads=4`, `failure_timeout=5`, `consistency=pskv.SSP(2)`).
    Use it as a context manager or call `node.shutdown()` at the end."""
    return Node(NodeConfig.from_env(**overrides))
