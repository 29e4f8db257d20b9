"""The lr app's weight-table keys (pskv.apps.lr_model): the distinct training features as dense row
ids (`Dense`), the hashed uint64 keys as they are (`Hashed`), and the blocks of both."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.apps import lr_model
from pskv.apps.lr_model import BIAS_KEY, Dense, Hashed, Local
from pskv.data.sparse import SparseData

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("n, distinct", [(0, 1), (1, 1), (5000, 7), (200_000, 150_000), (100_000, 10**12)])
def test_distinct_is_numpys_unique(n, distinct):
    """The hash set's sorted keys are np.unique's, across its growth, with 0 and 2**64 - 1 among them."""
    rng = np.random.default_rng(n)
    keys = rng.integers(0, distinct, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    if n:
        keys[: min(n, 3)] = [0, 2**64 - 1, 0][: min(n, 3)]
    got = lr_model.distinct(keys)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, np.unique(keys))


def _data(keys_per_row: list[list[int]]) -> SparseData:
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in keys_per_row])]).astype(np.int64)
    keys = np.array([k for r in keys_per_row for k in r], np.uint64)
    return SparseData(np.zeros(len(keys_per_row), np.float32), indptr, keys, None)


def test_dense_ids_are_ranks_in_key_order_with_the_bias():
    data = _data([[2**63 + 5, 7], [7, 2**64 - 1, 3], [3]])
    space = Dense.of(data)
    assert space.keys.tolist() == [3, 7, 2**63 + 5, BIAS_KEY, 2**64 - 1]
    assert space.rows == 5 and space.declare == {"rows": 5} and space.whole() == (0, 5)
    ids, found = space.ids(np.array([7, BIAS_KEY, 2**64 - 1, 3], np.uint64))
    assert ids.tolist() == [1, 3, 4, 0] and found is None
    ids, found = space.ids(np.array([4, 3, 2**64 - 2, 0, 2**64 - 1], np.uint64))  # (2**64 - 2: past the last id)
    assert found.tolist() == [False, True, False, False, True] and ids[found].tolist() == [0, 4]
    assert space.features(np.array([4, 0, 2])).tolist() == [2**64 - 1, 3, 2**63 + 5]
    assert [space.local(None, r, 2) for r in range(2)] == [(0, 2), (2, 5)]
    assert [space.local(None, r, 3) for r in range(3)] == [(0, 1), (1, 3), (3, 5)]


@pytest.mark.parametrize("blocks", [1, 2, 5, 32])
def test_blocks_cut_the_dense_ids_as_the_workers_cut_their_features(blocks):
    """Block b's ids are the features a worker puts in block b (Local.block_of), for any count of
    blocks (5: the width is rounded up, the last block is shorter); Hashed's blocks are the uint64
    ranges themselves and end at 2**64."""
    rng = np.random.default_rng(blocks)
    data = _data([[*rng.integers(0, 2**64, 6, dtype=np.uint64).tolist(), b * (2**64 // 5)] for b in range(5)])
    space, local = Dense.of(data), Local(data)
    cuts = [space.block(blocks, b) for b in range(blocks)]
    assert cuts[0][0] == 0 and cuts[-1][1] == space.rows
    assert all(cuts[b][1] == cuts[b + 1][0] for b in range(blocks - 1))
    of = local.block_of(blocks)
    for b, (lo, hi) in enumerate(cuts):
        ids, found = space.ids(local.keys[of == b])
        assert found is None and sorted(ids.tolist()) == list(range(lo, hi))
    hashed = [Hashed().block(blocks, b) for b in range(blocks)]
    assert hashed[0][0] == 0 and hashed[-1][1] == 2**64
    assert all(hashed[b][1] == hashed[b + 1][0] for b in range(blocks - 1))
    for b, (lo, hi) in enumerate(hashed):
        assert all(lo <= int(k) < hi for k in local.keys[of == b])


def test_hashed_keys_are_the_features():
    space = Hashed()
    keys = np.array([5, 2**64 - 1], np.uint64)
    ids, found = space.ids(keys)
    assert ids is keys and found is None
    assert space.rows is None and space.declare == {"rows": None, "key_space": "uint64"}
    assert space.whole() == (0, 2**64) and space.features(ids).tolist() == [5, 2**64 - 1]
