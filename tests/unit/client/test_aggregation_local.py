"""pskv.aggregation without processes: level 1 on a private 1-node cluster, the level-2 Owner with a fake send.

Named test_aggregation_local (not test_aggregation) so that it does not collide with tests/cluster/test_aggregation.py:
the test directories are not packages, so pytest imports test modules by their base name."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pskv
from helpers import recording_endpoint
from pskv.server.aggregate import Owner
from pskv.errors import ProtocolError
from pskv.net.wire import Kind, unpack, unpack_header
from pskv.store.shard import Store
from pskv.store.spec import TableSpec, as_init
from pskv import updaters

pytestmark = pytest.mark.timeout(60)




def test_round_pull_returns_sum_of_all_threads(node):
    """Three threads push each round; every pull of round r returns the sums of rounds 0..r, duplicates counted once per push."""
    node.table("g", rows=8, dim=2, aggregate=pskv.NodeAggregate())
    got = {}

    def train(w):
        g = w.table("g")
        for r in range(4):
            g.push([1, 5, 5], np.full((3, 2), w.thread + 1, np.float32))  # key 5 twice in one call: summed
            got[w.thread, r] = g.pull([5, 1, 5]).copy()

    node.run(train, threads=3)
    for (t, r), v in got.items():
        assert np.array_equal(v[:, 0], [12 * (r + 1), 6 * (r + 1), 12 * (r + 1)]), (t, r, v)


def test_plain_reads_and_main_thread(node):
    """A pull of keys not pushed in the thread's round reads current rows; the main handle reads but may not
    push; set() gives initial values until a round started."""
    t = node.table("g", rows=8, dim=1, aggregate=pskv.NodeAggregate(), init=pskv.Constant(2.0))
    assert np.array_equal(t.pull([0, 7])[:, 0], [2.0, 2.0])
    with pytest.raises(pskv.AggregationError, match="main thread"):
        t.push([0], [[1.0]])
    t.set([0], [[1.0]]).wait(10)  # initial values: before any round
    assert t.pull([0])[0, 0] == 1.0
    node.run(lambda w: w.table("g").push([1], [[1.0]]) and w.table("g").pull([1]), threads=1)
    with pytest.raises(pskv.TableError, match="set only for initial values, before any push of a round"):
        t.set([0], [[1.0]])
    with pytest.raises(pskv.TableError):
        t.localize([0])


def test_double_push_in_round_raises_and_changes_nothing(node):
    """A second push of a key before pulling it raises AggregationError; the first push still counts once."""
    node.table("g", rows=8, dim=1, aggregate=pskv.NodeAggregate())
    errors = []

    def train(w):
        g = w.table("g")
        g.push([3], [[1.0]])
        try:
            g.push([4, 3], [[1.0], [1.0]])
        except pskv.AggregationError as exc:
            errors.append(exc)
        assert g.pull([3])[0, 0] == 2.0
        g.push([4], [[1.0]])  # key 4 was refused with 3: this is its first push of the round
        assert g.pull([4])[0, 0] == 2.0

    node.run(train, threads=2)
    assert len(errors) == 2 and "twice in one round" in str(errors[0])


def test_second_outstanding_pull_raises(node):
    """While a thread's round pull of a key waits for the other thread, pulling the key again raises."""
    node.table("g", rows=8, dim=1, aggregate=pskv.NodeAggregate())
    ready = threading.Event()

    def train(w):
        g = w.table("g")
        if w.thread == 0:
            g.push([2], [[1.0]])
            fut = g.pull_async([2, 6])
            with pytest.raises(pskv.AggregationError, match="outstanding"):
                g.pull_async([2])
            assert not fut.done()
            ready.set()
            assert fut.wait(10)[0, 0] == 2.0
        else:
            assert ready.wait(10)
            g.push([2], [[1.0]])
            assert g.pull([2])[0, 0] == 2.0

    node.run(train, threads=2)


def test_worker_that_leaves_early_stops_holding_rounds(node):
    """A thread that closes after fewer rounds keeps its pushes in; later rounds complete with the others."""
    node.table("g", rows=4, dim=1, aggregate=pskv.NodeAggregate())
    last = {}

    def train(w):
        g = w.table("g")
        for r in range(1 if w.thread == 0 else 3):
            g.push([0], [[1.0]])
            if w.thread == 0:
                return  # leaves with a pushed round and no pull
            last[r] = g.pull([0])[0, 0]

    node.run(train, threads=2)
    assert last == {0: 2.0, 1: 3.0, 2: 4.0}


def test_pull_callback_before_wait(node):
    """callback(values) runs once, with the values written, before wait() returns."""
    node.table("g", rows=4, dim=1, aggregate=pskv.NodeAggregate())
    seen = []

    def train(w):
        g = w.table("g")
        g.push([1], [[5.0]])
        fut = g.pull_async([1], callback=lambda v: seen.append(float(v[0, 0])))
        assert fut.wait(10)[0, 0] == 5.0 and seen == [5.0]

    node.run(train, threads=1)


def _owner(nodes: int, asynchronous: bool, sent: list, updater="add"):
    spec = TableSpec("o", 10, 2, np.dtype(np.float32), updaters.get(updater), as_init(1.0))
    shard = Store().add(spec, 0, 10, 0)
    endpoint, transport = recording_endpoint(0)
    transport.sent = sent
    return Owner(spec, shard, nodes, asynchronous, endpoint)


def test_owner_bsp_applies_once_after_every_node():
    """Level-2 BSP: round r is applied once, on the sum of all nodes' sums; each node gets its rows and positions."""
    sent = []
    owner = _owner(2, False, sent, pskv.SGD(lr=0.5))
    mine = owner.apply(0, 0, np.array([2, 4]), np.zeros(2, np.int64), np.ones((2, 2), np.float32))
    assert mine == [] and sent == []
    mine = owner.apply(1, 99, np.array([1, 4]), np.zeros(2, np.int64), np.ones((2, 2), np.float32))
    (keys, r, values), = mine  # key 4 is complete: node 0's result comes back, node 1's is sent
    assert keys.tolist() == [4] and r.tolist() == [0] and np.array_equal(values, [[0.0, 0.0]])  # 1 - 0.5 * 2
    (rank, frames), = sent
    header = unpack_header(frames[0])
    p = unpack(header, frames)
    assert rank == 1 and header.kind == Kind.PULL_REPLY and header.request_id == 99 and header.cluster == 7
    assert p.positions.tolist() == [1] and np.array_equal(p.values, [[0.0, 0.0]])
    with pytest.raises(ProtocolError, match="out of order"):
        owner.apply(0, 0, np.array([4]), np.array([3]), np.ones((1, 2), np.float32))


def test_owner_async_applies_on_arrival():
    """Level-2 Async: each node's sum is applied at once and answered with the rows after it."""
    sent = []
    owner = _owner(2, True, sent)
    owner.apply(1, 5, np.array([3]), np.array([0]), np.full((1, 2), 2.0, np.float32))
    (keys, _, values), = owner.apply(0, 0, np.array([3]), np.array([0]), np.full((1, 2), 4.0, np.float32))
    assert np.array_equal(values, [[7.0, 7.0]])
    assert np.array_equal(unpack(unpack_header(sent[0][1][0]), sent[0][1]).values, [[3.0, 3.0]])


def test_agg_push_for_plain_table_is_rejected(node):
    """The server answers an AGG_PUSH for a table that is not aggregated with an error, and keeps serving."""
    from pskv.net.wire import Header, dtype_code
    node.table("plain", rows=4, dim=1)
    h = Header(Kind.AGG_PUSH, cluster=node.cluster, sender=0, origin=0, table=0, n_keys=1, dim=1,
               dtype=dtype_code(np.float32), key_dtype=dtype_code(np.int64))
    before = node.server.errors
    node.server.handle(h, [h.pack(), np.array([1], np.int64), np.ones((1, 1), np.float32)])
    assert node.server.errors == before + 1
