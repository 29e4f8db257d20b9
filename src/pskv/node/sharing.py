"""SharedMemory: this node's shards in shared memory with the nodes of its host (store.shm).

Set up once the cluster id is known: at WELCOME (pskv-server, node.events), or at the node's
first table if that comes sooner (the thread that owns the Node), whichever is first; never
for a private 1-node cluster (no other process could use it) or with PSKV_SHARED_MEMORY=0.

A waiter for a stripe held by a live process (one that is stopped holds it for good) stops waiting
once the node failed: `start` registers the node's health check with store.spin.

Threads and ownership: `_lock` makes `start` run once whichever thread calls it first.
"""

from __future__ import annotations

import threading

from ..config import NodeConfig
from ..membership.view import View
from ..store import shm, spin
from ..store.peer import Neighbors
from ..store.shard import Store


class SharedMemory:
    """Starts sharing this node's shards, and opening its neighbours', once."""

    def __init__(
        self, config: NodeConfig, view: View, store: Store, neighbors: Neighbors, *, joined: bool, check=None
    ) -> None:
        self.config, self.view, self.store, self.neighbors = config, view, store, neighbors
        self._check = check  # the node's health check: stops a wait for a stripe once the node failed (store.spin)
        private = config.num_nodes == 1 and not config.external_coordinator and not joined
        self.wanted = bool(config.shared_memory) and not private
        self._lock = threading.Lock()  # guards _started
        self._started = False

    def start(self) -> None:
        """Share this node's shards with this host's nodes and open theirs (once; later calls return)."""
        if not self.wanted:
            return
        with self._lock:
            if self._started:
                return
            self._started = True
            shm.sweep()  # (files of processes that died here)
            directory = shm.host_dir(self.view.cluster, self.config.host)
            if directory is not None:
                self.store.share(shm.Segments(directory, self.view.rank))
                self.neighbors.open(directory, self.view.rank)
                if self._check is not None:
                    spin.watch(self._check)

    def close(self) -> None:
        """The node closes: its waits are its own no more (the store's files go with store.close)."""
        if self._check is not None:
            spin.unwatch(self._check)
