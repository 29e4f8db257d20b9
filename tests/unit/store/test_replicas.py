"""store.replicas: the account of who changed a replicated key, which a node that joins later
starts from (every change reaches it once: in `subscribe`'s answer or in a later sync round)."""

from __future__ import annotations

import numpy as np

from pskv import updaters
from pskv.store.replicas import Replicas
from pskv.store.spec import TableSpec, as_init


def _replicas(peers=()) -> Replicas:
    spec = TableSpec("h", 8, 1, np.dtype(np.float32), updaters.get("add"), as_init(0.0), table_id=0)
    return Replicas(spec, np.array([0, 3]), peers)


def _one(v: float) -> np.ndarray:
    return np.full((1, 1), v, np.float32)


def test_a_change_reaches_a_joiner_once_whether_taken_before_or_after_it_subscribed():
    """Taken before the subscription: in the answer; taken after: in the round, which names it."""
    node0 = _replicas(peers=[1])
    node0.push(np.array([0]), _one(5.0))
    keys, deltas, peers = node0.take_deltas(0.0)
    assert keys.tolist() == [0] and deltas.tolist() == [[5.0]] and peers == {1}
    node0.push(np.array([3]), _one(2.0))  # not taken yet when node 2 asks
    answer = node0.subscribe(2, node0.keys)
    assert answer.tolist() == [[5.0], [0.0]]
    keys, deltas, peers = node0.take_deltas(0.0)
    assert keys.tolist() == [3] and deltas.tolist() == [[2.0]] and peers == {1, 2}
    joiner = _replicas()
    joiner.add_deltas(keys, deltas, 0)  # the round may come before the answer: both add
    joiner.caught_up(0, joiner.keys, answer)
    out = np.empty((2, 1), np.float32)
    joiner.pull(np.array([0, 3]), out)
    assert out[:, 0].tolist() == [5.0, 2.0] and joiner.peers == {0}
    assert joiner.take_deltas(0.0)[0].tolist() == []  # another node's changes are not its to send


def test_a_change_taken_with_no_peer_counts_as_sent():
    """A node alone takes its changes all the same: a node that joins later gets them in the answer."""
    alone = _replicas()
    alone.push(np.array([0]), _one(4.0))
    keys, _, peers = alone.take_deltas(0.0)
    assert keys.tolist() == [0] and peers == frozenset()
    assert alone.subscribe(1, np.array([0])).tolist() == [[4.0]]


def test_the_changes_of_a_node_gone_pass_to_the_lowest_live_node():
    """Node 1 synced 7 to nodes 0 and 2, then left: node 0 answers for it (its `sent`), and node 2
    counts it as node 0's, so it passes on again if node 0 goes too."""
    node0, node2 = _replicas(peers=[1, 2]), _replicas(peers=[0, 1])
    for r in (node0, node2):
        r.add_deltas(np.array([0]), _one(7.0), 1)
    node0.retire({0, 2}, 0)
    node2.retire({0, 2}, 2)
    assert node0.subscribe(3, np.array([0, 3])).tolist() == [[7.0], [0.0]]
    assert 1 not in node2.received and node2.received[0].tolist() == [[7.0], [0.0]]
    node2.retire({2}, 2)  # node 0 goes too
    assert node2.subscribe(3, np.array([0])).tolist() == [[7.0]]


def test_restored_values_count_as_node_0s():
    """A checkpoint's values of the replicated keys: node 0 answers for them to a node that joins later."""
    node0, node1 = _replicas(peers=[1]), _replicas(peers=[0])
    rows = np.array([[3.0], [9.0]], np.float32)
    node0.restore(rows, None, 0)
    node1.restore(rows, None, 1)
    assert node0.subscribe(2, node0.keys).tolist() == [[3.0], [9.0]]
    assert node1.subscribe(2, node1.keys).tolist() == [[0.0], [0.0]]
    node1.retire({1}, 1)
    assert node1.subscribe(2, node1.keys).tolist() == [[3.0], [9.0]]
