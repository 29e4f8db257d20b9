"""SparseShard (a sparse table's rows in a hash map) and sparse tables on a 1-node cluster:
exact values against a dict, growth, ranges, and the errors for what sparse tables do not do."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv import updaters
from pskv.placement.ranges import SparseRanges
from pskv.store.sparse import SparseShard
from pskv.store.spec import SPARSE_ROWS, Constant, TableSpec, check_keys

pytestmark = pytest.mark.timeout(60)


def _shard(updater="add", init=Constant(0.5), dim=2) -> SparseShard:
    spec = TableSpec("w", SPARSE_ROWS, dim, np.dtype(np.float64), updaters.get(updater), init, key_space="uint64")
    return SparseShard(spec, 0)


def test_pushes_sum_like_a_dict_through_rehashes():
    shard, expected, rng = _shard(), {}, np.random.default_rng(3)
    for step in range(40):  # grows from 1,024 buckets past 2**14: several rehashes and row-array growths
        keys = rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)
        keys[:50] = rng.integers(0, 100, 50).astype(np.uint64)  # repeats across steps and within one
        vals = rng.integers(-5, 6, (300, 2)).astype(np.float64)
        shard.push(keys.view(np.int64), vals)
        for k, v in zip(keys.tolist(), vals):
            expected[k] = expected.get(k, 0.5) + v
    keys = np.array(list(expected), np.uint64)
    out = np.empty((len(keys), 2))
    shard.pull(keys.view(np.int64), out)
    assert np.array_equal(out, np.array([expected[k] for k in keys.tolist()]))
    assert len(shard) == len(expected)
    scanned, rows = shard.scan(0, 1 << 64)
    assert np.array_equal(scanned, np.sort(keys)) and np.array_equal(rows[0], expected[int(scanned[0])])


def test_pull_of_unwritten_keys_gives_init_and_creates_nothing():
    shard = _shard(init=Constant(2.0))
    out = np.zeros((3, 2))
    shard.pull(np.array([7, 2**62, 1], np.uint64).view(np.int64), out, np.array([2, 0, 1]))
    assert (out == 2.0).all() and len(shard) == 0


def test_stateful_updater_starts_fresh_state_per_new_key():
    shard = _shard("adagrad", init=pskv.Zeros(), dim=1)
    key = np.array([2**64 - 1], np.uint64).view(np.int64)
    shard.push(key, np.array([[2.0]]))
    ref = updaters.get("adagrad")
    data, state = np.zeros((1, 1)), np.zeros((1, 1))
    ref.init_state(state)
    ref.apply(data, state, np.array([0]), np.array([[2.0]]))
    out = np.empty((1, 1))
    shard.pull(key, out)
    assert out[0, 0] == data[0, 0]


def test_scan_bounds_are_unsigned_and_half_open():
    shard = _shard()
    keys = np.array([0, 5, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)
    shard.set(keys.view(np.int64), np.arange(10.0).reshape(5, 2))
    assert shard.scan(5, 2**63)[0].tolist() == [5, 2**63 - 1]
    assert shard.scan(2**63, 2**64)[0].tolist() == [2**63, 2**64 - 1]


def test_sparse_ranges_split_the_uint64_space():
    ranges = SparseRanges(3)
    keys = np.array([0, 2**64 // 3 - 1, 2**64 // 3, 2**64 - 1], np.uint64).view(np.int64)
    assert ranges.manager_of(keys).tolist() == [0, 0, 1, 2]
    assert ranges.one_range(keys[:2]) == 0 and ranges.one_range(keys) == -1
    assert ranges.ranges_within(0, 2**64)[-1] == (2, 2 * 2**64 // 3, 2**64)


def test_check_keys_of_a_sparse_table():
    spec = TableSpec("w", SPARSE_ROWS, 1, np.dtype(np.float32), updaters.get("add"), Constant(0.0), key_space="uint64")
    assert check_keys(spec, np.array([2**64 - 1], np.uint64), "pull").view(np.uint64)[0] == 2**64 - 1
    with pytest.raises(pskv.KeyOutOfRange, match="negative"):
        check_keys(spec, np.array([-1]), "pull")


def test_sparse_table_options_it_cannot_take_raise(node):
    with pytest.raises(pskv.ConfigError, match="sparse tables keep each key at its range's node"):
        node.table("a", rows=None, key_space="uint64", replicate=pskv.Replicate(keys=[1]))
    assert node.table("s", rows=None, key_space="uint64", consistency=pskv.SSP(1)).pull(np.array([1])).sum() == 0
    with pytest.raises(pskv.ConfigError, match="drop"):
        node.table("b", rows=None, key_space="uint64", placement=pskv.Relocate(location_caches=True))
    with pytest.raises(pskv.ShapeError, match="rows=None"):
        node.table("c", rows=10, key_space="uint64")
    with pytest.raises(pskv.ShapeError, match="key_space='uint64'"):
        node.table("d", rows=None)
    with pytest.raises(pskv.ConfigError, match="init"):
        node.table("e", rows=None, key_space="uint64", init=pskv.Normal(1.0))
    t = node.table("f", rows=None, key_space="uint64")
    with pytest.raises(pskv.TableError, match="localize"):
        t.localize([1])


def test_range_ops_on_a_dense_table(node):
    t = node.table("g", rows=10, dim=1)
    t.push_range(2, 5, np.ones((3, 1))).wait()
    keys, rows = t.pull_range(0, 6)
    assert keys.tolist() == list(range(6)) and rows[:, 0].tolist() == [0, 0, 1, 1, 1, 0]
    with pytest.raises(pskv.KeyOutOfRange):
        t.pull_range(5, 11)
    assert t.push_pull([3, 3], np.ones((2, 1))).wait()[:, 0].tolist() == [3.0, 3.0]
