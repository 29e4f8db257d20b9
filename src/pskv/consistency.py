"""Consistency models (BSP, SSP, Async), worker clocks, the node's row cache and push buffer.

After Petuum Bösen (ATC'14): every worker thread counts its clocks (`worker.clock()`); an
update issued between its c-th and (c+1)-th `clock()` is *stamped* c. A table's model is a
staleness s: a pull by a worker at clock c returns rows that include every update of every
worker stamped <= c - s - 1 (it may include newer ones), and always the worker's own updates
(read-my-writes). BSP is s = 0, Async is s = inf (never waits).

How the guarantee is kept:

    worker.clock()      ends clock c of this worker; never blocks
    node  (Clocks)      when every open worker of the node ended clock c and every update they
                        stamped <= c was acknowledged by its owner: applied clock = c + 1,
                        reported to the coordinator (CLOCK)
    coordinator         global clock G = min over the nodes' applied clocks, broadcast on change
    pull at clock c     needs G >= c - s: served at once (from the row cache when it holds a
                        copy fetched after that point), else it blocks until G gets there

So blocking happens only in pulls, only while the slowest worker (or its unacknowledged
updates) is more than s clocks behind; a worker can be at most s + 1 clocks ahead of the
slowest one when it blocks. Remote updates of a BSP/SSP table wait in a per-table PushBuffer
(duplicates summed) until the node's clock advances, the buffer fills, or a pull has to fetch
rows from their owner; flushes and pulls of one node travel in order on one connection, which
gives read-my-writes for fetched rows, and a push also updates the cached copy (`add`) or drops
it (other updaters), which gives it for cached ones.

Threads and ownership: `Clocks` is shared by the node's worker threads (tick/close), the
pskv-server thread (acknowledgements arrive as Future callbacks; the coordinator's global
clock) and pullers (wait_for); `Clocks._cond` guards its state and is never held while a
Future callback is registered, a report sent or a buffer flushed. `RowCache._lock` and
`PushBuffer._lock` guard their arrays; PushBuffer._send_lock keeps one flush's sends in order
with the pulls that follow it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from typing import Callable

import numpy as np

from .errors import ConsistencyError, WaitTimeout
from .future import Future
from .updaters import _scatter_add

INF = 1 << 62  # "no open worker holds the clock back" (JSON-safe integer)
_WAIT_POLL = 0.2  # seconds between health checks while a pull waits for the global clock


@dataclasses.dataclass(frozen=True)
class Consistency:
    """A consistency model: the staleness s a pull may see (0: BSP, inf: Async)."""

    staleness: float = math.inf

    @property
    def spec(self) -> str:
        """The model as text: 'async', 'bsp' or 'ssp:S' (PSKV_CONSISTENCY, `--consistency`)."""
        if self.staleness == math.inf:
            return "async"
        return "bsp" if self.staleness == 0 else f"ssp:{int(self.staleness)}"

    @property
    def synchronous(self) -> bool:
        return self.staleness != math.inf

    def __repr__(self) -> str:
        if self.staleness == math.inf:
            return "Async()"
        return "BSP()" if self.staleness == 0 else f"SSP(staleness={int(self.staleness)})"


def BSP() -> Consistency:
    """Bulk synchronous: a pull at clock c sees every update stamped <= c - 1 (SSP with s = 0)."""
    return Consistency(0)


def SSP(staleness: int = 1) -> Consistency:
    """Stale synchronous parallel: a pull at clock c sees every update stamped <= c - staleness - 1."""
    if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
        raise ConsistencyError(f"SSP staleness must be an integer >= 0, got {staleness!r}")
    return Consistency(int(staleness))


def Async() -> Consistency:
    """No clock bound: pulls never wait (the default)."""
    return Consistency(math.inf)


def as_consistency(value) -> Consistency:
    """A Consistency from itself, None (Async) or text: 'async', 'bsp', 'ssp:3', 'ssp(3)'."""
    if value is None:
        return Async()
    if isinstance(value, Consistency):
        return value
    text = str(value).strip().lower()
    if text in ("async", "asp"):
        return Async()
    if text == "bsp":
        return BSP()
    m = re.fullmatch(r"ssp[:(=]?\s*(\d+)\)?", text)
    if m:
        return SSP(int(m.group(1)))
    raise ConsistencyError(f"unknown consistency {value!r}; use pskv.BSP(), pskv.SSP(staleness=s), pskv.Async() "
                           "or the text 'bsp', 'ssp:S', 'async'")


class Clocks:
    """A node's worker clocks, its applied clock, and the cluster's global clock."""

    def __init__(self, report: Callable[[int, int], None], flush: Callable[[], list[Future]],
                 health: Callable[[], None]) -> None:
        self._report = report  # (clock, seq): sends this node's applied clock to the coordinator
        self._flush = flush  # flushes every push buffer; returns the flushes' Futures
        self._health = health  # raises if the node failed or closed
        self._cond = threading.Condition()  # guards all below; never held while calling out
        self._ended: dict[int, int] = {}  # id(worker) -> clocks it ended (open workers only)
        self._outstanding: dict[int, int] = {}  # clock c -> unacknowledged updates stamped c
        self._ever = False  # a worker registered once: with none open, the node holds nobody back
        self._node_ended = 0  # min over open workers of their ended clocks
        self._applied = 0  # every update stamped < applied is acknowledged (reported to the coordinator)
        self.global_clock = 0  # G: from the coordinator
        self._report_lock = threading.Lock()  # guards _report_seq; held while reporting
        self._report_seq = 0
        self.waits = 0  # pulls that had to wait for G
        self.wait_seconds = 0.0

    # ---- worker threads -----------------------------------------------------------------------
    def register(self, worker) -> None:
        with self._cond:
            self._ever = True
            self._ended[id(worker)] = 0
            self._node_ended = min(self._ended.values())
        self._advance()  # a new worker at clock 0 holds the others back again

    @property
    def started(self) -> bool:
        """A worker registered here before (so clocks restart at 0 with the next ones)."""
        return self._ever

    def clock_of(self, worker) -> int:
        return self._ended.get(id(worker), 0)

    def tick(self, worker, updates: list[Future]) -> int:
        """End the worker's current clock; `updates` are its updates stamped with it. Returns the new clock."""
        with self._cond:
            key = id(worker)
            if key not in self._ended:
                raise ConsistencyError(f"{worker!r} does not take part in clocks; call clock() from threads "
                                       "started by node.run() or made with node.worker()")
            stamp = self._ended[key]
            self._ended[key] = stamp + 1
            self._outstanding[stamp] = self._outstanding.get(stamp, 0) + len(updates)
            advanced = self._recompute()
        self._watch(stamp, updates)
        self._after(advanced)
        return stamp + 1

    def close(self, worker, updates: list[Future]) -> None:
        """The worker leaves: it no longer holds the node's clock back once `updates` are acknowledged."""
        with self._cond:
            stamp = self._ended.pop(id(worker), None)
            if stamp is None:
                return
            self._outstanding[stamp] = self._outstanding.get(stamp, 0) + len(updates)
            advanced = self._recompute()
        self._watch(stamp, updates)
        self._after(advanced)

    def wait_for(self, needed: int, timeout: float | None = None) -> None:
        """Block until the global clock reaches `needed` (every update stamped < needed is applied)."""
        if self.global_clock >= needed:
            return
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        with self._cond:
            while self.global_clock < needed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeout(f"pull waited {timeout} s for the global clock to reach {needed} "
                                       f"(it is {self.global_clock}): a worker is more than the staleness behind")
                self._cond.release()
                try:
                    self._health()
                finally:
                    self._cond.acquire()
                self._cond.wait(_WAIT_POLL if left is None else min(_WAIT_POLL, left))
            self.waits += 1
            self.wait_seconds += time.monotonic() - start

    # ---- pskv-server thread (coordinator) ------------------------------------------------------
    def on_global(self, clock: int) -> None:
        with self._cond:
            self.global_clock = int(clock)
            self._cond.notify_all()

    # ---- internals ----------------------------------------------------------------------------
    def _recompute(self) -> int | None:
        """Under _cond: update node_ended. If it advanced, hold the old value's clock (so nothing
        counts as applied before the buffers are flushed) and return it; else None."""
        new = min(self._ended.values()) if self._ended else (INF if self._ever else 0)
        old, self._node_ended = self._node_ended, new
        if new > old:
            self._outstanding[old] = self._outstanding.get(old, 0) + 1
            return old
        return None

    def _after(self, held: int | None) -> None:
        if held is not None:  # flush what the node's workers buffered, then release the hold
            flushes = self._flush()
            with self._cond:
                self._outstanding[held] += len(flushes) - 1
            self._watch(held, flushes)
        self._advance()

    def _watch(self, stamp: int, futures: list[Future]) -> None:
        for fut in futures:
            fut.add_done_callback(lambda f, c=stamp: self._acked(c))

    def _acked(self, stamp: int) -> None:
        with self._cond:
            self._outstanding[stamp] -= 1
        self._advance()

    def _advance(self) -> None:
        with self._cond:
            for c in [c for c, n in self._outstanding.items() if n <= 0]:
                del self._outstanding[c]
            applied = min(self._node_ended, min(self._outstanding, default=INF))
            if applied == self._applied:
                return
            self._applied = applied
        with self._report_lock:  # each report carries the latest value and a sequence number:
            self._report_seq += 1  # threads send on sockets of their own, so reports may overtake
            self._report(self._applied, self._report_seq)

    def __repr__(self) -> str:
        return f"<Clocks node={self._node_ended} applied={self._applied} global={self.global_clock}>"


class RowCache:
    """A node's bounded cache of rows it does not own, each tagged with the global clock it is fresh to.

    `fresh[slot] = g` means the copy includes every update stamped < g (it was fetched after
    the global clock reached g) and every later push made through this node.

    Read-my-writes under threads: a push writes the cache and enters the PushBuffer as one step
    under `ordering`, and a pull reads `sequence()` (under `ordering`) before it flushes the buffer.
    So a push written before that point is in the flush the pull waits for, and one written after
    it marks its keys, whose fetched rows `insert` then skips. A set `hold`s its keys (no copy is
    kept) until the owner applied it, and `release` marks them again for fetches that overlapped."""

    def __init__(self, rows: int, dim: int, dtype, capacity: int, *, additive: bool) -> None:
        self.capacity = int(capacity)
        self._additive = additive  # add: a push adds to the copy; other updaters: the copy is dropped
        self._slot = np.full(rows, -1, np.int64)  # (rows,) key -> cache slot, -1 absent
        self._key = np.full(self.capacity, -1, np.int64)  # (capacity,) slot -> key
        self._fresh = np.zeros(self.capacity, np.int64)  # (capacity,) global clock the copy is fresh to
        self._values = np.empty((self.capacity, dim), dtype)  # (capacity, dim) the copies
        self._touched = np.zeros(rows, np.int64)  # (rows,) write sequence of the last push through here
        self._held = np.zeros(rows, np.int64)  # (rows,) sets in flight per key: no copy is kept meanwhile
        self._seq = 0
        self._lock = threading.Lock()  # guards all arrays above
        self.ordering = threading.Lock()  # held around write + buffer add, and by sequence(); taken before _lock
        self.hits = self.misses = self.evictions = 0

    def lookup(self, keys: np.ndarray, needed: int, out: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """Copy rows fresh to >= needed into out (at pos); return the indices into keys that missed."""
        with self._lock:
            slots = self._slot[keys]
            hit = slots >= 0
            hit[hit] = self._fresh[slots[hit]] >= needed
            idx = np.flatnonzero(hit)
            if len(idx):
                rows = self._values[slots[idx]]  # (h, dim) a copy
                if pos is None:
                    out[idx] = rows
                else:
                    out[pos[idx]] = rows
        self.hits += len(idx)
        self.misses += len(keys) - len(idx)
        return np.flatnonzero(~hit)

    def sequence(self) -> int:
        with self.ordering:
            return self._seq

    def hold(self, keys: np.ndarray) -> None:
        """A set of `keys` is on its way: drop their copies and keep none until release()."""
        with self._lock:
            np.add.at(self._held, keys, 1)
        self.write(keys, None)

    def release(self, keys: np.ndarray) -> None:
        """The set was applied (or failed): copies may be kept again, from fetches that start now."""
        with self._lock:
            np.add.at(self._held, keys, -1)
        self.write(keys, None)

    def insert(self, keys: np.ndarray, rows: np.ndarray, fresh: int, since: int) -> None:
        """Keep copies of `rows` (fetched after the global clock reached `fresh`); keys pushed
        through this node after write sequence `since` are skipped (their reply predates the push)."""
        if not self.capacity or not len(keys):
            return
        with self._lock:
            keep = (self._touched[keys] <= since) & (self._held[keys] == 0)
            keys, rows = keys[keep], rows[keep]
            keys, first = np.unique(keys, return_index=True)
            rows = rows[first]
            if len(keys) > self.capacity:
                keys, rows = keys[:self.capacity], rows[:self.capacity]
            slots = self._slot[keys]
            new = slots < 0
            n_new = int(new.sum())
            if n_new:  # never evict a slot this insert refreshes: it would serve two keys
                slots[new] = self._free_slots(n_new, protect=slots[~new])
                self._slot[keys[new]] = slots[new]
                self._key[slots[new]] = keys[new]
            self._values[slots] = rows
            self._fresh[slots] = fresh

    def write(self, keys: np.ndarray, updates: np.ndarray | None) -> None:
        """A push through this node: add it to the copies (add updater) or drop them (others, and
        `updates=None`: a set)."""
        with self._lock:
            self._seq += 1
            self._touched[keys] = self._seq
            slots = self._slot[keys]
            at = np.flatnonzero(slots >= 0)
            if not len(at):
                return
            if self._additive and updates is not None:
                _scatter_add(self._values, slots[at], np.ascontiguousarray(updates[at], self._values.dtype), self._values.dtype.type(1))
            else:
                self._drop(slots[at])

    def clear(self) -> None:
        with self._lock:
            self._drop(np.flatnonzero(self._key >= 0))

    def __len__(self) -> int:
        return int((self._key >= 0).sum())

    def _free_slots(self, n: int, protect: np.ndarray) -> np.ndarray:
        """n free slots, evicting the stalest copies (never those in `protect`) if needed."""
        free = np.flatnonzero(self._key < 0)
        if len(free) < n:  # evict the stalest copies
            used = np.flatnonzero(self._key >= 0)
            used = used[~np.isin(used, protect)]
            victims = used[np.argsort(self._fresh[used], kind="stable")[:n - len(free)]]
            self._drop(victims)
            self.evictions += len(victims)
            free = np.flatnonzero(self._key < 0)
        return free[:n]

    def _drop(self, slots: np.ndarray) -> None:
        slots = np.unique(slots)
        self._slot[self._key[slots]] = -1
        self._key[slots] = -1

    def __repr__(self) -> str:
        return f"<RowCache {len(self)}/{self.capacity} rows hits={self.hits} misses={self.misses}>"


class PushBuffer:
    """A node's pending remote updates of one table, duplicates summed, sent as one push per flush.

    Every push into the buffer gets the Future of the flush that will carry it."""

    def __init__(self, dim: int, dtype, capacity: int, send: Callable[[np.ndarray, np.ndarray], Future]) -> None:
        self.capacity = int(capacity)  # rows buffered before a flush is forced
        self._dim, self._dtype = dim, np.dtype(dtype)
        self._send = send  # (keys, values) -> Future of a real push
        self._keys: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._rows = 0
        self._future: Future | None = None  # resolves when the current contents are applied
        self._lock = threading.Lock()  # guards the lists, _rows and _future
        self._send_lock = threading.Lock()  # one flush sends at a time, so later pulls follow its pushes
        self._inflight: list[tuple[int, Future]] = []  # (sending thread, flush) not yet applied
        self._after: list[Future] = []  # sets in flight: later flushes wait for them (see order_after)
        self.flushes = 0
        self.rows_in = 0  # rows pushed into the buffer
        self.rows_out = 0  # rows sent after summing duplicates

    def add(self, keys: np.ndarray, values: np.ndarray) -> Future:
        """Buffer a copy of the update; returns the Future of its flush (flushing now if full)."""
        # a copy: the caller may reuse its arrays at once (push's copy=True contract)
        with self._lock:
            self._keys.append(np.array(keys, np.int64))
            self._values.append(np.array(values, self._dtype))
            self._rows += len(keys)
            self.rows_in += len(keys)
            if self._future is None:
                self._future = Future("buffered push")
            fut, full = self._future, self._rows >= self.capacity
        if full:
            self.flush()
        return fut

    def order_after(self, fut: Future) -> None:
        """Send no later flush before `fut` (a set sent straight from a thread's socket) resolved:
        another thread's flush travels on another socket and could overtake the set, which would
        then overwrite the pushes made after it."""
        with self._lock:
            self._after = [f for f in self._after if not f.done()] + [fut]

    def flush(self) -> Future | None:
        """Send everything buffered as one push (per owner). Returns its Future, or None if empty.
        Blocks while a set this buffer must follow (order_after) is in flight."""
        with self._send_lock:
            with self._lock:
                after = [f for f in self._after if not f.done()]
            for f in after:
                try:
                    f.wait()
                except Exception:  # noqa: BLE001 - a failed set is the set's caller's error; order is all we need
                    pass
            with self._lock:
                if not self._rows:
                    return None
                keys, values, fut = self._keys, self._values, self._future
                self._keys, self._values, self._rows, self._future = [], [], 0, None
            keys = np.concatenate(keys) if len(keys) > 1 else keys[0]  # (n,)
            values = np.concatenate(values) if len(values) > 1 else values[0]  # (n, dim)
            uniq, inverse = np.unique(keys, return_inverse=True)
            if len(uniq) < len(keys):
                summed = np.zeros((len(uniq), self._dim), self._dtype)  # (m, dim) duplicates summed
                _scatter_add(summed, inverse.astype(np.int64), np.ascontiguousarray(values), summed.dtype.type(1))
                keys, values = uniq, summed
            self.flushes += 1
            self.rows_out += len(keys)
            try:
                sent = self._send(keys, values)
            except BaseException as exc:
                fut._resolve(None, exc)
                raise
            with self._lock:
                self._inflight = [(t, f) for t, f in self._inflight if not f.done()]
                self._inflight.append((threading.get_ident(), fut))
        sent.add_done_callback(lambda f: fut._resolve(None, f.exception()))
        return fut

    def flush_before_pull(self, timeout: float | None = None) -> None:
        """Make this thread's next pull see every update buffered so far: flush, and wait for
        flushes that other threads sent (their sockets do not keep order with ours)."""
        self.flush()
        me = threading.get_ident()
        with self._lock:
            others = [f for t, f in self._inflight if t != me and not f.done()]
        for f in others:
            f.wait(timeout)

    def __repr__(self) -> str:
        return f"<PushBuffer rows={self._rows}/{self.capacity} flushes={self.flushes}>"
