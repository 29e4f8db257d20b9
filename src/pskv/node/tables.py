"""A table's parts on this node: the shard, the technique parts its options ask for, its request
path (client.path, composed from them), and what every node must agree on (`TableBuilder`, which
holds no state of its own); and the rest of `Node.table()` once its arguments are checked
(`Declarations`: build, add to the catalog, declare on every node, then a joiner's share of the
rows or a checkpoint's). Which options compose is client.compat's to say, before.

    builder = TableBuilder(rank, config, view, store, server, endpoint, ctx, joined=False)
    state, agreed = builder.build(spec, options, consistency, fill=True, disk=builder.disk(...))
    catalog.add(state); builder.current_ranges(state)          # then the collective declare

Owner: the thread that owns the Node's lifecycle (it declares tables); pskv-server renews the key
ranges of tables already in the catalog when membership changes (`current_ranges` closes the gap
for a table built meanwhile).
"""

from __future__ import annotations

import functools
import logging
import zlib

import numpy as np

from .. import _hooks, updaters
from ..catalog import TableState
from ..checkpoint.restore import Restorer
from ..client.aggregate import Aggregator
from ..client.context import Context
from ..client.path import compose
from ..client.table import Table
from ..client.worker import Worker
from ..config import NodeConfig
from ..consistency.buffer import PushBuffer
from ..consistency.cache import RowCache
from ..errors import ConfigError, PskvError
from ..membership.client import CoordinatorClient
from ..membership.view import View
from ..net.endpoint import Endpoint
from ..options import TableOptions
from ..placement.hot import hot_keys
from ..server.aggregate import Owner
from ..server.rounds import Rounds
from ..server.serve import Server
from ..store.disk import DiskRows
from ..store.replicas import Replicas
from ..store.shard import Store
from ..store.spec import TableSpec
from . import elastic
from .sharing import SharedMemory

log = logging.getLogger(__name__)


class TableBuilder:
    """Builds the parts of one node's tables from the node's layers (given, not owned)."""

    def __init__(
        self,
        rank: int,
        config: NodeConfig,
        view: View,
        store: Store,
        server: Server,
        endpoint: Endpoint,
        ctx: Context,
        *,
        joined: bool,
    ) -> None:
        self.rank, self.config, self.view, self.store = rank, config, view, store
        self.server, self.endpoint, self.ctx, self.joined = server, endpoint, ctx, joined

    def disk(self, spec: TableSpec, storage: str, cache_rows, path) -> DiskRows | None:
        """The files of a storage="disk" table on this node (ConfigError for a storage or path that
        is not one; the kinds and clusters a disk table refuses, client.compat said before)."""
        if storage == "memory":
            return None
        where = f"table {spec.name!r} (storage={storage!r})"
        if storage != "disk":
            raise ConfigError(f"{where}: storage is 'memory' or 'disk'")
        if path is None:
            raise ConfigError(f"{where}: give path=DIR, a directory for this node's rows")
        return DiskRows(path, spec.name, self.rank, cache_rows, spec.dim * np.dtype(spec.dtype).itemsize)

    def build(
        self, spec: TableSpec, options: TableOptions, consistency, fill: bool = True, disk: DiskRows | None = None
    ) -> tuple[TableState, dict]:
        """The table's parts on this node, and what every node must agree on (`fill=False`: rows
        left unset for a checkpoint to fill)."""
        ranges = self.view.key_ranges(spec.rows)
        config = {**spec.config(), "consistency": consistency.spec}
        if spec.sparse:  # keys stay at their range's node: no technique parts (client.compat refused them)
            shard = self.store.add_sparse(spec, self.rank, ranges.manager_range(self.rank))
            if self.server.backups is not None:  # with backups: its ranges' copies here (server.sparse_copies)
                self.server.backups.failover.add_table(spec, shard, ranges)
            state = TableState(spec, ranges, shard, options, consistency, np.empty(0, np.int64))
            if consistency.synchronous:  # a push buffer, no row cache: a RowCache is sized by rows (2**64 here)
                state.buffer = self._push_buffer(state)
            compose(state, self.ctx, backups=bool(self.config.backups))
            return state, config
        shard = self.store.add(spec, *ranges.manager_range(self.rank), self.rank, fill, disk=disk)
        for r in ranges.managed_by(self.rank):
            if r != self.rank:  # a range whose first manager left the cluster before this table came
                shard.adopt(*ranges.range_bounds(r), self.rank, fill)
        asynchronous = consistency.staleness == float("inf")
        backups = self.server.backups
        rounds = options.aggregate is not None and not asynchronous and backups is not None
        if backups is not None:
            backups.failover.add_table(spec, shard, ranges, rounds=rounds)
        loc_cache = np.full(spec.rows if options.placement.location_caches else 0, -1, np.int64)
        state = TableState(spec, ranges, shard, options, consistency, loc_cache)
        if options.aggregate is not None:
            if rounds:  # level 2 at each range's head, rounds replicated (server.rounds)
                assert backups is not None  # (rounds: only with backups)
                level2 = Rounds(
                    spec,
                    self.config.num_nodes,
                    backups,
                    shard,
                    self.endpoint,
                    self.ctx.tracker,
                    lambda: self.view.alive,
                )
                state.aggregator = Aggregator(self.ctx, state, None)
                self.server.aggregators[spec.table_id] = level2.serve
            else:
                owner = Owner(spec, shard, self.config.num_nodes, asynchronous, self.endpoint)
                state.aggregator = Aggregator(self.ctx, state, owner)
                self.server.aggregators[spec.table_id] = state.aggregator.serve
            config["aggregate"] = "node"
        elif consistency.synchronous:
            capacity = options.cache.capacity(spec.rows)
            if capacity:
                state.cache = RowCache(
                    spec.rows, spec.dim, spec.dtype, capacity, additive=isinstance(spec.updater, updaters.Add)
                )
            state.buffer = self._push_buffer(state)
        if options.replicate is not None:
            keys = hot_keys(spec, options.replicate)
            # the nodes that started the cluster sync with each other from the start; a node that
            # joined later gets every change once it asked for them (ReplicaSync.catch_up)
            peers = () if self.joined else [r for r in range(self.config.num_nodes) if r != self.rank]
            shard.replicas = Replicas(spec, keys, peers)
            config["replicate"] = [
                len(keys),
                int(zlib.crc32(keys.tobytes())),
                options.replicate.syncs_per_sec,
                options.replicate.threshold,
            ]
        compose(state, self.ctx, backups=bool(self.config.backups))  # its stages, once (client.path)
        if state.copies is not None:  # its intent copies' sync rounds: the table's interval, else the node's
            state.copies.every(self.config.intent_sync)
        return state, config

    @staticmethod
    def _push_buffer(state: TableState) -> PushBuffer:
        """A BSP/SSP table's push buffer: a flush is a plain push of arrays nobody else holds, down
        the table's request stages (`Path.send_buffered`)."""
        spec = state.spec

        def send(keys, values):  # (state.path is composed after the buffer: looked up at each flush)
            return state.path.send_buffered(keys, values)

        return PushBuffer(spec.dim, spec.dtype, state.options.cache.buffer_rows, send)

    def current_ranges(self, state: TableState) -> None:
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


class Declarations:
    """node.table() once its arguments are checked: the table's parts, the collective declaration, then
    a joiner's share of the rows or a checkpoint's (the thread that owns the Node)."""

    def __init__(
        self,
        builder: TableBuilder,
        client: CoordinatorClient,
        sharing: SharedMemory,
        main: Worker,
        *,
        restorer: Restorer | None,
        joined: dict | None,
    ) -> None:
        self.builder, self.client, self.sharing, self.main = builder, client, sharing, main
        self.restorer, self.joined = restorer, joined  # (joined: the JOINED payload of a node that joined)

    def declare(self, spec: TableSpec, options: TableOptions, consistency, codec, *, disk: tuple) -> Table:
        """Build table `spec` here, declare it on every node (blocks), fill it; the main thread's handle."""
        builder, ctx, name = self.builder, self.builder.ctx, spec.name
        catalog, replica_sync, timeout = ctx.catalog, ctx.replica_sync, ctx.collective_timeout
        saved, mismatch = self.restorer.match(spec.config()) if self.restorer is not None else (None, None)
        rows = builder.disk(spec, *disk)
        self.sharing.start()  # (WELCOME's pskv-server may not have got to it yet)
        state, config = builder.build(spec, options, consistency, fill=saved is None, disk=rows)
        state.codec = codec
        _hooks.reach("node.built", node=builder.rank, table=name)
        catalog.add(state)
        builder.current_ranges(state)
        if state.shard.replicas is not None:
            replica_sync.start()
        try:
            self.client.declare(config)
            if mismatch is not None:  # after the collective: every node gets here, and raises it
                raise mismatch
        except PskvError:
            catalog.discard(name)
            raise
        if self.joined is not None:
            localize = functools.partial(self.main.table(name).localize, _force=True)
            elastic.take_share(state, self.joined, localize, builder.rank, timeout)
            replica_sync.catch_up(state, timeout)  # its replicas: the cluster's values
        if saved is not None:  # every node loads its range (and its backup copies), then all go on together
            backups = builder.server.backups
            copies = backups.copies.copies(spec.table_id) if backups is not None else []
            restorer = self.restorer
            assert restorer is not None  # (it found `saved`)
            loaded = sum(restorer.load(saved, shard) for shard in [state.shard, *copies])
            log.info("node %d restored %d rows of table %r from %s", builder.rank, loaded, name, restorer.path)
            self.client.barrier()
        return self.main.table(name)
