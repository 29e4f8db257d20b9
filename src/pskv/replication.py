"""Hot-key replication (NuPS): the pskv-replica thread that syncs replicas, and which keys are hot.

The replicas themselves (`store.Replicas`) live in the store; this module sends each node's
accumulated changes of them to every other node, `syncs_per_sec` times a second per table.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .errors import ShapeError, TableError
from .future import Future, wait
from .protocol import Header, Kind, dtype_code
from .table import TableSpec, check_keys

if TYPE_CHECKING:
    from .node import Node, TableState


class ReplicaSync:
    """The pskv-replica thread: sends each replicated table's accumulated changes to every other node.

    Threads and ownership: the thread only reads TableState and calls Replicas.take_deltas, which
    locks; `flush()` may run in any thread at the same time (each delta is taken exactly once)."""

    def __init__(self, node: "Node") -> None:
        self._node = node
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _inflight and _thread
        self._inflight: list[Future] = []  # sync rounds not yet acknowledged by every node

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"pskv-replica-{self._node.rank}", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join(2)

    def flush(self, timeout: float | None = None) -> None:
        """Send every change not yet sent, and wait until every node has applied all rounds so far."""
        futures = [self._round(s, threshold=0.0) for s in self._tables()]
        with self._lock:
            futures += self._inflight
            self._inflight = []
        wait(*[f for f in futures if f is not None], timeout=timeout)

    def _tables(self) -> list["TableState"]:
        return [s for s in list(self._node._tables.values()) if s is not None and s.shard.replicas is not None]

    def _run(self) -> None:
        node = self._node
        while not node._stop.is_set() and node._failure is None:
            now = time.monotonic()
            due = [s for s in self._tables() if s.next_sync <= now]
            for s in due:
                s.next_sync = now + s.sync_period
                fut = self._round(s, s.threshold)
                if fut is not None:
                    with self._lock:
                        self._inflight = [f for f in self._inflight if not f.done()] + [fut]
            upcoming = min((s.next_sync for s in self._tables()), default=now + 0.1)
            node._stop.wait(min(0.1, max(0.001, upcoming - time.monotonic())))

    def _round(self, s: "TableState", threshold: float) -> Future | None:
        node = self._node
        replicas = s.shard.replicas
        keys, deltas = replicas.take_deltas(threshold)
        if not len(keys) or node.num_nodes == 1:
            return None
        others = [r for r in range(node.num_nodes) if r != node.rank]
        rid, fut = node.tracker.new_request(len(keys) * len(others), desc=f"replica sync of table {s.spec.name!r}")
        header = Header(Kind.REPLICA_SYNC, cluster=node.cluster, sender=node.rank, origin=node.rank,
                        table=s.spec.table_id, request_id=rid, n_keys=len(keys), dim=s.spec.dim,
                        dtype=dtype_code(s.spec.dtype), key_dtype=dtype_code(np.int64))
        frames = [header.pack(), np.ascontiguousarray(keys), np.ascontiguousarray(deltas)]
        for r in others:
            node.tracker.sent_to(rid, r)
            node.send(r, frames, copy=True)
        replicas.syncs += 1
        replicas.keys_sent += len(keys)
        return fut


def hot_keys(spec: TableSpec, replicate, frequencies) -> np.ndarray:
    """The keys to replicate: `replicate` itself (keys), or the N most frequent rows by `frequencies`."""
    if isinstance(replicate, (int, np.integer)) and not isinstance(replicate, bool):
        if frequencies is None:
            raise TableError(f"table {spec.name!r}: replicate={replicate} needs frequencies= (one count per row) "
                             "to pick the hottest keys; or pass the keys themselves")
        freq = np.asarray(frequencies)
        if freq.shape != (spec.rows,):
            raise ShapeError(f"table {spec.name!r}: frequencies has shape {freq.shape}, expected ({spec.rows},)")
        return np.sort(np.argsort(-freq, kind="stable")[:int(replicate)]).astype(np.int64)
    return np.unique(check_keys(spec, replicate, "replicate"))
