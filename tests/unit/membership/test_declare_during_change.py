"""Table declarations and membership changes that overlap (issue 30 F10d), in one process: real nodes in
threads (node 0 hosts the coordinator) and a node that joins them with `pskv.init(join=...)`.

An aggregated table (NodeAggregate) sizes its per-node arrays by the nodes the cluster started with, so
the coordinator refuses a join while one exists; a declaration still under way counts as one, and an
aggregated table declared once a joiner is a member is refused on every node (ConfigError)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pskv
from pskv.config import NodeConfig
from pskv.errors import ClusterError
from pskv.membership.client import CoordinatorClient
from pskv.membership.view import View
from test_coordinator import Recorder
from pskv.net.wire import COORDINATOR, Header, Kind

from helpers import PATIENCE, free_port, together, wait_until

pytestmark = pytest.mark.timeout(90)

CONFIG = dict(failure_timeout=10.0, heartbeat_interval=0.1, rendezvous_timeout=20.0)
AGGREGATED = dict(rows=8, dim=1, consistency=pskv.BSP(), aggregate=pskv.NodeAggregate())


@pytest.fixture
def cluster():
    """`start(num_nodes, **overrides) -> (coordinator address, nodes)`; every node (and joiners appended to
    `start.started`) shut down at teardown."""
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
    wait_until(lambda: coordinator.collectives.decls.get(0), what="node 0's declaration reaching the coordinator")
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


def test_a_membership_change_tells_the_node_which_declarations_are_under_way():
    """The node's side of MEMBERSHIP (the client, in pskv-server's order) adds "unfinished": the tables it
    declared whose TABLE_OK has not come, which no write reached yet (none: the payload as it came)."""
    events = Recorder()
    changes = events.memberships
    client = CoordinatorClient(lambda frames: None, View(1, 3), NodeConfig(**CONFIG), events)
    coordinator = Header(Kind.TABLE_OK, sender=COORDINATOR)
    first = threading.Thread(target=client.declare, args=({"name": "a"},), daemon=True)
    first.start()
    wait_until(lambda: 0 in client._specs, what="table 'a' being declared")
    client.handle(coordinator, {"seq": 0, "error": None})
    second = threading.Thread(target=client.declare, args=({"name": "b"},), daemon=True)
    second.start()
    wait_until(lambda: 1 in client._specs, what="table 'b' being declared")
    membership = {"epoch": 2, "alive": [0, 1], "dead": 2, "reason": "it left the cluster", "left": True}
    client.handle(Header(Kind.MEMBERSHIP, sender=COORDINATOR), membership)
    client.handle(coordinator, {"seq": 1, "error": None})
    first.join(PATIENCE)
    second.join(PATIENCE)
    assert not first.is_alive() and not second.is_alive()
    client.handle(Header(Kind.MEMBERSHIP, sender=COORDINATOR), {**membership, "epoch": 3})
    assert changes == [{**membership, "unfinished": ["b"]}, {**membership, "epoch": 3}]


# ---- a declaration under way while a node leaves -----------------------------------------------------------
# Nodes build a table before its declaration completes; a membership change that lands in between is seen
# by the nodes that built it already and not by those that build it later. No write reached the table yet;
# the client names such tables in the MEMBERSHIP it hands on ("unfinished"): the node side adopts the ranges
# of them it now manages that nobody handed over (node.elastic) and expects no snapshot of them (server.failover).


def _declaring(nodes: list, name: str, **kw) -> tuple[list, list]:
    """`nodes` declare table `name` in threads; returns once the coordinator has all their declarations."""
    tables: list = []
    threads = [threading.Thread(target=lambda n=n: tables.append(n.table(name, **kw)), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    coordinator = next(n for n in nodes if n.rank == 0)._coordinator
    seq = len(coordinator.collectives.decl_specs)
    wait_until(lambda: len(coordinator.collectives.decls.get(seq, {})) == len(nodes), what="the declarations")
    return tables, threads


def test_a_table_declared_while_a_node_leaves_without_backups_gets_its_range(cluster):
    """Nodes 0 and 1 declare 't' while node 2 leaves without declaring it: the declaration completes at
    the leave's epoch, and every key of 't' (node 2's range too) sums exactly."""
    _, nodes = cluster(3)
    tables, threads = _declaring(nodes[:2], "t", rows=30, dim=1)
    nodes[2].leave(timeout=PATIENCE)
    for t in threads:
        t.join(PATIENCE)
    assert len(tables) == 2
    for table in tables:
        table.push(np.arange(30), np.ones((30, 1), np.float32)).wait(PATIENCE)
    assert np.array_equal(tables[0].pull(np.arange(30), timeout=PATIENCE), np.full((30, 1), 2.0))


def test_a_table_declared_while_a_node_leaves_with_backups_leaves_every_copy_whole(cluster):
    """With backups, nodes 0 and 1 declare 't' while node 3 leaves and before node 2 declares it: node 0
    becomes a backup of node 2's range, its copies are whole again, so node 2 may leave in turn (after a
    few "try again in a moment" while node 0's copies fill)."""
    _, nodes = cluster(4, backups=1)
    _, threads = _declaring(nodes[:2], "t", rows=40, dim=1)
    nodes[3].leave(timeout=PATIENCE)
    wait_until(lambda: nodes[2].view.epoch == 2, what="node 2 seeing node 3 leave")
    nodes[2].table("t", rows=40, dim=1)  # built after the change: node 2 sends no snapshot of it
    for t in threads:
        t.join(PATIENCE)
    for attempt in range(50):  # as a user would: the refusal says to try again in a moment
        try:
            nodes[2].leave(timeout=PATIENCE)
            break
        except ClusterError as exc:
            if "try again in a moment" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.1)
    assert nodes[0].members == [0, 1]
