"""placement/route.py: next hops, forward hops and per-destination parts, on a shard with moved keys."""

from __future__ import annotations

import numpy as np
import pytest

from pskv import updaters
from pskv.errors import ProtocolError
from pskv.placement import route
from pskv.placement.ranges import KeyRanges
from pskv.store.shard import Store
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)


def _node1_of_3():
    """Node 1 manages [10, 20) of 30 keys; key 12 moved to node 2, key 25 moved here, key 15 is on its way here."""
    spec = TableSpec("t", 30, 2, np.dtype(np.float32), updaters.Add(), Zeros())
    shard = Store().add(spec, 10, 20, rank=1)
    moved, rows, state = shard.extract(np.array([12]))
    shard.owner[12] = 2
    shard.insert(np.array([25]), np.zeros((1, 2), np.float32), None)
    shard.extract(np.array([15]))
    shard.mark_incoming(np.array([15]))
    return shard, KeyRanges(30, 3)


def test_next_hops_follow_ownership_then_the_manager_map():
    shard, ranges = _node1_of_3()
    keys = np.array([11, 12, 25, 15, 3, 27])
    no_cache = np.empty(0, np.int64)
    assert route.next_hops(keys, shard, ranges, 1, no_cache).tolist() == [1, 2, 1, 3, 0, 2]
    cache = np.full(30, -1, np.int64)
    cache[3] = 2  # the location cache remembers key 3 at node 2
    assert route.next_hops(keys, shard, ranges, 1, cache).tolist() == [1, 2, 1, 3, 2, 2]


def test_forward_hops_of_keys_not_owned_here():
    shard, ranges = _node1_of_3()
    assert route.forward_hops(np.array([12, 15, 3, 27]), shard, ranges, 1).tolist() == [2, -1, 0, 2]
    shard.slot[12] = -1
    shard.owner[12] = 1  # the map says here, yet it is not here
    with pytest.raises(ProtocolError, match=r"keys \[12\].*records itself as owner"):
        route.forward_hops(np.array([12]), shard, ranges, 1)


def test_parts_group_keys_by_destination_in_request_order():
    keys = np.array([7, 3, 9, 4, 8])
    values = np.arange(10, dtype=np.float32).reshape(5, 2)
    dest = np.array([2, 0, 2, 0, 1])
    parts = [(d, pos.tolist(), k.tolist(), v[:, 0].tolist()) for d, pos, k, v in route.parts(keys, values, dest, 4)]
    assert parts == [(0, [1, 3], [3, 4], [2, 6]), (1, [4], [8], [8]), (2, [0, 2], [7, 9], [0, 4])]
    (d, pos, k, v), = route.parts(keys, None, np.full(5, 3), 4)  # one destination: the arrays themselves
    assert d == 3 and pos is None and k is keys and v is None
