"""Table declarations and membership changes that overlap (issue 30 F10d), in one process: real nodes in
threads (node 0 hosts the coordinator) and a node that joins them with `pskv.init(join=...)`.

An aggregated table (NodeAggregate) sizes its per-node arrays by the nodes the cluster started with, so
the coordinator refuses a join while one exists; a declaration still under way counts as one, and an
aggregated table declared once a joiner is a member is refused on every node (ConfigError)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pskv
from pskv.errors import ClusterError

from helpers import PATIENCE, free_port, together, wait_until

pytestmark = pytest.mark.timeout(90)

CONFIG = dict(failure_timeout=10.0, heartbeat_interval=0.1, rendezvous_timeout=20.0)
AGGREGATED = dict(rows=8, dim=1, consistency=pskv.BSP(), aggregate=pskv.NodeAggregate())


@pytest.fixture
def cluster():
    """`start(num_nodes) -> (coordinator address, nodes)`; every node (and joiners appended to
    `start.started`) shut down at teardown."""
    started: list = []

    def start(num_nodes: int):
        for _ in range(3):
            at = f"127.0.0.1:{free_port()}"
            nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=num_nodes, rank=r, **CONFIG)
                               for r in range(num_nodes)])
            started.extend(n for n in nodes if isinstance(n, pskv.Node))
            if all(isinstance(n, pskv.Node) for n in nodes):
                return at, nodes
        raise AssertionError(f"no cluster of {num_nodes} started: {nodes}")

    start.started = started
    try:
        yield start
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in started])


def _rounds(nodes: list) -> list:
    """Each node's worker pushes a one to every row of 'agg' and pulls the round's sums."""
    got = []

    def train(w: pskv.Worker) -> None:
        w.table("agg").push(np.arange(8), np.ones((8, 1), np.float32))
        got.append(w.table("agg").pull(np.arange(8), timeout=PATIENCE))

    results = together(*[lambda n=n: n.run(train, threads=1) for n in nodes])
    assert results == [None] * len(nodes), results
    return got


def test_a_join_while_an_aggregated_table_is_being_declared_is_refused(cluster):
    """Node 0 declared an aggregated table, node 1 not yet: a join is refused (it used to be let in and
    the joiner's first round crashed the level 2 of every node); the declaration then completes and its
    rounds sum exactly."""
    at, nodes = cluster(2)
    declared: list = []
    first = threading.Thread(target=lambda: declared.append(nodes[0].table("agg", **AGGREGATED)), daemon=True)
    first.start()
    coordinator = nodes[0]._coordinator
    wait_until(lambda: coordinator._decls.get(0), what="node 0's declaration reaching the coordinator")
    with pytest.raises(ClusterError, match=rf"the cluster at {at} refused this node: table\(s\) \['agg'\] aggregate "
                                           r"per node \(NodeAggregate\), which cannot take a node that joins later"):
        cluster.started.append(pskv.init(join=at, **CONFIG))  # (shut down at teardown if it was let in)
    nodes[1].table("agg", **AGGREGATED)
    first.join(PATIENCE)
    assert len(declared) == 1 and [n.members for n in nodes] == [[0, 1], [0, 1]]
    got = _rounds(nodes)
    assert len(got) == 2 and all(np.array_equal(g, np.full((8, 1), 2.0)) for g in got), got


def test_an_aggregated_table_declared_after_a_join_is_refused_on_every_node(cluster):
    """Once a node joined, an aggregated table is a ConfigError on every node that declares it (it used to
    be made, and the joiner's first round crashed the level 2 of every node); the cluster goes on."""
    at, nodes = cluster(2)
    joiner = pskv.init(join=at, **CONFIG)
    cluster.started.append(joiner)
    everyone = [*nodes, joiner]
    results = together(*[lambda n=n: n.table("agg", **AGGREGATED) for n in everyone])
    assert all(isinstance(r, pskv.ConfigError) for r in results), results
    assert all(str(r) == "table 'agg' aggregates per node (NodeAggregate), which node(s) [2] that joined the running "
               "cluster cannot take part in (its per-node arrays are sized by the 2 nodes the cluster started "
               "with); declare it without aggregate=, or before any node joins" for r in results), results
    tables = together(*[lambda n=n: n.table("plain", rows=8, dim=1) for n in everyone])
    assert all(isinstance(t, pskv.Table) for t in tables), tables
    tables[2].push(np.arange(8), np.ones((8, 1), np.float32)).wait(PATIENCE)
    assert np.array_equal(tables[0].pull(np.arange(8), timeout=PATIENCE), np.ones((8, 1)))
