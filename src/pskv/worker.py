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
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import _hooks, kernels, sampling
from .errors import DTypeError, ProtocolError, RequestStalled, ShapeError, TableError
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

    def pull_async(self, keys, *, out: np.ndarray | None = None,
                   callback: Callable[[np.ndarray], None] | None = None) -> Future:
        """Fetch rows `keys`. Returns at once; `.wait()` gives the (len(keys), dim) array (`out` if given).

        Thread-safe. `keys`: integer row ids, any order, duplicates allowed. Local rows are copied
        before this returns. `callback(values)` runs once when the values are in place, before
        `wait()` returns (in the thread that completes the pull: keep it short; if it raises, the
        Future fails with its error). On a BSP/SSP table this call blocks while the slowest
        worker is more than the staleness behind this worker's clock (see pskv.consistency).
        Raises KeyOutOfRange / ShapeError / DTypeError before sending; the Future fails with
        NodeFailure if a node holding some keys dies."""
        self._node._check()
        keys = check_keys(self.spec, keys, "pull")
        out = self._out(out, len(keys))
        self._state.pulls += 1
        if self._state.aggregator is not None:
            fut = self._state.aggregator.pull(self._worker, keys, out)
        elif self._state.consistency.synchronous:
            fut = self._pull_bounded(keys, out)
        else:
            fut = self._request(Kind.PULL, keys, None, out, copy=True)
        if callback is not None:
            fut = fut.then(callback)
        return fut

    def push(self, keys, updates, *, copy: bool = True) -> Future:
        """Send `updates` (len(keys), dim) for rows `keys` to the table's updater. Returns a Future.

        Does not wait for remote owners; rows owned by this node are updated before it returns.
        Duplicate keys: their rows are summed before the updater sees them. With copy=False the
        arrays must not change until the Future resolves. Thread-safe."""
        self._node._check()
        keys = check_keys(self.spec, keys, "push")
        updates = check_values(self.spec, updates, len(keys), "push")
        self._state.pushes += 1
        if self._state.aggregator is not None:
            return self._state.aggregator.push(self._worker, keys, updates)
        if self._state.buffer is not None:
            return self._worker._update(self._push_buffered(keys, updates))
        return self._request(Kind.PUSH, keys, updates, None, copy=copy)  # Async: no clock to hold

    def set(self, keys, values, *, copy: bool = True) -> Future:
        """Overwrite rows `keys` with `values` (len(keys), dim); for duplicate keys the last wins."""
        self._node._check()
        keys = check_keys(self.spec, keys, "set")
        values = check_values(self.spec, values, len(keys), "set")
        st = self._state
        if st.aggregator is not None:
            raise TableError(f"set on table {self.name!r}: an aggregated table takes only push and pull")
        if st.buffer is not None:  # keep order with buffered pushes, and drop cached copies
            st.buffer.flush_before_pull()
            if st.cache is not None:  # no copy of these rows until the set is applied (see RowCache.hold)
                st.cache.hold(keys)
        fut = self._request(Kind.SET, keys, values, None, copy=copy)
        if st.buffer is not None:  # later buffered pushes must not overtake it (PushBuffer.order_after)
            st.buffer.order_after(fut)
        if st.cache is not None:
            fut.add_done_callback(lambda f: st.cache.release(keys))
        return self._worker._update(fut) if st.consistency.synchronous else fut

    def localize(self, keys) -> Future:
        """Move ownership of `keys` (rows and updater state) to this node. Returns a Future.

        After `wait()` each key is owned here, unless another node localized it since. Pulls and
        pushes of the keys keep working during the move: requests that reach a key in transfer
        wait at its new owner and apply in arrival order when it lands. Thread-safe."""
        self._node._check()
        if self._state.aggregator is not None:
            raise TableError(f"localize on table {self.name!r}: an aggregated table keeps its static placement")
        keys = np.unique(check_keys(self.spec, keys, "localize"))  # (m,) sorted, distinct
        shard = self._state.shard
        if shard.replicas is not None:  # replicated keys are local everywhere already
            keys = keys[~shard.replicas.mask(keys)]
        if not len(keys) or shard.owned(keys).all():
            return Future.completed(None, f"localize {self.name!r}")
        _hooks.reach("localize.checked", node=self._node.rank, keys=keys)
        fresh = shard.mark_incoming(keys)  # absent keys are now "on their way here"
        waiting = keys[shard.slot[keys] < 0]
        rid, fut = self._node.tracker.new_request(len(waiting), desc=f"localize on table {self.name!r}")
        here = shard.await_keys(waiting, rid)
        if here:
            self._node.tracker.on_reply(rid, here)
        self._state.localizes += len(fresh)
        bounds = self._state.placement.bounds
        managers = np.searchsorted(bounds, fresh, side="right") - 1
        for m in np.unique(managers):
            mine = np.ascontiguousarray(fresh[managers == m])
            header = Header(Kind.LOCALIZE, cluster=self._node.cluster, sender=self._node.rank,
                            origin=self._node.rank, table=self.spec.table_id, request_id=rid, n_keys=len(mine),
                            key_dtype=_KEY_CODE)
            self._node.tracker.sent_to(rid, int(m))
            self._node.send(int(m), [header.pack(), mine])
        self._worker._track(fut)
        return fut

    def prepare_sample(self, n: int, *, scheme: str | None = None) -> "sampling.SampleHandle":
        """A handle that gives out at most `n` keys drawn from the table's distribution.

        `scheme` overrides the table's (naive, preloc, pool, onlylocal; see pskv.sampling). preloc
        and pool start localizing their keys now, without blocking."""
        self._node._check()
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
        self._node._check()
        keys = check_keys(self.spec, keys, "pull_if_local")
        out = self._out(out, len(keys))
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
    def _pull_bounded(self, keys: np.ndarray, out: np.ndarray) -> Future:
        """A pull that includes every update stamped <= clock - staleness - 1, and this node's own."""
        st = self._state
        needed = self._worker.current_clock - st.consistency.staleness  # the global clock the rows need
        rest = np.arange(len(keys))  # (n,) positions in out not yet served
        if st.cache is not None:  # copies of rows owned elsewhere, fresh enough for this clock
            far = np.flatnonzero(self._cacheable(keys))
            if len(far):
                todo = np.ones(len(keys), bool)
                todo[far] = False
                todo[far[st.cache.lookup(keys[far], needed, out, far)]] = True
                rest = np.flatnonzero(todo)
                if not len(rest):
                    return Future.completed(out, self._desc(Kind.PULL))
        try:
            self._node.clocks.wait_for(needed, self._node.config.collective_timeout)
        except TimeoutError as exc:  # a worker somewhere stopped calling clock(): fail loudly, not forever
            raise RequestStalled(f"{self._desc(Kind.PULL)}: {exc} (PSKV_COLLECTIVE_TIMEOUT); the node logs of the "
                                 "slowest workers show where they are", request=self._desc(Kind.PULL)) from None
        # before the flush: a push written to the cache before `since` is in the buffer by then (see RowCache)
        since = st.cache.sequence() if st.cache is not None else 0
        st.buffer.flush_before_pull()  # read-my-writes: our buffered updates reach the owners first
        fresh = self._node.clocks.global_clock
        if st.cache is None:
            return self._request(Kind.PULL, keys, None, out, copy=True)
        miss_keys = keys[rest]
        fut = self._request(Kind.PULL, miss_keys, None, out, copy=True, gpos=rest)
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
        self._worker._track(fut)
        return fut

    def _send_push(self, keys: np.ndarray, values: np.ndarray) -> Future:
        """A flush of the push buffer: a plain push of arrays nobody else holds."""
        return self._request(Kind.PUSH, keys, values, None, copy=False)

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

    def _request(self, kind: Kind, keys: np.ndarray, values, out, *, copy: bool, gpos=None) -> Future:
        """Serve or send `keys`; with `gpos`, key i's row goes to out[gpos[i]]."""
        n = len(keys)
        if n == 0:
            return Future.completed(out, f"{kind.name.lower()} {self.name!r}")
        shard = self._state.shard
        if shard.replicas is not None:  # replicated keys: always local, never routed
            hot = shard.replicas.mask(keys)
            if hot.any():
                at = np.flatnonzero(hot)
                self._replica(kind, keys[at], None if values is None else values[at], out,
                              at if gpos is None else gpos[at])
                self._state.local_keys += len(at)
                if len(at) == n:
                    return Future.completed(out, f"{kind.name.lower()} {self.name!r}")
                rest = np.flatnonzero(~hot)
                keys, values, copy = keys[rest], None if values is None else values[rest], False
                gpos = rest if gpos is None else gpos[rest]
        if shard.slot[keys[0]] >= 0:  # probably all local: one locked pass, no routing
            miss = self._local(kind, keys, values, out, gpos)
            self._state.local_keys += len(keys) - len(miss)
            if not len(miss):
                return Future.completed(out, f"{kind.name.lower()} {self.name!r}")
            keys, values, copy = keys[miss], None if values is None else values[miss], False
            gpos = miss if gpos is None else gpos[miss]
        req = _Request(self, kind, out)
        req.rid, fut = self._node.tracker.new_request(len(keys), on_part=req.on_part, result=out,
                                                      desc=self._desc(kind))
        dest = self._static_dest(keys)
        if dest >= 0:  # nothing moved here and one manager holds every key: skip per-key routing
            self._part(req, dest, keys, values, gpos, copy)
        else:
            self._route(req, keys, values, gpos, copy)
        self._worker._track(fut)
        return fut

    def _static_dest(self, keys) -> int:
        """The one manager of all `keys` when this node's placement is still the static one, else -1.

        Correct even if other nodes moved some of these keys: their manager forwards them."""
        st = self._state
        if not st.shard.static or st.loc_cache.size:
            return -1
        lo, hi = kernels.key_range(keys)
        bounds = st.placement.bounds
        dest = int(np.searchsorted(bounds, lo, side="right") - 1)
        return dest if hi < bounds[dest + 1] else -1

    def _route(self, req: "_Request", keys, values, gpos, copy) -> None:
        """Send each key to where it lives (or may live); serve the ones owned here."""
        st, me = self._state, self._node.rank
        nodes = self._node.num_nodes
        dest = np.empty(len(keys), np.int64)  # (n,) next hop per key; `nodes` = incoming here
        kernels.route(keys, st.shard.slot, st.placement.bounds, st.shard.owner, st.shard.start, me,
                      st.loc_cache, dest)
        first = dest[0]
        if (dest == first).all():  # one destination: no partition, no copies
            self._part(req, int(first), keys, values, gpos, copy)
            return
        order = np.empty(len(keys), np.int64)  # (n,) positions grouped by destination
        counts = np.empty(nodes + 1, np.int64)
        kernels.partition(dest, nodes + 1, order, counts)
        start = 0
        for d in range(nodes + 1):
            stop = start + int(counts[d])
            if stop > start:
                idx = order[start:stop]
                pk, pv = self._take(keys, values, order, start, stop)
                self._part(req, d, pk, pv, idx if gpos is None else gpos[idx], False)
            start = stop

    def _part(self, req, dest, keys, values, gpos, copy) -> None:
        me = self._node.rank
        if dest == me:
            miss = self._local(req.kind, keys, values, req.out, gpos)
            served = len(keys) - len(miss)
            self._state.local_keys += served
            if served:
                self._node.tracker.on_reply(req.rid, served)
            if not len(miss):
                return
            # moved away meanwhile: our own server routes them on
            keys, values = keys[miss], None if values is None else values[miss]
            gpos = miss if gpos is None else gpos[miss]
            copy = False
        elif dest == self._node.num_nodes:
            dest = me  # on their way here: our server queues them until they land
        req.parts.append((gpos, keys if self._state.loc_cache.size else None))
        header = Header(req.kind, cluster=self._node.cluster, sender=me, origin=me, table=self.spec.table_id,
                        request_id=req.rid, part=len(req.parts) - 1, n_keys=len(keys), dim=self.dim,
                        key_dtype=_KEY_CODE)
        frames = [None, keys]
        if values is not None:
            header.dtype = dtype_code(values.dtype)
            frames.append(values)
        frames[0] = header.pack()
        self._state.remote_keys += len(keys)
        self._node.tracker.sent_to(req.rid, dest)
        self._node.send(dest, frames, copy=copy)

    @staticmethod
    def _take(keys, values, order, s, e):
        pk = np.empty(e - s, np.int64)  # (m,) this part's keys, in request order
        kernels.take_keys(keys, order, s, e, 0, pk)
        pv = None
        if values is not None:
            pv = np.empty((e - s, values.shape[1]), values.dtype)  # (m, dim) this part's rows
            kernels.take_rows(values, order, s, e, pv)
        return pk, pv

    def _replica(self, kind, keys, values, out, pos) -> None:
        replicas = self._state.shard.replicas
        if kind == Kind.PULL:
            replicas.pull(keys, out, pos)
        elif kind == Kind.PUSH:
            replicas.push(keys, values)
        else:
            replicas.set(keys, values)

    def _local(self, kind, keys, values, out, pos) -> np.ndarray:
        """Serve the keys this node owns; returns the indices of those it does not."""
        shard = self._state.shard
        if kind == Kind.PULL:
            return shard.pull(keys, out, pos)
        if kind == Kind.PUSH:
            return shard.push(keys, values)
        return shard.set(keys, values)

    def _desc(self, kind: Kind) -> str:
        return f"{kind.name.lower()} on table {self.name!r} by node {self._node.rank}"

    def __repr__(self) -> str:
        return f"<Table {self.name!r} {self.spec.describe()} on node {self._node.rank}>"


class _Request:
    """One pull/push/set in flight: its parts, and how a reply lands in the caller's `out`."""

    __slots__ = ("table", "kind", "out", "rid", "parts")

    def __init__(self, table: Table, kind: Kind, out) -> None:
        self.table = table
        self.kind = kind
        self.out = out  # (n, dim) the caller's result for pulls
        self.rid = 0
        self.parts: list[tuple] = []  # part -> (positions in out or None: all in order, keys or None)

    def on_part(self, sender: int, payload) -> None:
        """pskv-server thread: write a reply into `out`, and learn where its keys live."""
        if payload is None:  # served locally, nothing to write
            return
        header, p = payload
        if header.part >= len(self.parts):
            raise ProtocolError(f"node {sender} answered part {header.part} of a request with {len(self.parts)} parts")
        gpos, keys = self.parts[header.part]
        if p.positions is not None:
            gpos = p.positions if gpos is None else gpos[p.positions]
            if keys is not None:
                keys = keys[p.positions]
        if keys is not None:
            self.table._state.loc_cache[keys] = sender
        if self.kind != Kind.PULL:
            return
        t = self.table
        n = header.n_keys
        if p.values is None or p.values.shape != (n, t.dim) or p.values.dtype != t.dtype:
            got = None if p.values is None else f"{p.values.shape} {p.values.dtype}"
            raise ProtocolError(f"node {sender} answered a pull on table {t.name!r} with {got}, expected "
                                f"({n}, {t.dim}) {t.dtype}; are all nodes running the same pskv?")
        if gpos is None:
            if n != len(self.out):
                raise ProtocolError(f"node {sender} answered {n} of {len(self.out)} keys without positions")
            np.copyto(self.out, p.values)
        else:
            if len(gpos) and (gpos.min() < 0 or gpos.max() >= len(self.out)):
                raise ProtocolError(f"node {sender} answered positions outside the request")
            kernels.put_rows(self.out, gpos, p.values)


class Worker:
    """A worker thread's view of the cluster. Made by `node.run()` or `node.worker()`."""

    def __init__(self, node: "Node", thread: int) -> None:
        self._node = node
        self.rank = node.rank
        self.num_nodes = node.num_nodes
        self.thread = thread
        self._tables: dict[str, Table] = {}
        self._pending: list[Future] = []  # outstanding futures for wait_all(); pruned as it grows
        self._updates: list[Future] = []  # pushes/sets since the last clock(), stamped with the current clock
        self._lock = threading.Lock()  # guards _pending and _updates
        self._closed = False

    def table(self, name: str) -> Table:
        """This worker's handle on table `name`. Raises UnknownTable."""
        handle = self._tables.get(name)
        if handle is None:
            handle = self._tables[name] = Table(self, self._node._table_state(name))
        return handle

    @property
    def current_clock(self) -> int:
        """This worker's clock: how many times it called clock() (updates it issues now are stamped with it)."""
        return self._node.clocks.clock_of(self)

    def clock(self) -> int:
        """End this worker's current clock (Bösen's Clock); never blocks. Returns the new clock.

        Under BSP/SSP, a later pull by any worker at clock c waits until every worker's updates
        stamped <= c - s - 1 are applied; buffered updates are sent once every worker of this
        node has ended the clock. Raises ConsistencyError on the main thread's worker (use
        node.run() or node.worker())."""
        self._node._check()
        with self._lock:
            updates, self._updates = self._updates, []
        return self._node.clocks.tick(self, [f for f in updates if not f.done()])

    def wait_all(self, timeout: float | None = None) -> None:
        """Block until every request this worker issued so far completed; raises the first error.

        Buffered updates of BSP/SSP tables are sent first."""
        self._node._flush_buffers()
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

    def wait_replica_sync(self, timeout: float | None = None) -> None:
        """Send this node's unsent changes of replicated keys now, and block until every node has
        applied every change this node made so far (to all replicated tables)."""
        self._node._check()
        self._node._replica_sync.flush(timeout)

    def close(self) -> None:
        """Leave the node's barriers and clocks (node.run() does this when the worker function returns)."""
        if not self._closed:
            self._closed = True
            self._node._local_barrier.leave(self)
            for state in list(self._node._tables.values()):  # aggregate="node": rounds stop waiting for it
                if state is not None and state.aggregator is not None:
                    state.aggregator.leave(self)
            with self._lock:
                updates, self._updates = self._updates, []
            self._node.clocks.close(self, [f for f in updates if not f.done()])

    def _update(self, fut: Future) -> Future:
        """Remember a push/set for clock(): the node's clock waits until it is applied."""
        if not fut.done():
            with self._lock:
                if self._updates and self._updates[-1] is fut:  # pushes into one buffer share its Future
                    return fut
                self._updates.append(fut)
                if len(self._updates) >= 4096:
                    self._updates = [f for f in self._updates if not f.done()]
        return fut

    def _track(self, fut: Future) -> None:
        with self._lock:
            if self._pending and self._pending[-1] is fut:  # pushes into one buffer share its Future
                return
            self._pending.append(fut)
            if len(self._pending) >= 4096:
                # keep failures: wait_all() must still raise them
                self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]

    def __repr__(self) -> str:
        return f"<Worker node={self.rank}/{self.num_nodes} thread={self.thread}>"
