"""membership/join.py and the coordinator's side of a join, in one process: real nodes in threads
(node 0 hosts the coordinator) and a node that joins them with `pskv.init(join=...)`."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.errors import ClusterError
from pskv.membership.join import share

from helpers import free_port, together

pytestmark = pytest.mark.timeout(60)

CONFIG = dict(failure_timeout=10.0, heartbeat_interval=0.1, rendezvous_timeout=20.0)


@pytest.fixture
def cluster():
    """`start(num_nodes, **overrides) -> (coordinator address, nodes)`; all nodes (and joiners appended
    to `joined`) shut down at teardown."""
    started: list = []

    def start(num_nodes: int, **overrides):
        for _ in range(3):
            at = f"127.0.0.1:{free_port()}"
            nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=num_nodes, rank=r,
                                                     **(CONFIG | overrides)) for r in range(num_nodes)])
            started.extend(n for n in nodes if isinstance(n, pskv.Node))
            if all(isinstance(n, pskv.Node) for n in nodes):
                return at, nodes
        raise AssertionError(f"no cluster of {num_nodes} started: {nodes}")

    start.started = started
    try:
        yield start
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in started])


def test_share_takes_one_over_members_from_the_end_past_earlier_joiners():
    assert share(0, 100, 0, 3) == (67, 100)  # the third member takes the last third
    assert share(0, 100, 33, 4) == (42, 67)  # the fourth: a quarter, before the keys the third took
    assert share(10, 12, 0, 5) == (12, 12)  # too narrow a range to give anything


def test_a_joining_node_gets_the_next_rank_and_its_share_and_num_nodes_follows(cluster):
    at, nodes = cluster(2)
    tables = together(*[lambda n=n: n.table("t", rows=60, dim=2) for n in nodes])
    keys = np.arange(60)
    tables[0].set(keys, np.stack([keys, -keys], axis=1).astype(np.float32)).wait(10)
    assert [n.num_nodes for n in nodes] == [2, 2]

    joiner = pskv.init(join=at, **CONFIG)
    cluster.started.append(joiner)
    assert (joiner.rank, joiner.members, joiner.num_nodes) == (2, [0, 1, 2], 3)
    table = joiner.table("t", rows=60, dim=2)  # declared again: takes its share (a third of each range)
    local = table.pull_if_local(keys)[0]
    assert int(local.sum()) == 20 and set(np.flatnonzero(local)) == set(range(20, 30)) | set(range(50, 60))
    assert np.array_equal(table.pull(keys, timeout=10), np.stack([keys, -keys], axis=1))
    assert [n.num_nodes for n in nodes] == [3, 3] and nodes[0].members == [0, 1, 2]
    table.push(keys, np.ones((60, 2), np.float32)).wait(10)
    assert np.array_equal(tables[1].pull(keys, timeout=10), np.stack([keys + 1, 1 - keys], axis=1))


def test_a_join_before_the_cluster_runs_is_refused():
    from pskv.membership.coordinator import Coordinator
    from pskv.config import NodeConfig

    coord = Coordinator(2, config=NodeConfig(**CONFIG)).start()
    try:
        with pytest.raises(ClusterError, match="still forming; join once it runs"):
            pskv.init(join=coord.address, **CONFIG)
    finally:
        coord.close()


def test_a_join_to_a_cluster_with_an_aggregated_table_is_refused_and_the_cluster_goes_on(cluster):
    at, nodes = cluster(2)
    together(*[lambda n=n: n.table("dense", rows=8, dim=1, consistency=pskv.BSP(),
                                             aggregate=pskv.NodeAggregate()) for n in nodes])
    with pytest.raises(ClusterError, match=r"table\(s\) \['dense'\] aggregate per node \(NodeAggregate\)"):
        pskv.init(join=at, **CONFIG)
    assert [n.members for n in nodes] == [[0, 1], [0, 1]]
    got = []

    def train(w: pskv.Worker) -> None:
        w.table("dense").push(np.arange(8), np.ones((8, 1), np.float32))
        got.append(w.table("dense").pull(np.arange(8), timeout=10))  # the round of both nodes

    together(*[lambda n=n: n.run(train, threads=1) for n in nodes])
    assert len(got) == 2 and all(np.array_equal(g, np.full((8, 1), 2.0)) for g in got), got
