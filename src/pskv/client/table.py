"""Table: a worker's handle on one table (pull, push, set, localize, sampling).

A `Table` call checks its input and hands it to the table's path (client.path): the stages its
options put in, composed once when the table was declared (client.front, client.stages). They
serve the local part from the store in memory; the last, `Route` (client.route), sends the rest
to where each key lives. The call returns a `Future` that the pskv-server thread completes as
replies arrive (or the waiting thread, for replies that come to its reply box).

Threads and ownership: a `Worker` belongs to the thread it was made for, but its methods are
thread-safe. Arrays passed to push/set are copied before the call returns unless
`copy=False`, in which case they must not change until the Future resolves. A pull's `out`
array is written by the calling thread (local rows) and by pskv-server (remote rows); read it
only after `wait()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..catalog import TableState
from ..errors import DTypeError, KeyOutOfRange, ShapeError, TableError
from ..net.future import Future
from ..net.wire import Kind
from ..store.spec import TableSpec, check_keys, check_values
from ..tensors import from_numpy, is_tensor, to_numpy
from . import sampling
from .context import Context
from .filters import codec_of


class Table:
    """A worker's handle on one table: pull, push, set. Get it from `worker.table(name)`."""

    def __init__(self, ctx: Context, state: TableState, worker) -> None:
        self._ctx = ctx
        self._worker = worker  # the client.worker.Worker that made it; None: the node's push-buffer flusher
        self._state = state
        self._path = state.path  # client.path.Path: the table's stages, composed when it was declared
        self.spec: TableSpec = state.spec
        self.name = self.spec.name
        self.rows, self.dim, self.dtype = self.spec.rows, self.spec.dim, np.dtype(self.spec.dtype)
        self._descs: dict[Kind, str] = {}

    # ---- public ---------------------------------------------------------------------------------
    def pull(self, keys, *, out: np.ndarray | None = None, timeout: float | None = None, filters=None) -> np.ndarray:
        """Rows `keys` as a (len(keys), dim) array. Blocks. See pull_async.

        The calling thread receives the replies itself (its own reply box), without waking the
        node's pskv-server thread in between. `filters`: pskv.filters.KeyCache / Compress for the keys."""
        return self._pull(keys, out, None, direct=True, codec=self._codec(filters)).wait(timeout)

    def pull_async(
        self, keys, *, out: np.ndarray | None = None, callback: Callable[[np.ndarray], None] | None = None
    ) -> Future:
        """Fetch rows `keys`. Returns at once; `.wait()` gives the (len(keys), dim) array (`out` if given).

        Thread-safe. `keys`: integer row ids, any order, duplicates allowed. Local rows are copied
        before this returns. Without `out`, the result is a new C-contiguous, writeable array that
        the caller owns (a large remote pull that one node answers whole is the received message's
        memory itself, not a copy of it: no fresh pages to fault in). `callback(values)` runs once
        when the values are in place, before `wait()` returns (in the thread that completes the
        pull: keep it short; if it raises, the Future fails with its error). On a BSP/SSP table this
        call blocks while the slowest worker is more than the staleness behind this worker's clock
        (see pskv.consistency). Raises KeyOutOfRange / ShapeError / DTypeError before sending; the Future fails with
        NodeFailure if a node holding some keys dies."""
        return self._pull(keys, out, callback, direct=False if callback is None else None, codec=self._state.codec)

    def _pull(self, keys, out, callback, *, direct: bool | None, codec=None) -> Future:
        """pull/pull_async; `direct`: the caller waits at once, in this thread (see pull); False:
        it may wait later (a small pull may be held to leave merged, client.coalesce); None: a
        callback may be all that reads it (never held). Given tensors (keys or out), the Future
        gives a tensor: `out`, or one on the result's memory."""
        self._ctx.check()
        tensor = out if is_tensor(out) else is_tensor(keys)
        keys = check_keys(self.spec, keys, "pull")
        fresh = out is None
        out = self._out(out, len(keys))
        self._state.pulls += 1
        fut = self._path.read(self, keys, out, fresh, direct, codec)
        if callback is not None:
            fut = fut.then(callback)
        if tensor is not False:
            fut = fut.map(from_numpy if tensor is True else lambda _: tensor)
        return fut

    def push(self, keys, updates, *, copy: bool = True, filters=None) -> Future:
        """Send `updates` (len(keys), dim) for rows `keys` to the table's updater. Returns a Future.

        Does not wait for remote owners; rows owned by this node are updated before it returns.
        Duplicate keys: their rows are summed before the updater sees them. With copy=False the
        arrays must not change until the Future resolves. Thread-safe. `filters`: wire filters
        (pskv.filters.KeyCache, Compress, Quantize) for the remote parts of an asynchronous push
        (default: the table's, `node.table(filters=)`; `filters=()`: none)."""
        self._ctx.check()
        keys = check_keys(self.spec, keys, "push")
        updates = check_values(self.spec, updates, len(keys), "push")
        self._state.pushes += 1
        return self._path.push(self, Kind.PUSH, keys, updates, None, copy, False, self._codec(filters))

    def push_pull(self, keys, updates, *, out: np.ndarray | None = None, filters=None) -> Future:
        """Push `updates` for `keys` and get the rows of the same keys right after that push, in one
        exchange per owner (the Li et al. server's fused push/pull). `.wait()` gives the (n, dim) rows.
        The owner applies the push and reads the rows under the same locks. Asynchronous tables
        without backups only (TableError otherwise); duplicate keys are summed as in push."""
        self._ctx.check()
        keys = check_keys(self.spec, keys, "push_pull")
        updates = check_values(self.spec, updates, len(keys), "push_pull")
        out = self._out(out, len(keys))
        fut = self._path.push_pull(self, Kind.PUSH, keys, updates, out, True, True, self._codec(filters))
        self._state.pushes += 1
        self._state.pulls += 1
        return fut

    def exchange(self, keys, updates, pulls, *, out: np.ndarray | None = None, copy: bool = True) -> Future:
        """Push `updates` for `keys`, then pull the rows of `pulls` (e.g. this batch's gradients and the
        next batch's rows); `.wait()` gives the (len(pulls), dim) rows (`out` if given) once both are done.

        Read-my-writes: the rows of keys in both include this push. On an asynchronous table without
        backups (no push buffer, no aggregation) the push and the pull that go to one node leave as one
        message, which its owner answers with one reply (half the messages of a push and a pull_async);
        elsewhere, and with the table's filters, they leave as a push() and then a pull() (with backups
        the pull after the push is acknowledged). As push and pull_async for the rest: duplicates summed
        in the push, local rows served before this returns, `copy` as in push."""
        self._ctx.check()
        tensor = out if is_tensor(out) else is_tensor(pulls)
        keys = check_keys(self.spec, keys, "exchange")
        updates = check_values(self.spec, updates, len(keys), "exchange")
        pulls = check_keys(self.spec, pulls, "exchange")
        fresh = out is None
        out = self._out(out, len(pulls))
        self._state.pushes += 1
        self._state.pulls += 1
        fut = self._path.exchange(self, keys, updates, copy, pulls, out, fresh, self._state.codec)
        if tensor is not False:
            fut = fut.map(from_numpy if tensor is True else lambda _: tensor)
        return fut

    def pull_range(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, rows) of the keys in [lo, hi): for a dense table every row id in it; for a sparse table
        (key_space="uint64") every key written so far, sorted as uint64. Blocks."""
        lo, hi = self._bounds(lo, hi, "pull_range")
        keys = np.arange(lo, hi, dtype=np.int64)
        return keys, self.pull(keys)

    def push_range(self, lo: int, hi: int, updates, *, keys=None) -> Future:
        """Push `updates` for the keys of [lo, hi): every key in order (len(updates) == hi - lo), or
        `keys` (each in [lo, hi))."""
        lo, hi = self._bounds(lo, hi, "push_range")
        if keys is None:
            keys = np.arange(lo, hi, dtype=np.uint64 if self.spec.sparse else np.int64)
        else:
            keys = np.asarray(keys)
            u = keys.astype(np.uint64) if self.spec.sparse else keys
            if len(u) and (int(u.min()) < lo or int(u.max()) >= hi):
                raise KeyOutOfRange(f"push_range on table {self.name!r}: keys outside [{lo}, {hi})")
        return self.push(keys, updates)

    def _bounds(self, lo, hi, op: str) -> tuple[int, int]:
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= hi <= self.spec.rows:
            raise KeyOutOfRange(f"{op} on table {self.name!r}: [{lo}, {hi}) is not within [0, {self.spec.rows})")
        return lo, hi

    def flush(self) -> None:
        """Send this table's buffered pushes now (BSP/SSP tables buffer them until clock()), so that
        their Futures can complete before the next clock. A no-op for other tables."""
        self._path.flush()

    def set(self, keys, values, *, copy: bool = True) -> Future:
        """Overwrite rows `keys` with `values` (len(keys), dim); for duplicate keys the last wins."""
        self._ctx.check()
        keys = check_keys(self.spec, keys, "set")
        values = check_values(self.spec, values, len(keys), "set")
        return self._path.set(self, Kind.SET, keys, values, None, copy, False, None)

    def localize(self, keys, *, _force: bool = False) -> Future:
        """Move ownership of `keys` (rows and updater state) to this node. Returns a Future.

        After `wait()` each key is owned here, unless another node localized it since, or its
        manager declined to move it: another node's localize moved it within that node's lease
        (`Relocate.lease` seconds, doubled with each move of the key). It then stays there and is
        read remotely; this node does not ask for it again until that lease ends, and with
        location caches goes to it directly. Pulls and pushes of the keys keep working during the
        move: requests that reach a key in transfer wait at its new owner and apply in arrival
        order when it lands. Thread-safe. `_force`: past leases (a joining node's share, node.table)."""
        self._ctx.check()
        keys = check_keys(self.spec, keys, "localize")
        return self._path.localize(self, np.unique(keys), _force)  # (m,) sorted, distinct

    def intent(self, keys, start: int, end: int | None = None) -> None:
        """Say that this worker will use `keys` in clocks [start, end) of its intent clock
        (`worker.advance_clock()`; end: start + 1). Returns at once and sends nothing: at each
        advance_clock the node tells the keys' managers about windows that come near, and moves here
        ahead of time the keys no other node intends (client.intents, AdaPM). Changes placement,
        never results; no effect on a table whose keys do not move (sparse, aggregated). Raises
        KeyOutOfRange, or TableError from the node's main-thread handle (it has no intent clock)."""
        self._ctx.check()
        if self._worker is None or self._worker.thread < 0:
            raise TableError(
                f"intent on table {self.name!r}: only a worker of node.run() or node.worker() has an intent clock"
            )
        self._worker.intents().signal(self, keys, start, end)

    def prepare_sample(self, n: int, *, scheme: str | None = None) -> sampling.SampleHandle:
        """A handle that gives out at most `n` keys drawn from the table's distribution.

        `scheme` overrides the table's (naive, preloc, pool, onlylocal; see pskv.client.sampling). preloc
        and pool start localizing their keys now, without blocking."""
        self._ctx.check()
        return self._path.sample(self, n, scheme)

    def pull_sample(self, handle: sampling.SampleHandle, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next (up to) k sampled keys of `handle` and their rows. Blocks for the rows."""
        keys = sampling.checked(self, handle).take(int(k))
        distinct, inverse = np.unique(keys, return_inverse=True)
        if len(distinct) == len(keys):
            return keys, self.pull(keys)
        return keys, self.pull(distinct)[inverse]  # (k, dim): each distinct row crosses the network once

    def finish_sample(self, handle: sampling.SampleHandle) -> None:
        """Release the handle; keys it did not give out are dropped."""
        sampling.checked(self, handle).closed = True

    def pull_if_local(self, keys, *, out: np.ndarray | None = None) -> tuple[Any, Any]:
        """(mask, values): rows of the keys owned here now, without any message; others untouched.
        Arrays, or CPU tensors where `keys` or `out` is one (pskv.tensors)."""
        self._ctx.check()
        tensor = out if is_tensor(out) else is_tensor(keys)
        keys = check_keys(self.spec, keys, "pull_if_local")
        out = self._out(out, len(keys))
        if tensor is not False:
            values = from_numpy(out) if tensor is True else tensor
            return from_numpy(self.pull_if_local(keys, out=out)[0]), values
        return self._path.peek(self, keys, out)

    # ---- for its path's stages and techniques (client.path, front, stages, backed, ...) ---------------
    @property
    def ctx(self) -> Context:
        """What the node handed in (client.context): endpoint, tracker, catalog, clocks, ..."""
        return self._ctx

    @property
    def state(self) -> TableState:
        """The table's state on this node (catalog.TableState): its shard, ranges, options, parts."""
        return self._state

    @property
    def worker(self):
        """The client.worker.Worker that made this handle; None: the node's push-buffer flusher."""
        return self._worker

    def request(
        self,
        kind: Kind,
        keys: np.ndarray,
        values,
        out,
        *,
        copy: bool,
        gpos=None,
        fresh: bool = False,
        direct: bool = False,
        rows: bool = False,
        codec=None,
    ) -> Future:
        """The table's request stages alone, no gate or technique before them (an aggregated
        table's plain reads, client.aggregate): see client.stages for the arguments."""
        return self._path.request(self, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)

    def _codec(self, filters):
        """A call's wire filters: its own `filters=` (an empty list: none), else the table's."""
        return self._state.codec if filters is None else codec_of(filters)

    def _out(self, out: np.ndarray | None, n: int) -> np.ndarray:
        if out is None:
            return np.empty((n, self.dim), dtype=self.dtype)  # (n, dim) owned by the caller after wait()
        if is_tensor(out):
            out = to_numpy(out, f"pull on table {self.name!r}: out")  # a view: pulls write into the tensor
        if out.shape != (n, self.dim):
            raise ShapeError(f"pull on table {self.name!r}: out has shape {out.shape}, expected ({n}, {self.dim})")
        if out.dtype != self.dtype:
            raise DTypeError(f"pull on table {self.name!r}: out has dtype {out.dtype}, the table {self.dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(
                f"pull on table {self.name!r}: out must be writeable and C-contiguous; "
                "pass np.ascontiguousarray(out) or let pull allocate it"
            )
        return out

    def track(self, fut: Future) -> None:
        """An asynchronous call's Future: its worker's wait_all() waits for it."""
        if self._worker is not None:
            self._worker.track(fut)

    def note_write(self, fut: Future) -> Future:
        """A push's or set's Future: its worker's next clock() waits until it is applied."""
        return fut if self._worker is None else self._worker.note_write(fut)

    def desc(self, kind: Kind) -> str:
        """What a call of `kind` is called in its Futures and stall reports."""
        desc = self._descs.get(kind)  # (one f-string per kind, not per request)
        if desc is None:
            desc = self._descs[kind] = f"{kind.name.lower()} on table {self.name!r} by node {self._ctx.rank}"
        return desc

    def __repr__(self) -> str:
        return f"<Table {self.name!r} {self.spec.describe()} on node {self._ctx.rank}>"
