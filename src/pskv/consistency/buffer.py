"""PushBuffer: a node's pending remote updates of a BSP/SSP table (see consistency.models)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ..net.future import Future
from ..updaters.rule_kernels import scatter_add


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
                key_parts, value_parts, fut = self._keys, self._values, self._future
                self._keys, self._values, self._rows, self._future = [], [], 0, None
            assert fut is not None  # (made with the first buffered row)
            keys = np.concatenate(key_parts) if len(key_parts) > 1 else key_parts[0]  # (n,)
            values = np.concatenate(value_parts) if len(value_parts) > 1 else value_parts[0]  # (n, dim)
            uniq, inverse = np.unique(keys, return_inverse=True)
            if len(uniq) < len(keys):
                summed = np.zeros((len(uniq), self._dim), self._dtype)  # (m, dim) duplicates summed
                scatter_add(summed, inverse.astype(np.int64), np.ascontiguousarray(values), summed.dtype.type(1))
                keys, values = uniq, summed
            self.flushes += 1
            self.rows_out += len(keys)
            try:
                sent = self._send(keys, values)
            except BaseException as exc:
                fut.resolve(None, exc)
                raise
            with self._lock:
                self._inflight = [(t, f) for t, f in self._inflight if not f.done()]
                self._inflight.append((threading.get_ident(), fut))
        sent.add_done_callback(lambda f: fut.resolve(None, f.exception()))
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
