"""The parts of a Node: built bottom up, wired, started, and torn down (the composition root's work).

`Parts` is `Node`'s base (node/core.py holds the public API): `_build` makes every part and hands
each what it needs (the membership view read-only, through its bound accessors), never the Node;
`_start` registers pskv-server's handlers, starts it and joins the cluster; `_abort` and
`_teardown` end a node. The pieces, bottom up, are listed in node/core.py's docstring.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import weakref

from ..catalog import Catalog
from ..checkpoint.collective import Checkpointer
from ..checkpoint.restore import Restorer
from ..client import intents
from ..client.context import Context
from ..client.replica_sync import ReplicaSync
from ..client.worker import Worker
from ..config import NodeConfig
from ..consistency.clocks import Clocks
from ..errors import ClosedError, NodeFailure, PskvError
from ..membership import client as coordinator_client
from ..membership.barrier import LocalBarrier
from ..membership.client import CoordinatorClient
from ..membership.coordinator import Coordinator
from ..membership.health import Health
from ..membership.takeover import Succession
from ..membership.view import View
from ..monitor.prometheus import Exporter
from ..net import endpoint as endpoint_
from ..net.dispatch import Dispatcher
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.transport import Transport
from ..net.wire import COORDINATOR
from ..options import as_consistency
from ..server import serve
from ..server.backups import Backups
from ..server.hops import Hops
from ..server.serve import Server
from ..store.peer import Neighbors
from ..store.shard import Store
from . import diagnostics, elastic, workers
from .events import NodeEvents
from .sharing import SharedMemory
from .tables import Declarations, TableBuilder

log = logging.getLogger(__name__)


class Parts:
    """The base of `Node`: its parts and their lifecycle. `Node.__init__` sets the fields below, then
    calls `_build()` and `_start()`."""

    rank: int
    config: NodeConfig
    view: View
    health: Health
    _transport: Transport
    _joined: dict | None
    _restorer: Restorer | None
    _coordinator: Coordinator | None

    def _build(self) -> None:
        """Every part of the node, bottom up; each gets what it uses (the view read-only), none the Node."""
        self._build_net()
        self._build_server()
        self._build_client()
        self._workers = workers.Workers(self._ctx, self._barrier, self.clocks)
        config, view, health, transport = self.config, self.view, self.health, self._transport
        self._report = diagnostics.Report(
            config=config,
            view=view,
            health=health,
            transport=transport,
            dispatcher=self._dispatcher,
            endpoint=self.endpoint,
            tracker=self.tracker,
            server=self.server,
            client=self.client,
            barrier=self._barrier,
            clocks=self.clocks,
            catalog=self.catalog,
            changes=self._membership,
        )

    def _build_net(self) -> None:
        """The request tracker, the Endpoint, the store and catalog, the coordinator client and clocks."""
        config, view, health, transport = self.config, self.view, self.health, self._transport
        self.tracker = tracker = RequestTracker(health=health.check)
        self.endpoint = Endpoint(
            self.rank, transport, tracker, view.current_cluster, epoch=view.current_epoch, admit=view.answers
        )
        self.store, self.neighbors = Store(), Neighbors()  # (neighbors: co-located nodes' shards, store.peer)
        self._sharing = SharedMemory(
            config, view, self.store, self.neighbors, joined=self._joined is not None, check=health.check
        )
        self.catalog = catalog = Catalog(self.rank)
        self.consistency = as_consistency(config.consistency)  # the default of this node's tables
        self.client = client = CoordinatorClient(functools.partial(transport.send, COORDINATOR), view, config)
        self.clocks = Clocks(client.report_clock, catalog.flush_buffers, health.check)

    def _build_server(self) -> None:
        """pskv-server's parts: forwards, backups, the Server, the Dispatcher, membership changes and the
        coordinator's news (`NodeEvents`)."""
        config, view, health, transport = self.config, self.view, self.health, self._transport
        endpoint, tracker, catalog, client = self.endpoint, self.tracker, self.catalog, self.client
        hops = Hops(endpoint, self.store)  # forwards, counted: the server's and the chain's
        backups = (
            Backups(endpoint, view.current_chains, view.current_epoch, hops.forward, client.synced)
            if config.backups
            else None
        )
        self.server = Server(
            self.store,
            endpoint,
            tracker,
            lambda table_id: catalog.require(table_id).ranges,
            on_declined=lambda table, keys, owner, seconds: catalog.require(table).note_declined(keys, owner, seconds),
            hops=hops,
            backups=backups,
        )
        self.server.intents.on_grant = lambda table, keys: intents.granted(catalog.require(table), keys)  # (§3j)
        self._dispatcher = Dispatcher(transport, self.rank, view.admit, on_refused=health.fail)
        self.succession = None
        if backups is not None:
            self._dispatcher.at_burst_end(backups.copies.batches.flush)
            client.succession = self.succession = Succession(view, config, transport, self._dispatcher.release_held)
        self._membership = elastic.MembershipChanges(
            self.rank,
            view,
            transport,
            self.server,
            self.store,
            catalog,
            tracker,
            self._dispatcher.release_held,
            client.drained,
        )
        client.events = NodeEvents(
            health=health,
            view=view,
            transport=transport,
            dispatcher=self._dispatcher,
            sharing=self._sharing,
            clocks=self.clocks,
            changes=self._membership,
            tracker=tracker,
            backups=backups,
        )

    def _build_client(self) -> None:
        """The workers' side: the local barrier, replica syncs, checkpoints, the client Context, tables."""
        config, view, health = self.config, self.view, self.health
        endpoint, tracker, catalog, client = self.endpoint, self.tracker, self.catalog, self.client
        settle = functools.partial(
            workers.settle,
            rank=self.rank,
            catalog=catalog,
            tracker=tracker,
            check=health.check,
            default=config.collective_timeout,
        )
        self._barrier = LocalBarrier(
            client.barrier,
            catalog.clear_caches,
            settle,
            rank=self.rank,
            log_every=config.wait_log_interval,
            patience=config.collective_timeout,
        )
        self.clocks.waiting = diagnostics.clock_waits(self.rank, config.wait_log_interval, self.clocks, client)
        self._stop = threading.Event()
        self._replica_sync = ReplicaSync(
            endpoint, config.num_nodes, catalog, self._stop, health.has_failed, view.members
        )
        clocks = self.clocks
        self._checkpointer = Checkpointer(
            self.rank,
            catalog,
            tracker,
            health.check,
            members=view.members,
            barrier=client.barrier,
            flush_replicas=self._replica_sync.flush,
            clock=lambda: clocks.global_clock,
            epoch=view.current_epoch,
        )
        self._ctx = Context(
            self.rank,
            config.num_nodes,
            endpoint,
            tracker,
            catalog,
            health.check,
            self.clocks,
            self._barrier,
            self._replica_sync,
            config.collective_timeout,
            view.current_chains,
            view.members,
            self._checkpointer.gate,
            self.neighbors,
        )
        self._tables = TableBuilder(
            self.rank, config, view, self.store, self.server, endpoint, self._ctx, joined=self._joined is not None
        )
        self._main_worker = Worker(self._ctx, -1)  # the main thread's handle; takes no part in barriers
        self._declarations = Declarations(
            self._tables, client, self._sharing, self._main_worker, restorer=self._restorer, joined=self._joined
        )

    def _start(self) -> None:
        """Wire failures and pskv-server's handlers, start it, then join the cluster (or, for a node
        that joined a running one, take part at once)."""
        health, dispatcher = self.health, self._dispatcher
        health.on_failure(self.tracker.fail_all)
        health.on_failure(self._barrier.break_)
        dispatcher.register(coordinator_client.HANDLES, self.client.on_message)
        dispatcher.register(endpoint_.HANDLES, self.endpoint.on_reply)
        dispatcher.register(serve.HANDLES, self.server.handle)
        dispatcher.every(self.client.check)
        dispatcher.every(self._report.expire)
        dispatcher.every(self._membership.drained)
        self._exporter: Exporter | None = None  # PSKV_METRICS_PORT: started below, closed in _teardown
        self._thread = threading.Thread(
            target=dispatcher.run, args=(self._stop,), name=f"pskv-server-{self.rank}", daemon=True
        )
        if self._joined is not None:  # the cluster runs: start as if welcomed, where the others are
            self.clocks.start_at(int(self._joined["clock"]))
            self.client.joined(self._joined)
            self.client.events.welcomed()
        self._thread.start()
        try:
            if self.config.metrics_port:  # before joining: a port in use fails this node alone
                self._exporter = Exporter(
                    self.config.host, self.config.metrics_port + self.rank, self.rank, self._report.sample
                )
            if self._joined is None:
                self.client.join(self._transport.address, self.config.num_nodes)
            else:  # with backups and no table yet: into the chains at once (membership.joining)
                self.client.await_entry(self.config.collective_timeout)
        except BaseException:
            self._teardown()
            raise
        atexit.register(
            diagnostics.exit_hook, self.health, weakref.WeakMethod(self._abort), weakref.WeakMethod(self._teardown)
        )
        diagnostics.live.add(self)
        diagnostics.install_dump_handler()
        diagnostics.install_excepthook(self.config.full_tracebacks)

    def _abort(self, reason: str, exc: BaseException) -> None:
        """This node cannot go on: fail local calls first (so they all raise the same error,
        whatever comes back from the coordinator), then tell the others."""
        error = NodeFailure(
            f"node {self.rank} stopped: {reason}; every node of the cluster stops with it",
            self.rank,
            self._transport.address,
        )
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
        self._sharing.close()  # (after: a stripe a stopped process holds does not hold the close up)
