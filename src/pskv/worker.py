"""The user API of a worker thread: `Worker` and its `Table` handles.

A `Table` call checks its input, partitions the keys by owner (counting sort, no full sort),
sends one message per remote owner straight from the calling thread, serves the local part
from the store in memory, and returns a `Future` that the pskv-server thread completes as
replies arrive.

Threads and ownership: a `Worker` belongs to the thread it was made for, but its methods are
thread-safe. Arrays passed to push/set are copied before the call returns unless
`copy=False`, in which case they must not change until the Future resolves. A pull's `out`
array is written by the calling thread (local rows) and by pskv-server (remote rows); read it
only after `wait()`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .errors import DTypeError, ProtocolError, ShapeError
from .future import Future, wait as wait_futures
from .protocol import Header, Kind, dtype_code
from .table import TableSpec, check_keys, check_values

if TYPE_CHECKING:
    from .node import Node, TableState

_KEY_CODE = dtype_code(np.int64)


class Table:
    """A worker's handle on one table: pull, push, set. Get it from `worker.table(name)`."""

    def __init__(self, worker: "Worker", state: "TableState") -> None:
        self._worker = worker
        self._node = worker._node
        self._state = state
        self.spec: TableSpec = state.spec
        self.name = self.spec.name
        self.rows, self.dim, self.dtype = self.spec.rows, self.spec.dim, np.dtype(self.spec.dtype)

    # ---- public ---------------------------------------------------------------------------------
    def pull(self, keys, *, out: np.ndarray | None = None, timeout: float | None = None) -> np.ndarray:
        """Rows `keys` as a (len(keys), dim) array. Blocks. See pull_async."""
        return self.pull_async(keys, out=out).wait(timeout)

    def pull_async(self, keys, *, out: np.ndarray | None = None) -> Future:
        """Fetch rows `keys`. Returns at once; `.wait()` gives the (len(keys), dim) array (`out` if given).

        Thread-safe. `keys`: integer row ids, any order, duplicates allowed. Local rows are copied
        before this returns. Raises KeyOutOfRange / ShapeError / DTypeError before sending; the
        Future fails with NodeFailure if a node holding some keys dies."""
        self._node._check()
        keys = check_keys(self.spec, keys, "pull")
        out = self._out(out, len(keys))
        self._state.pulls += 1
        return self._request(Kind.PULL, keys, None, out, copy=True)

    def push(self, keys, updates, *, copy: bool = True) -> Future:
        """Send `updates` (len(keys), dim) for rows `keys` to the table's updater. Returns a Future.

        Does not wait for remote owners; rows owned by this node are updated before it returns.
        Duplicate keys: their rows are summed before the updater sees them. With copy=False the
        arrays must not change until the Future resolves. Thread-safe."""
        self._node._check()
        keys = check_keys(self.spec, keys, "push")
        updates = check_values(self.spec, updates, len(keys), "push")
        self._state.pushes += 1
        return self._request(Kind.PUSH, keys, updates, None, copy=copy)

    def set(self, keys, values, *, copy: bool = True) -> Future:
        """Overwrite rows `keys` with `values` (len(keys), dim); for duplicate keys the last wins."""
        self._node._check()
        keys = check_keys(self.spec, keys, "set")
        values = check_values(self.spec, values, len(keys), "set")
        return self._request(Kind.SET, keys, values, None, copy=copy)

    # ---- the data path --------------------------------------------------------------------------
    def _out(self, out: np.ndarray | None, n: int) -> np.ndarray:
        if out is None:
            return np.empty((n, self.dim), dtype=self.dtype)  # (n, dim) owned by the caller after wait()
        if out.shape != (n, self.dim):
            raise ShapeError(f"pull on table {self.name!r}: out has shape {out.shape}, expected ({n}, {self.dim})")
        if out.dtype != self.dtype:
            raise DTypeError(f"pull on table {self.name!r}: out has dtype {out.dtype}, the table {self.dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"pull on table {self.name!r}: out must be writeable and C-contiguous; "
                             "pass np.ascontiguousarray(out) or let pull allocate it")
        return out

    def _request(self, kind: Kind, keys: np.ndarray, values, out, *, copy: bool) -> Future:
        n = len(keys)
        if n == 0:
            return Future.completed(out, f"{kind.name.lower()} {self.name!r}")
        bounds = self._state.placement.owner_bounds()
        lo, hi = kernels.key_range(keys)
        dest = int(np.searchsorted(bounds, lo, side="right") - 1)
        if hi < bounds[dest + 1]:  # one owner: no partition, no copies
            return self._single(kind, dest, keys, values, out, copy)
        return self._partitioned(kind, bounds, keys, values, out)

    def _single(self, kind, dest, keys, values, out, copy) -> Future:
        me = self._node.rank
        if dest == me:
            self._local(kind, keys, values, out)
            self._state.local_keys += len(keys)
            return Future.completed(out, f"{kind.name.lower()} {self.name!r}")
        on_part = None
        if kind == Kind.PULL:
            def on_part(part, vals):
                self._check_reply(vals, len(out), dest)
                np.copyto(out, vals)
        rid, fut = self._node.tracker.new_request([dest], on_part=on_part, result=out, desc=self._desc(kind))
        self._send(kind, dest, rid, 0, keys, values, copy)
        self._state.remote_keys += len(keys)
        self._worker._track(fut)
        return fut

    def _partitioned(self, kind, bounds, keys, values, out) -> Future:
        me = self._node.rank
        nodes = len(bounds) - 1
        order = np.empty(len(keys), np.int64)  # (n,) key positions grouped by owner
        counts = np.empty(nodes, np.int64)
        kernels.partition(keys, bounds, order, counts)
        starts = np.zeros(nodes + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        remote = [d for d in range(nodes) if counts[d] and d != me]
        positions = [order[starts[d]:starts[d + 1]] for d in remote]  # views: where each part's rows go
        on_part = None
        if kind == Kind.PULL:
            def on_part(part, vals):
                self._check_reply(vals, len(positions[part]), remote[part])
                kernels.put_rows(out, positions[part], vals)
        rid, fut = self._node.tracker.new_request(remote, on_part=on_part, result=out, desc=self._desc(kind))
        for part, d in enumerate(remote):
            pk, pv = self._take(keys, values, order, int(starts[d]), int(starts[d + 1]))
            self._send(kind, d, rid, part, pk, pv, copy=False)
            self._state.remote_keys += len(pk)
        if counts[me]:
            s, e = int(starts[me]), int(starts[me + 1])
            lk, lv = self._take(keys, values, order, s, e)
            self._local(kind, lk, lv, out, pos=order[s:e])
            self._state.local_keys += e - s
        self._worker._track(fut)
        return fut

    def _check_reply(self, vals, n: int, rank: int) -> None:
        if vals is None or vals.shape != (n, self.dim) or vals.dtype != self.dtype:
            got = None if vals is None else f"{vals.shape} {vals.dtype}"
            raise ProtocolError(f"node {rank} answered a pull on table {self.name!r} with {got}, expected "
                                f"({n}, {self.dim}) {self.dtype}; are all nodes running the same pskv?")

    @staticmethod
    def _take(keys, values, order, s, e):
        pk = np.empty(e - s, np.int64)  # (m,) this part's keys, in request order
        kernels.take_keys(keys, order, s, e, 0, pk)
        pv = None
        if values is not None:
            pv = np.empty((e - s, values.shape[1]), values.dtype)  # (m, dim) this part's rows
            kernels.take_rows(values, order, s, e, pv)
        return pk, pv

    def _local(self, kind, keys, values, out, pos=None) -> None:
        shard = self._state.shard
        if kind == Kind.PULL:
            shard.pull(keys, out, pos)
        elif kind == Kind.PUSH:
            shard.push(keys, values)
        else:
            shard.set(keys, values)

    def _send(self, kind, dest, rid, part, keys, values, copy) -> None:
        header = Header(kind, cluster=self._node.cluster, sender=self._node.rank, table=self.spec.table_id,
                        request_id=rid, part=part, n_keys=len(keys), dim=self.dim, key_dtype=_KEY_CODE)
        frames = [None, keys]
        if values is not None:
            header.dtype = dtype_code(values.dtype)
            frames.append(values)
        frames[0] = header.pack()
        self._node.send(dest, frames, copy=copy)

    def _desc(self, kind: Kind) -> str:
        return f"{kind.name.lower()} on table {self.name!r} by node {self._node.rank}"

    def __repr__(self) -> str:
        return f"<Table {self.name!r} {self.spec.describe()} on node {self._node.rank}>"


class Worker:
    """A worker thread's view of the cluster. Made by `node.run()` or `node.worker()`."""

    def __init__(self, node: "Node", thread: int) -> None:
        self._node = node
        self.rank = node.rank
        self.num_nodes = node.num_nodes
        self.thread = thread
        self._tables: dict[str, Table] = {}
        self._pending: list[Future] = []  # outstanding futures for wait_all(); pruned as it grows
        self._lock = threading.Lock()  # guards _pending
        self._closed = False

    def table(self, name: str) -> Table:
        """This worker's handle on table `name`. Raises UnknownTable."""
        handle = self._tables.get(name)
        if handle is None:
            handle = self._tables[name] = Table(self, self._node._table_state(name))
        return handle

    def wait_all(self, timeout: float | None = None) -> None:
        """Block until every request this worker issued so far completed; raises the first error."""
        with self._lock:
            pending, self._pending = self._pending, []
        wait_futures(*pending, timeout=timeout)

    def barrier(self, timeout: float | None = None) -> None:
        """Wait for this worker's requests, then for every open worker of every node to arrive.

        After it returns, a pull by any worker sees every push that any worker issued before
        its barrier call."""
        self._node._check()
        self.wait_all(timeout)
        self._node._local_barrier.wait(timeout)

    def close(self) -> None:
        """Leave the node's barriers (node.run() does this when the worker function returns)."""
        if not self._closed:
            self._closed = True
            self._node._local_barrier.leave(self)

    def _track(self, fut: Future) -> None:
        with self._lock:
            self._pending.append(fut)
            if len(self._pending) >= 4096:
                # keep failures: wait_all() must still raise them
                self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]

    def __repr__(self) -> str:
        return f"<Worker node={self.rank}/{self.num_nodes} thread={self.thread}>"
