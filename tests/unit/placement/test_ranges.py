"""placement/ranges.py: manager ranges cover the keys evenly; manager_of and one_manager agree with them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pskv.placement.ranges import KeyRanges

pytestmark = pytest.mark.timeout(60)



@settings(max_examples=300, deadline=None)
@given(rows=st.integers(1, 10**7), nodes=st.integers(1, 64))
def test_ranges_bounds_cover_rows_evenly(rows, nodes):
    """Ranges start at 0, end at rows, never shrink, and their sizes differ by at most one row."""
    p = KeyRanges(rows, nodes)
    b = p.bounds
    assert len(b) == nodes + 1 and b[0] == 0 and b[-1] == rows
    sizes = np.diff(b)
    assert (sizes >= 0).all() and sizes.max() - sizes.min() <= 1
    assert [p.manager_range(r) for r in range(nodes)] == [(int(b[r]), int(b[r + 1])) for r in range(nodes)]


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 1000), nodes=st.integers(1, 16), data=st.data())
def test_ranges_manager_of_is_the_range_holding_the_key(rows, nodes, data):
    """manager_of(key) is the rank whose manager range contains key, also when some ranges are empty."""
    p = KeyRanges(rows, nodes)
    key = data.draw(st.integers(0, rows - 1))
    manager = int(p.manager_of(np.array([key]))[0])
    lo, hi = p.manager_range(manager)
    assert lo <= key < hi


def test_ranges_fewer_rows_than_nodes():
    """With 5 rows on 8 nodes, three nodes manage nothing and every row has exactly one manager."""
    p = KeyRanges(5, 8)
    sizes = np.diff(p.bounds)
    assert sizes.sum() == 5 and (sizes == 0).sum() == 3
    assert repr(p) == "<KeyRanges rows=5 ranges=8 nodes=8>"
    assert p.manager_of(np.arange(5)).tolist() == [1, 3, 4, 6, 7]  # bounds [0, 0, 1, 1, 2, 3, 3, 4, 5]


def test_one_manager_of_a_batch():
    """one_manager: the manager when a single range holds every key, else -1 (also at range edges)."""
    p = KeyRanges(30, 3)  # [0, 10), [10, 20), [20, 30)
    assert p.one_manager(np.array([12, 19, 10])) == 1
    assert p.one_manager(np.array([9, 10])) == -1
    assert p.one_manager(np.array([29])) == 2
    assert [p.is_node(r) for r in (-1, 0, 2, 3)] == [False, True, True, False]
