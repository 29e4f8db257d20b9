"""A sparse shard handing its key ranges on (a leave without backups: SparseShard.give / insert / away,
server.handoff)."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv import updaters
from pskv.net.wire import Kind
from pskv.placement.ranges import SparseRanges
from pskv.server import handoff
from pskv.store.sparse import SparseShard
from pskv.store.spec import SPARSE_ROWS, Constant, TableSpec

HALF = 1 << 63


def _shard(rank: int) -> SparseShard:
    spec = TableSpec("w", SPARSE_ROWS, 2, np.dtype(np.float32), updaters.get(pskv.Adagrad(lr=0.5)), Constant(1.0),
                     key_space="uint64")
    return SparseShard(spec, rank)


def _written(n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    keys = np.random.default_rng(0).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    keys[:3] = [HALF - 1, HALF, 2**64 - 1]  # (the border and the last key)
    return keys.view(np.int64), np.ones((n, 2), np.float32)


def test_give_takes_every_key_of_a_range_with_rows_and_state_and_misses_them_after():
    """The given range's keys leave with rows and state; the rest stay; later ops return them as missed."""
    a, b = _shard(0), _shard(1)
    keys, ones = _written()
    a.push(keys, ones)
    before = a.snapshot()
    (given,) = a.give([(HALF, 1 << 64, 1)])
    upper = keys.view(np.uint64) >= np.uint64(HALF)
    assert len(given[0]) == len(np.unique(keys[upper])) and len(a) == len(np.unique(keys[~upper]))
    b.insert(*given)
    inside = before[0] >= np.uint64(HALF)
    for got, want in zip(b.snapshot(), before):
        assert np.array_equal(got, want[inside])
    for got, want in zip(a.snapshot(), before):
        assert np.array_equal(got, want[~inside])
    assert np.array_equal(a.push(keys, ones), np.flatnonzero(upper))
    out = np.zeros((len(keys), 2), np.float32)
    assert np.array_equal(a.push_pull(keys, ones, out), np.flatnonzero(upper))
    assert (out[upper] == 0).all() and (out[~upper] != 0).all()
    assert np.array_equal(a.away(keys), np.where(upper, 1, -1))
    with pytest.raises(pskv.ProtocolError, match="holds already"):
        b.insert(*given)


def test_handoff_gives_each_managed_range_whole_to_its_new_manager():
    """One HANDOFF per range the leaver manages (part = range + 1), to the plan's node; empty ranges count one."""
    shard = _shard(1)
    keys, ones = _written()
    upper = keys.view(np.uint64) >= np.uint64(HALF)
    shard.push(keys[upper], ones[upper])
    ranges = SparseRanges(3, managers=[0, 1, 1], nodes=3)  # node 1 manages ranges 1 and 2 (2 was node 2's)
    messages = handoff.give(shard, ranges, 1, [0, 2, 0])
    assert [(m[0], m[1], m[2]) for m in messages] == [(2, Kind.HANDOFF, 2), (0, Kind.HANDOFF, 3)]
    assert sum(len(m[3]) for m in messages) == len(np.unique(keys[upper])) and len(shard) == 0
    for dest, _, part, got, rows, state, count in messages:
        lo, hi = ranges.range_bounds(part - 1)
        u = got.view(np.uint64)
        assert ((u >= np.uint64(lo)) & (u <= np.uint64(hi - 1))).all() and count == max(len(got), 1)
        assert rows.shape == (len(got), 2) and state.shape == (len(got), shard.width)
