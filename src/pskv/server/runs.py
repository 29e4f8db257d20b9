"""Runs of plain requests, served in one step: `Runs`, the base class of server.serve's `Server`.

Runs (issue 31): the dispatcher hands a burst's consecutive server messages over in one call
(`handle_many`). A run of plain requests (`wire.plain`) of one table and kind is served in one
step: its key frames joined into one array, checked once, one shard operation (its kernels
release the GIL once per run, not per message), then each message answered as alone (its
positions; keys not owned here go on per message, as in `_serve`). Pushes join only under an
updater whose concatenated apply equals the one-by-one applies (`Updater.in_order`), sets always
(the last one wins either way); a run with anything irregular (a bad frame, keys out of range, a
foreign origin, backups for a write, a sparse table, a test hook) is handled message by message,
so errors, order and exactly-once application are those of `handle`.

Threads and ownership: pskv-server's, as all of `Server`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import _hooks, kernels
from ..errors import ProtocolError
from ..net.wire import Header, Kind, Payload, dtype_code, plain, plain_buffers
from ..placement.ranges import KeyRanges
from ..store.shard import Shard, Store
from ..store.sparse import SparseShard
from .backups import Backups


class Runs:
    """`handle_many` and what it serves a run with (the module docstring); `Server` sets the
    attributes and defines the methods it calls for a message alone."""

    _store: Store
    _ranges: Callable[[int], KeyRanges]
    backups: Backups | None
    requests: int
    runs: int

    def _handle_one(self, header: Header, frames: list) -> None:
        raise NotImplementedError  # (Server's)

    def reject(self, header: Header, exc: Exception) -> None:
        raise NotImplementedError  # (Server's)

    def reply_served(self, header, positions, miss, out, n, **fused) -> None:
        raise NotImplementedError  # (Server's)

    def pass_on(
        self, header: Header, p: Payload, keys: np.ndarray, miss: np.ndarray, shard: Shard | SparseShard
    ) -> None:
        raise NotImplementedError  # (Server's)

    def handle_many(self, items: list) -> None:
        """Consecutive messages in arrival order, (header, frames) each: runs of plain requests of one
        table and kind in one step (`_serve_run`), the rest one by one."""
        i, n = 0, len(items)
        while i < n:
            header = items[i][0]
            j = i + 1
            if plain(header) and not _hooks.points:
                while (
                    j < n
                    and items[j][0].kind == header.kind
                    and items[j][0].table == header.table
                    and plain(items[j][0])
                ):
                    j += 1
            if j - i > 1:
                self._serve_run(items[i:j])
            else:
                self._handle_one(*items[i])
            i = j

    def _serve_run(self, run: list) -> None:
        """Plain requests of one table and kind (see the module docstring): one shard operation."""
        header = run[0][0]
        kind = header.kind
        joined = self._join(run)
        if joined is None:  # irregular: one by one, as if they had come alone
            for one in run:
                self._handle_one(*one)
            return
        shard, keys, values, bounds, positions = joined
        self.requests += len(run)
        self.runs += 1
        out = None
        try:
            if kind == Kind.PULL:
                out = np.empty((len(keys), shard.spec.dim), dtype=shard.spec.dtype)  # (n, dim) replies are views
                miss = shard.pull(keys, out)
            elif kind == Kind.PUSH:
                miss = shard.push(keys, values)
            else:
                miss = shard.set(keys, values)
        except Exception as exc:  # noqa: BLE001 - answered with an ERROR each, as handle would
            for h, _ in run:
                self.reject(h, exc)
            return
        misses = np.split(miss, np.searchsorted(miss, bounds[1:-1])) if len(miss) else None
        for m, (h, _) in enumerate(run):
            a, b = bounds[m], bounds[m + 1]
            try:
                mine = kernels.NONE if misses is None else misses[m] - a  # (k,) positions in this message
                if b - a > len(mine):
                    self.reply_served(h, positions[m], mine, None if out is None else out[a:b], b - a)
                if len(mine):
                    part = Payload(keys[a:b], positions[m], None if values is None else values[a:b], None)
                    self.pass_on(h, part, keys[a:b], mine, shard)
            except Exception as exc:  # noqa: BLE001 - answered with an ERROR, never dropped
                self.reject(h, exc)

    def _join(self, run: list):
        """(shard, keys, values, bounds, positions) of a run of plain requests, the keys and values of
        all its messages in one array each (message m: [bounds[m], bounds[m + 1])); None when any of
        it is irregular (then each message goes through `handle` and gets its own answer)."""
        header = run[0][0]
        shard = self._store.get(header.table)
        if shard is None:
            return None
        spec = shard.spec
        kind = header.kind
        if spec.sparse or (
            kind != Kind.PULL and (self.backups is not None or (kind == Kind.PUSH and not spec.updater.in_order))
        ):
            return None
        ranges = self._ranges(header.table)
        code = dtype_code(spec.dtype)
        row_bytes = spec.dim * spec.dtype.itemsize
        key_bufs, value_bufs, positions, bounds = [], [], [], [0]
        try:
            for h, frames in run:
                if h.dim != spec.dim or (kind != Kind.PULL and h.dtype != code) or not ranges.is_node(h.origin):
                    return None
                k, pos, v = plain_buffers(h, frames, row_bytes)
                key_bufs.append(k)
                value_bufs.append(v)
                positions.append(None if pos is None else np.frombuffer(pos, np.int64))
                bounds.append(bounds[-1] + h.n_keys)
        except ProtocolError:
            return None
        keys = np.frombuffer(b"".join(key_bufs), np.int64)  # (n,) one copy of the run's keys
        if len(keys):
            lo, hi = kernels.key_range(keys)
            if lo < 0 or hi >= spec.rows:
                return None
        values = (
            None if kind == Kind.PULL else np.frombuffer(b"".join(value_bufs), spec.dtype).reshape(len(keys), spec.dim)
        )  # (n, dim)
        return shard, keys, values, np.asarray(bounds, np.int64), positions
