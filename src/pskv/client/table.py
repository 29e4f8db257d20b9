"""Table: a worker's handle on one table (pull, push, set, localize, sampling) and its data path.

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

import time
from typing import Callable

import numpy as np

from .. import _hooks
from ..catalog import TableState
from ..errors import DTypeError, KeyOutOfRange, RequestStalled, ShapeError, TableError, WaitTimeout
from ..net.future import Future
from ..net.wire import FORCE, ROWS, Kind
from ..placement import route
from ..store.spec import TableSpec, check_keys, check_values
from ..tensors import from_numpy, is_tensor, to_numpy
from . import backed, sampling
from .context import Context
from .filters import codec_of
from .request import Request


class Table:
    """A worker's handle on one table: pull, push, set. Get it from `worker.table(name)`."""

    def __init__(self, ctx: Context, state: TableState, worker) -> None:
        self._ctx = ctx
        self._worker = worker  # the client.worker.Worker that made it; None: the node's push-buffer flusher
        self._state = state
        self.spec: TableSpec = state.spec
        self.name = self.spec.name
        self.rows, self.dim, self.dtype = self.spec.rows, self.spec.dim, np.dtype(self.spec.dtype)
        self._descs: dict[Kind, str] = {}

    # ---- public ---------------------------------------------------------------------------------
    def pull(self, keys, *, out: np.ndarray | None = None, timeout: float | None = None,
             filters=None) -> np.ndarray:
        """Rows `keys` as a (len(keys), dim) array. Blocks. See pull_async.

        The calling thread receives the replies itself (its own reply box), without waking the
        node's pskv-server thread in between. `filters`: pskv.filters.KeyCache / Compress for the keys."""
        return self._pull(keys, out, None, direct=True, codec=self._codec(filters)).wait(timeout)

    def pull_async(self, keys, *, out: np.ndarray | None = None,
                   callback: Callable[[np.ndarray], None] | None = None) -> Future:
        """Fetch rows `keys`. Returns at once; `.wait()` gives the (len(keys), dim) array (`out` if given).

        Thread-safe. `keys`: integer row ids, any order, duplicates allowed. Local rows are copied
        before this returns. Without `out`, the result is a new C-contiguous, writeable array that
        the caller owns (a large remote pull that one node answers whole is the received message's
        memory itself, not a copy of it: no fresh pages to fault in). `callback(values)` runs once when the values are in place, before
        `wait()` returns (in the thread that completes the pull: keep it short; if it raises, the
        Future fails with its error). On a BSP/SSP table this call blocks while the slowest
        worker is more than the staleness behind this worker's clock (see pskv.consistency).
        Raises KeyOutOfRange / ShapeError / DTypeError before sending; the Future fails with
        NodeFailure if a node holding some keys dies."""
        return self._pull(keys, out, callback, direct=False, codec=self._state.codec)

    def _pull(self, keys, out, callback, *, direct: bool, codec=None) -> Future:
        """pull/pull_async; `direct`: the caller waits at once, in this thread (see pull). Given
        tensors (keys or out), the Future gives a tensor: `out`, or one on the result's memory."""
        self._ctx.check()
        tensor = out if is_tensor(out) else is_tensor(keys)
        keys = check_keys(self.spec, keys, "pull")
        fresh = out is None
        out = self._out(out, len(keys))
        self._state.pulls += 1
        if self._state.aggregator is not None:
            fut = self._state.aggregator.pull(self._worker, keys, out)
        elif self._state.consistency.synchronous:
            fut = self._pull_bounded(keys, out, direct)
        else:
            fut = self._request(Kind.PULL, keys, None, out, copy=True, fresh=fresh, direct=direct, codec=codec)
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
        if self._state.aggregator is not None:
            return self._state.aggregator.push(self._worker, keys, updates)
        gate = self._ctx.gate
        gate.enter(self._ctx.check)  # a checkpoint in progress: after it
        try:
            if self._state.buffer is not None:
                return self._update(self._push_buffered(keys, updates))
            return self._request(Kind.PUSH, keys, updates, None, copy=copy, codec=self._codec(filters))  # Async
        finally:
            gate.leave()

    def push_pull(self, keys, updates, *, out: np.ndarray | None = None, filters=None) -> Future:
        """Push `updates` for `keys` and get the rows of the same keys right after that push, in one
        exchange per owner (the Li et al. server's fused push/pull). `.wait()` gives the (n, dim) rows.
        The owner applies the push and reads the rows under the same locks. Asynchronous tables
        without backups only (TableError otherwise); duplicate keys are summed as in push."""
        self._ctx.check()
        st = self._state
        if (st.buffer is not None or st.aggregator is not None or st.shard.replicas is not None
                or self._ctx.chains() is not None):
            raise TableError(f"push_pull on table {self.name!r}: only for asynchronous tables without "
                             "NodeAggregate, Replicate or backups; use push() then pull() there")
        keys = check_keys(self.spec, keys, "push_pull")
        updates = check_values(self.spec, updates, len(keys), "push_pull")
        out = self._out(out, len(keys))
        st.pushes += 1
        st.pulls += 1
        gate = self._ctx.gate
        gate.enter(self._ctx.check)
        try:
            return self._request(Kind.PUSH, keys, updates, out, copy=True, rows=True, codec=self._codec(filters))
        finally:
            gate.leave()

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
        if self._state.buffer is not None:
            self._state.buffer.flush()

    def set(self, keys, values, *, copy: bool = True) -> Future:
        """Overwrite rows `keys` with `values` (len(keys), dim); for duplicate keys the last wins."""
        self._ctx.check()
        keys = check_keys(self.spec, keys, "set")
        values = check_values(self.spec, values, len(keys), "set")
        gate = self._ctx.gate
        gate.enter(self._ctx.check)  # a checkpoint in progress: after it
        try:
            return self._set(keys, values, copy)
        finally:
            gate.leave()

    def _set(self, keys: np.ndarray, values: np.ndarray, copy: bool) -> Future:
        st = self._state
        if st.aggregator is not None and st.aggregator.started():
            raise TableError(f"set on table {self.name!r}: an aggregated table takes set only for initial values, "
                             "before any push of a round (then a barrier); later only push and pull")
        if st.buffer is not None:  # keep order with buffered pushes, and drop cached copies
            st.buffer.flush_before_pull()
            if st.cache is not None:  # no copy of these rows until the set is applied (see RowCache.hold)
                st.cache.hold(keys)
        fut = self._request(Kind.SET, keys, values, None, copy=copy)
        if st.buffer is not None:  # later buffered pushes must not overtake it (PushBuffer.order_after)
            st.buffer.order_after(fut)
        if st.cache is not None:
            fut.add_done_callback(lambda f: st.cache.release(keys))
        return self._update(fut) if st.consistency.synchronous else fut

    def localize(self, keys, *, _force: bool = False) -> Future:
        """Move ownership of `keys` (rows and updater state) to this node. Returns a Future.

        After `wait()` each key is owned here, unless another node localized it since, or its
        manager declined to move it: another node's localize moved it within that node's lease
        (`Relocate.lease` seconds, doubled with each move of the key). It then stays there and is
        read remotely; this node does not ask for it again until that lease ends, and with
        location caches goes to it directly. Pulls and pushes of the keys keep working during the
        move: requests that reach a key in transfer wait at its new owner and apply in arrival
        order when it lands. Thread-safe."""
        self._ctx.check()
        if self._state.aggregator is not None:
            raise TableError(f"localize on table {self.name!r}: an aggregated table keeps its static placement")
        keys = np.unique(check_keys(self.spec, keys, "localize"))  # (m,) sorted, distinct
        shard = self._state.shard
        declined = None if _force else self._state.declined_until  # (_force: a joining node's share, node.table)
        if declined is not None:  # declined lately (another node's lease holds them): do not ask again yet
            keys = keys[declined[keys] <= time.monotonic()]
        if shard.replicas is not None:  # replicated keys are local everywhere already
            keys = keys[~shard.replicas.mask(keys)]
        if not len(keys) or shard.owned(keys).all():
            return Future.completed(None, f"localize {self.name!r}")
        gate = self._ctx.gate  # a move changes two nodes' files: during a checkpoint it waits, and the checkpoint's
        gate.enter(self._ctx.check)  # drain waits for the moves begun before it (a row in TRANSFER is in no file)
        try:
            _hooks.reach("localize.checked", node=self._ctx.rank, keys=keys)
            fresh = shard.mark_incoming(keys)  # absent keys are now "on their way here"
            waiting = keys[shard.slot[keys] < 0]
            tracker = self._ctx.tracker
            rid, fut = tracker.new_request(len(waiting), desc=f"localize on table {self.name!r}")
            here = shard.await_keys(waiting, rid)
            if here:
                tracker.on_reply(rid, here)
            self._state.localizes += len(fresh)
            if self._ctx.chains() is not None:  # backups: this node becomes a reader of the keys (server.readers)
                backed.subscribe(self, rid, fresh)
                self._track(fut)
                return fut
            managers = self._state.ranges.manager_of(fresh)
            lease_ms = int(round(self._state.options.placement.lease * 1000))  # asked of the managers (server.relocate)
            for m in np.unique(managers):
                self._ctx.endpoint.request(int(m), Kind.LOCALIZE, self.spec.table_id, rid, part=lease_ms,
                                           flags=FORCE if _force else 0, keys=fresh[managers == m])
            self._track(fut)
            return fut
        finally:
            gate.leave()

    def prepare_sample(self, n: int, *, scheme: str | None = None) -> "sampling.SampleHandle":
        """A handle that gives out at most `n` keys drawn from the table's distribution.

        `scheme` overrides the table's (naive, preloc, pool, onlylocal; see pskv.client.sampling). preloc
        and pool start localizing their keys now, without blocking."""
        self._ctx.check()
        return sampling.prepare(self, n, scheme)

    def pull_sample(self, handle: "sampling.SampleHandle", k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next (up to) k sampled keys of `handle` and their rows. Blocks for the rows."""
        keys = sampling.checked(self, handle).take(int(k))
        distinct, inverse = np.unique(keys, return_inverse=True)
        if len(distinct) == len(keys):
            return keys, self.pull(keys)
        return keys, self.pull(distinct)[inverse]  # (k, dim): each distinct row crosses the network once

    def finish_sample(self, handle: "sampling.SampleHandle") -> None:
        """Release the handle; keys it did not give out are dropped."""
        sampling.checked(self, handle).closed = True

    def pull_if_local(self, keys, *, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(mask, values): rows of the keys owned here now, without any message; others untouched."""
        self._ctx.check()
        tensor = out if is_tensor(out) else is_tensor(keys)
        keys = check_keys(self.spec, keys, "pull_if_local")
        out = self._out(out, len(keys))
        if tensor is not False:
            values = from_numpy(out) if tensor is True else tensor
            return from_numpy(self.pull_if_local(keys, out=out)[0]), values
        if not len(keys):
            return np.zeros(0, bool), out
        mask = np.ones(len(keys), bool)
        replicas = self._state.shard.replicas
        rest = None
        if replicas is not None:  # a replica, not the manager's unused home row, holds these
            hot = replicas.mask(keys)
            replicas.pull(keys[hot], out, np.flatnonzero(hot))
            rest = np.flatnonzero(~hot)
        miss = self._state.shard.pull(keys if rest is None else keys[rest], out, rest)
        mask[miss if rest is None else rest[miss]] = False
        self._state.local_keys += int(mask.sum())
        return mask, out

    # ---- BSP / SSP (pskv.consistency) -----------------------------------------------------------
    def _pull_bounded(self, keys: np.ndarray, out: np.ndarray, direct: bool) -> Future:
        """A pull that includes every update stamped <= clock - staleness - 1, and this node's own."""
        st = self._state
        needed = self._ctx.clocks.clock_of(self._worker) - st.consistency.staleness  # the global clock the rows need
        rest = np.arange(len(keys))  # (n,) positions in out not yet served
        # copies of rows owned elsewhere, fresh enough for this clock; a handle whose thread ticks no clock
        # (the main thread's, after training) has no clock to be fresh for: it reads the owners' rows
        if st.cache is not None and self._ctx.clocks.takes_part(self._worker):
            far = np.flatnonzero(self._cacheable(keys))
            if len(far):
                todo = np.ones(len(keys), bool)
                todo[far] = False
                todo[far[st.cache.lookup(keys[far], needed, out, far)]] = True
                rest = np.flatnonzero(todo)
                if not len(rest):
                    return Future.completed(out, self._desc(Kind.PULL))
        try:
            self._ctx.clocks.wait_for(needed, self._ctx.collective_timeout)
        except WaitTimeout as exc:  # a worker somewhere stopped calling clock(): fail loudly, not forever
            raise RequestStalled(f"{self._desc(Kind.PULL)}: {exc} (PSKV_COLLECTIVE_TIMEOUT); the node logs of the "
                                 "slowest workers show where they are", request=self._desc(Kind.PULL)) from None
        # before the flush: a push written to the cache before `since` is in the buffer by then (see RowCache)
        since = st.cache.sequence() if st.cache is not None else 0
        st.buffer.flush_before_pull()  # read-my-writes: our buffered updates reach the owners first
        fresh = self._ctx.clocks.global_clock
        if st.cache is None:
            return self._request(Kind.PULL, keys, None, out, copy=True, direct=direct)
        miss_keys = keys[rest]
        fut = self._request(Kind.PULL, miss_keys, None, out, copy=True, gpos=rest, direct=direct)
        remote = self._cacheable(miss_keys)

        def keep(values: np.ndarray) -> None:
            st.cache.insert(miss_keys[remote], values[rest[remote]], fresh, since)

        return fut.then(keep)

    def _cacheable(self, keys: np.ndarray) -> np.ndarray:
        """(n,) bool: rows of keys owned elsewhere and not replicated: the only ones a RowCache copies
        (rows owned here are read from the store; replicated ones from this node's replica)."""
        far = self._state.shard.slot[keys] < 0
        replicas = self._state.shard.replicas
        return far if replicas is None else far & ~replicas.mask(keys)

    def _push_buffered(self, keys: np.ndarray, updates: np.ndarray) -> Future:
        """Apply the local part now; buffer the rest (copied) for the next flush."""
        st = self._state
        if st.shard.replicas is not None:
            hot = st.shard.replicas.mask(keys)
            if hot.any():
                st.shard.replicas.push(keys[hot], updates[hot])
                self._state.local_keys += int(hot.sum())
                keys, updates = keys[~hot], updates[~hot]
        if not len(keys):
            return Future.completed(None, self._desc(Kind.PUSH))
        if self._ctx.chains() is None:  # (with backups every write goes through its range's head)
            miss = st.shard.push(keys, updates)
            self._state.local_keys += len(keys) - len(miss)
            if not len(miss):
                return Future.completed(None, self._desc(Kind.PUSH))
            keys, updates = keys[miss], updates[miss]
        if st.cache is None:
            fut = st.buffer.add(keys, updates)
        else:
            with st.cache.ordering:  # write + add as one step against a pull's sequence() (see RowCache)
                st.cache.write(keys, updates)
                fut = st.buffer.add(keys, updates)
        self._track(fut)
        return fut

    def _send_push(self, keys: np.ndarray, values: np.ndarray) -> Future:
        """A flush of the push buffer: a plain push of arrays nobody else holds."""
        return self._request(Kind.PUSH, keys, values, None, copy=False)

    # ---- the data path --------------------------------------------------------------------------
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
            raise ShapeError(f"pull on table {self.name!r}: out must be writeable and C-contiguous; "
                             "pass np.ascontiguousarray(out) or let pull allocate it")
        return out

    def _request(self, kind: Kind, keys: np.ndarray, values, out, *, copy: bool, gpos=None,
                 fresh: bool = False, direct: bool = False, rows: bool = False, codec=None) -> Future:
        """Serve or send `keys`; with `gpos`, key i's row goes to out[gpos[i]]. `fresh`: `out` was
        allocated for this pull (no `out=`), so a large reply that answers all of it in order may
        become the result itself instead of being copied into `out` (see client.request.Request.on_part).
        `direct`: this thread waits for the result at once, so the replies come to its reply box.
        `rows`: a push that wants the rows after it in `out` (push_pull). `codec`: how remote parts travel."""
        n = len(keys)
        if n == 0:
            return Future.completed(out, self._desc(kind))
        shard = self._state.shard
        if shard.replicas is not None:  # replicated keys: always local, never routed
            hot = shard.replicas.mask(keys)
            if hot.any():
                at = np.flatnonzero(hot)
                self._replica(kind, keys[at], None if values is None else values[at], out,
                              at if gpos is None else gpos[at])
                self._state.local_keys += len(at)
                if len(at) == n:
                    return Future.completed(out, self._desc(kind))
                rest = np.flatnonzero(~hot)
                keys, values, copy = keys[rest], None if values is None else values[rest], False
                gpos = rest if gpos is None else gpos[rest]
        if self._ctx.chains() is not None:  # a cluster with backups (client.backed)
            fut = backed.request(self, kind, keys, values, out, gpos, direct)
            self._track(fut)
            return fut
        if shard.slot[keys[0]] >= 0:  # probably all local: one locked pass, no routing
            miss = self._local(kind, keys, values, out, gpos, rows)
            self._state.local_keys += len(keys) - len(miss)
            if not len(miss):
                return Future.completed(out, self._desc(kind))
            keys, values, copy = keys[miss], None if values is None else values[miss], False
            gpos = miss if gpos is None else gpos[miss]
        req = Request(self, kind, out, fresh)
        req.rid, fut = self._ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out,
                                                     desc=self._desc(kind))
        if direct:
            req.reply_to = self._ctx.endpoint.reply_box()
        st = self._state
        ranges = st.ranges  # (read once: a membership change puts a new one in its place)
        # nothing moved here and one manager holds every key: skip per-key routing (correct even if
        # other nodes moved some of the keys: their manager forwards them)
        dest = ranges.one_manager(keys) if st.shard.static and not st.loc_cache.size else -1
        if dest >= 0:
            self._part(req, dest, keys, values, gpos, copy, ranges.nodes, rows, codec)
        else:  # each key to where it lives (or may live); `ranges.nodes`: on its way here
            hops = route.next_hops(keys, st.shard, ranges, self._ctx.rank, st.loc_cache)
            for d, idx, pk, pv in route.parts(keys, values, hops, ranges.nodes + 1):
                if idx is None:
                    self._part(req, d, pk, pv, gpos, copy, ranges.nodes, rows, codec)
                else:
                    self._part(req, d, pk, pv, idx if gpos is None else gpos[idx], False, ranges.nodes, rows, codec)
        if req.reply_to and req.parts:
            fut.pumped_by(self._ctx.endpoint.pump)
        self._track(fut)
        return fut

    def _part(self, req, dest, keys, values, gpos, copy, incoming, rows=False, codec=None) -> None:
        me = self._ctx.rank
        if dest == me:
            miss = self._local(req.kind, keys, values, req.out, gpos, rows)
            served = len(keys) - len(miss)
            self._state.local_keys += served
            if served:
                self._ctx.tracker.on_reply(req.rid, served)
            if not len(miss):
                return
            # moved away meanwhile: our own server routes them on
            keys, values = keys[miss], None if values is None else values[miss]
            gpos = miss if gpos is None else gpos[miss]
            copy = False
        elif dest == incoming:
            dest = me  # on their way here: our server queues them until they land
        req.parts.append((gpos, keys if self._state.loc_cache.size else None))
        self._state.remote_keys += len(keys)
        self._ctx.endpoint.request(dest, req.kind, self.spec.table_id, req.rid, part=len(req.parts) - 1, dim=self.dim,
                                   copy=copy, reply_to=req.reply_to, flags=ROWS if rows else 0, codec=codec, keys=keys,
                                   values=values)

    def _replica(self, kind, keys, values, out, pos) -> None:
        replicas = self._state.shard.replicas
        if kind == Kind.PULL:
            replicas.pull(keys, out, pos)
        elif kind == Kind.PUSH:
            replicas.push(keys, values)
        else:
            replicas.set(keys, values)

    def _local(self, kind, keys, values, out, pos, rows=False) -> np.ndarray:
        """Serve the keys this node owns; returns the indices of those it does not."""
        shard = self._state.shard
        if kind == Kind.PULL:
            return shard.pull(keys, out, pos)
        if kind == Kind.PUSH and rows:
            if pos is None:
                return shard.push_pull(keys, values, out)
            got = np.empty((len(keys), self.dim), self.dtype)
            miss = shard.push_pull(keys, values, got)
            hit = np.ones(len(keys), bool)
            hit[miss] = False
            out[pos[hit]] = got[hit]
            return miss
        if kind == Kind.PUSH:
            return shard.push(keys, values)
        return shard.set(keys, values)

    def _track(self, fut: Future) -> None:
        if self._worker is not None:
            self._worker._track(fut)

    def _update(self, fut: Future) -> Future:
        return fut if self._worker is None else self._worker._update(fut)

    def _desc(self, kind: Kind) -> str:
        desc = self._descs.get(kind)  # (one f-string per kind, not per request)
        if desc is None:
            desc = self._descs[kind] = f"{kind.name.lower()} on table {self.name!r} by node {self._ctx.rank}"
        return desc

    def __repr__(self) -> str:
        return f"<Table {self.name!r} {self.spec.describe()} on node {self._ctx.rank}>"
