"""Replicas: this node's copies of a table's hot keys (NuPS hot-key replication)."""

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
    sees first-hand, and the other nodes receive the resulting change of the value."""

    def __init__(self, spec: TableSpec, keys: np.ndarray) -> None:
        self.spec = spec
        self.keys = np.unique(np.asarray(keys, np.int64))  # (m,) sorted replicated keys
        self.index = np.full(spec.rows, -1, np.int64)  # (rows,) key -> replica row, -1: not replicated
        self.index[self.keys] = np.arange(len(self.keys))
        m = len(self.keys)
        self.data = np.empty((max(m, 1), spec.dim), spec.dtype)  # (m, dim) this node's copy
        for i, k in enumerate(self.keys.tolist()):
            spec.init.fill(self.data[i:i + 1], k, spec.name)
        width = spec.updater.state_width(spec.dim)
        self.state = None
        if width:
            self.state = np.empty((len(self.data), width), spec.dtype)
            spec.updater.init_state(self.state)
        self.delta = np.zeros_like(self.data)  # (m, dim) local change not yet sent to the others
        self._lock = threading.Lock()  # guards data, state, delta
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

    def take_deltas(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """(keys, deltas) whose change exceeds `threshold` (L2 norm; 0: any change); those reset to 0."""
        with self._lock:
            norms = np.sqrt((self.delta.astype(np.float64) ** 2).sum(axis=1))[:len(self.keys)]
            rows = np.flatnonzero(norms > threshold) if threshold > 0 else np.flatnonzero(norms)
            deltas = self.delta[rows]  # (r, dim) copies
            self.delta[rows] = 0
        return self.keys[rows], deltas

    def add_deltas(self, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Apply another node's changes (they are not ours to send on)."""
        idx = self.index[keys]
        if (idx < 0).any():
            raise ProtocolError(f"replica delta for keys {keys[idx < 0][:5].tolist()} that table {self.spec.name!r} does not replicate")
        with self._lock:
            np.add.at(self.data, idx, deltas)  # a handful of hot rows: no kernel needed

    def restore(self, rows: np.ndarray, state: np.ndarray | None) -> None:
        """Values (and updater state) of every replicated key from a checkpoint (every node alike)."""
        m = len(self.keys)
        with self._lock:
            self.data[:m] = rows
            if state is not None and self.state is not None:
                self.state[:m] = state

    def __repr__(self) -> str:
        return f"<Replicas {self.spec.name!r} keys={len(self.keys)} syncs={self.syncs}>"
