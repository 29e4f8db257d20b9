"""Key caching across clusters (issue 30, F8): a thread that sent key lists to the nodes of one
cluster sends them whole again to the next cluster's, which were never sent them. Nodes run in
threads of this process; the test's own thread pushes and pulls through both clusters."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from helpers import free_port, together

pytestmark = pytest.mark.timeout(60)

FAST = dict(heartbeat_interval=0.1, rendezvous_timeout=20.0)
ROWS = 100


def _quiet_shutdown(node: pskv.Node):
    try:
        node.shutdown(timeout=10)
    except pskv.PskvError as exc:
        return exc


def _one_cluster(step_value: float, runs: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A 2-node cluster in threads; this thread pushes `runs` times through each node to the other
    node's range with key caching, then pulls the rows back the same way; returns both pulls."""
    address = f"127.0.0.1:{free_port()}"
    nodes = together(*[lambda r=r: pskv.init(coordinator=address, num_nodes=2, rank=r, **FAST) for r in range(2)])
    try:
        assert all(isinstance(n, pskv.Node) for n in nodes), nodes
        tables = together(*[lambda n=n: n.table("t", rows=ROWS, dim=2, filters="keycache") for n in nodes])
        assert all(isinstance(t, pskv.Table) for t in tables), tables
        far = [np.arange(ROWS // 2, ROWS, 3), np.arange(0, ROWS // 2, 3)]  # node 1's keys, node 0's keys
        for _ in range(runs):  # the same lists again: from the second push on, 8-byte hashes
            for t, keys in zip(tables, far):
                t.push(keys, np.full((len(keys), 2), step_value, np.float32), filters=[pskv.filters.KeyCache()]).wait()
        return tuple(t.pull(keys, filters=[pskv.filters.KeyCache()]) for t, keys in zip(tables, far))
    finally:
        together(*[lambda n=n: _quiet_shutdown(n) for n in nodes if isinstance(n, pskv.Node)])


def test_key_cache_in_a_second_cluster_of_the_same_thread_sends_lists_whole_again():
    """Two clusters one after the other, same thread, same key lists: each sums exactly (the
    second's nodes were never sent the first's lists, so a cached hash there would be an error)."""
    for cluster, value in enumerate([1.0, 2.0]):
        for got in _one_cluster(value):
            assert got.shape == (17, 2)
            assert np.array_equal(got, np.full((17, 2), 4 * value, np.float32)), (cluster, got)
