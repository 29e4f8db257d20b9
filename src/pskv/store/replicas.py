"""Replicas: this node's copies of a table's hot keys (NuPS hot-key replication), and the account
of who changed them that lets a node which joins later start from the cluster's current values."""

from __future__ import annotations

import threading

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from .spec import TableSpec


class Replicas:
    """Replicas of a table's hot keys, one copy on every node (NuPS): local reads and writes, with
    the accumulated change of each key sent to the other nodes by the replica sync.

    Threads and ownership: any thread reads or updates replicas under `_lock` (one lock: the
    replicated keys are few and hot, and each operation is one short kernel); `take_deltas`
    (the sync) and `add_deltas` (the pskv-server thread, for other nodes' deltas) take it too.
    A stateful updater keeps its state per node: each replica runs the rule on the updates it
    sees first-hand, and the other nodes receive the resulting change of the value.

    A node that joins later starts from init plus every change the others made before it asked
    (client.replica_sync.ReplicaSync.catch_up). So each node keeps `sent`, the sum of the changes
    it took for syncing (whoever they went to), and `received`, the changes it applied per origin;
    a node sends its changes only to its `peers`: the nodes it started with, and each node that
    joined later once that node asked for `sent` (`subscribe`, under the lock that `take_deltas`
    holds: every change reaches a joiner once, in the answer or in a sync round). When a node is
    gone, the changes it made pass to the lowest live node, which answers for them from then on
    (`retire`); a checkpoint's values count as node 0's (`restore`)."""

    def __init__(self, spec: TableSpec, keys: np.ndarray, peers=()) -> None:
        self.spec = spec
        self.keys = np.unique(np.asarray(keys, np.int64))  # (m,) sorted replicated keys
        self.index = np.full(spec.rows, -1, np.int64)  # (rows,) key -> replica row, -1: not replicated
        self.index[self.keys] = np.arange(len(self.keys))
        m = len(self.keys)
        self.data = np.empty((max(m, 1), spec.dim), spec.dtype)  # (m, dim) this node's copy
        for i, k in enumerate(self.keys.tolist()):
            spec.init.fill(self.data[i : i + 1], k, spec.name)
        width = spec.updater.state_width(spec.dim)
        self.state = None
        if width:
            self.state = np.empty((len(self.data), width), spec.dtype)
            spec.updater.init_state(self.state)
        self.delta = np.zeros_like(self.data)  # (m, dim) local change not yet sent to the others
        self.sent = np.zeros_like(self.data)  # (m, dim) every change of this node taken for syncing so far
        self.received: dict[int, np.ndarray] = {}  # origin -> (m, dim) its changes applied here
        self.peers = set(peers)  # the nodes that get this node's changes (while they are members)
        self._lock = threading.Lock()  # guards data, state, delta, sent, received, peers
        self.syncs = 0  # sync rounds sent
        self.keys_sent = 0

    def mask(self, keys: np.ndarray) -> np.ndarray:
        return self.index[keys] >= 0

    def pull(self, keys: np.ndarray, out: np.ndarray, pos: np.ndarray | None = None) -> None:
        idx = self.index[keys]
        with self._lock:
            kernels.gather_slots(self.data, idx, out, kernels.NONE if pos is None else pos, pos is not None)

    def push(self, keys: np.ndarray, updates: np.ndarray) -> None:
        idx = self.index[keys]
        uniq = np.unique(idx)
        with self._lock:
            before = self.data[uniq]  # (u, dim) copies
            self.spec.updater.apply(self.data, self.state, idx, updates)
            self.delta[uniq] += self.data[uniq] - before

    def set(self, keys: np.ndarray, values: np.ndarray) -> None:
        idx = self.index[keys]
        uniq = np.unique(idx)
        with self._lock:
            before = self.data[uniq]
            kernels.assign_slots(self.data, idx, values)
            self.delta[uniq] += self.data[uniq] - before

    def take_deltas(self, threshold: float) -> tuple[np.ndarray, np.ndarray, frozenset[int]]:
        """(keys, deltas, peers): the keys whose change exceeds `threshold` (L2 norm; 0: any change),
        reset to 0 and counted as sent, and the nodes to send them to (with no peers too: a node
        that joins later gets them in `subscribe`'s answer)."""
        with self._lock:
            norms = np.sqrt((self.delta.astype(np.float64) ** 2).sum(axis=1))[: len(self.keys)]
            rows = np.flatnonzero(norms > threshold) if threshold > 0 else np.flatnonzero(norms)
            deltas = self.delta[rows]  # (r, dim) copies
            self.delta[rows] = 0
            self.sent[rows] += deltas
            peers = frozenset(self.peers)
        return self.keys[rows], deltas, peers

    def add_deltas(self, keys: np.ndarray, deltas: np.ndarray, origin: int = -1) -> None:
        """Apply node `origin`'s changes (they are not ours to send on)."""
        idx = self._index(keys)
        with self._lock:
            np.add.at(self.data, idx, deltas)  # a handful of hot rows: no kernel needed
            np.add.at(self._received(origin), idx, deltas)

    def subscribe(self, origin: int, keys: np.ndarray) -> np.ndarray:
        """Node `origin` joined later and asks (pskv-server): (len(keys), dim) every change of `keys`
        this node took for syncing so far; its later ones go to `origin` too."""
        idx = self._index(keys)
        with self._lock:
            self.peers.add(origin)
            return self.sent[idx]  # (n, dim) a copy

    def caught_up(self, origin: int, keys: np.ndarray, changes: np.ndarray) -> None:
        """A joiner: node `origin`'s answer to `subscribe`: add its changes here; send it ours from now on."""
        idx = self._index(keys)
        with self._lock:
            np.add.at(self.data, idx, changes)
            np.add.at(self._received(origin), idx, changes)
            self.peers.add(origin)

    def retire(self, alive, rank: int) -> None:
        """Membership changed (pskv-server): the changes of nodes no longer alive, all applied here
        (a node that leaves syncs first), pass to the lowest live node, which answers for them to
        nodes that join later; `rank` is this node's."""
        if not alive:
            return
        heir = min(alive)
        with self._lock:
            for origin in [o for o in self.received if o not in alive and o >= 0]:
                changes = self.received.pop(origin)
                if heir == rank:
                    self.sent += changes
                else:
                    self._received(heir)[:] += changes

    def restore(self, rows: np.ndarray, state: np.ndarray | None, rank: int) -> None:
        """Values (and updater state) of every replicated key from a checkpoint; the change from init
        counts as node 0's (every node restores alike; a node that joins later asks for it)."""
        m = len(self.keys)
        with self._lock:
            change = rows - self.data[:m]
            self.data[:m] = rows
            if state is not None and self.state is not None:
                self.state[:m] = state
            if rank == 0:
                self.sent[:m] += change
            else:
                self._received(0)[:m] += change

    def _index(self, keys: np.ndarray) -> np.ndarray:
        idx = self.index[keys]
        if (idx < 0).any():
            raise ProtocolError(
                f"replica delta for keys {keys[idx < 0][:5].tolist()} that table {self.spec.name!r} does not replicate"
            )
        return idx

    def _received(self, origin: int) -> np.ndarray:
        """(m, dim) the changes of `origin` applied here (under _lock)."""
        if origin not in self.received:
            self.received[origin] = np.zeros_like(self.data)
        return self.received[origin]

    def __repr__(self) -> str:
        return f"<Replicas {self.spec.name!r} keys={len(self.keys)} syncs={self.syncs} peers={sorted(self.peers)}>"
