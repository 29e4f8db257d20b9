"""A node joins a cluster with backups (membership.joining), in one process: real nodes in threads (node 0
hosts the coordinator), a node that joins them with `pskv.init(join=...)`, and for the coordinator's
protocol alone, fake nodes (test_coordinator.FakeNode).

The joiner is a member outside the chains until it declared every table declared before it came;
then it enters them at the end of the chains of B ranges, gets their rows by SNAPSHOT, and its
declaration returns once its copies are whole. It never heads a range."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.config import NodeConfig
from pskv.membership import join

from helpers import together, wait_until
from test_coordinator import FAST, FakeNode, make_coordinator, make_fake  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(90)

CONFIG = dict(failure_timeout=10.0, heartbeat_interval=0.1, rendezvous_timeout=20.0, backups=1)
KEYS = np.arange(60)


@pytest.fixture
def cluster():
    """`start(num_nodes) -> (coordinator address, nodes)` with backups=1; `start.join()` adds a joiner.
    Every node shuts down at teardown."""
    from helpers import free_port
    started: list = []

    def start(num_nodes: int):
        for _ in range(3):
            at = f"127.0.0.1:{free_port()}"
            nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=num_nodes, rank=r, **CONFIG)
                               for r in range(num_nodes)])
            started.extend(n for n in nodes if isinstance(n, pskv.Node))
            if all(isinstance(n, pskv.Node) for n in nodes):
                start.at = at
                return nodes
        raise AssertionError(f"no cluster of {num_nodes} started: {nodes}")

    def joiner() -> pskv.Node:
        node = pskv.init(join=start.at, **(CONFIG | {"backups": 0}))  # it takes the cluster's backups
        started.append(node)
        return node

    start.join = joiner
    try:
        yield start
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in started])


def _copy(node: pskv.Node, name: str, r: int) -> np.ndarray:
    """Node `node`'s backup copy of key range r of table `name`: (hi - lo, dim)."""
    copy = node.server.backups.copies.backup[(node.catalog.get(name).spec.table_id, r)]
    return copy.read(np.arange(copy.start, copy.stop))[0]


def test_a_joiner_enters_the_chains_with_current_copies_and_pulls_current_rows(cluster):
    """3 nodes, 1 backup, an Adagrad table written before the join. The joiner is outside the chains
    until it declares the table; then it ends range 0's chain, its copy equals the head's rows and
    updater state bit for bit (later writes included), and its pulls return the current rows."""
    nodes = cluster(3)
    tables = together(*[lambda n=n: n.table("t", rows=60, dim=2, updater="adagrad") for n in nodes])
    tables[0].set(KEYS, np.stack([KEYS, -KEYS], axis=1).astype(np.float32)).wait(10)
    tables[1].push(KEYS, np.ones((60, 2), np.float32)).wait(10)

    joiner = cluster.join()
    assert (joiner.rank, joiner.members, joiner.config.backups) == (3, [0, 1, 2, 3], 1)
    assert joiner.view.outside == {3} and joiner.view.chains.chain(0) == (0, 1)
    table = joiner.table("t", rows=60, dim=2, updater="adagrad")  # returns once its copy is whole
    assert joiner.view.outside == frozenset() and joiner.view.chains.chain(0) == (0, 1, 3)
    assert joiner.view.chains.headed_by(3) == []
    head = tables[0].pull_if_local(KEYS[:20])[1]
    assert np.array_equal(_copy(joiner, "t", 0), head)
    assert np.array_equal(table.pull(KEYS, timeout=10), tables[2].pull(KEYS, timeout=10))

    together(lambda: table.push(KEYS, np.full((60, 2), 0.5, np.float32)).wait(10),
             lambda: tables[2].push(KEYS, np.ones((60, 2), np.float32)).wait(10))
    head = tables[0].pull_if_local(KEYS[:20])[1]
    assert np.array_equal(_copy(joiner, "t", 0), head) and np.array_equal(_copy(nodes[1], "t", 0), head)
    assert np.array_equal(table.pull(KEYS, timeout=10), tables[1].pull(KEYS, timeout=10))
    tid = joiner.catalog.get("t").spec.table_id
    state = [nodes[0].catalog.get("t").shard.read(KEYS[:20])[1],
             *(n.server.backups.copies.backup[(tid, 0)].read(KEYS[:20])[1] for n in (nodes[1], joiner))]
    assert np.array_equal(state[0], state[1]) and np.array_equal(state[0], state[2])  # Adagrad's sums too
    coordinator = nodes[0]._coordinator
    wait_until(lambda: coordinator.changes.whole[0] == {0, 1, 3}, what="the joiner's copy counted as whole")


def test_a_joiner_reads_keys_before_and_after_it_enters_the_chains(cluster):
    """Two tables before the join: having declared the first, the joiner is still outside the chains
    (it owes the second) and localizes keys of range 0 (it becomes their reader); it stays their reader
    when it enters the chains (it was no chain member, yet alive), and reads every write exactly."""
    nodes = cluster(2)
    a = together(*[lambda n=n: n.table("a", rows=60, dim=1) for n in nodes])
    together(*[lambda n=n: n.table("b", rows=10, dim=1) for n in nodes])
    joiner = cluster.join()
    ta = joiner.table("a", rows=60, dim=1)
    assert joiner.view.outside == {2}
    keys = np.arange(10)
    ta.localize(keys).wait(10)
    a[1].push(keys, np.ones((10, 1), np.float32)).wait(10)
    held, rows = ta.pull_if_local(keys)
    assert held.all() and np.array_equal(rows, np.ones((10, 1)))

    joiner.table("b", rows=10, dim=1)  # the last table before it came: it enters the chains
    assert joiner.view.outside == frozenset() and joiner.view.chains.chain(0) == (0, 1, 2)
    tid = joiner.catalog.get("a").spec.table_id
    assert (nodes[0].server.backups.copies.readers.of(tid, keys) == 2).all()
    a[0].push(keys, np.full((10, 1), 2.0, np.float32)).wait(10)
    together(lambda: ta.push(keys, np.ones((10, 1), np.float32)).wait(10),
             lambda: a[1].push(keys, np.ones((10, 1), np.float32)).wait(10))
    held, rows = ta.pull_if_local(keys)
    assert held.all() and np.array_equal(rows, np.full((10, 1), 5.0))
    assert np.array_equal(a[0].pull(np.arange(60), timeout=10)[:10], rows)


def test_a_joiner_with_no_table_yet_enters_at_once_and_later_tables_copy_to_it(cluster):
    """No table before the join: init() returns with the joiner in the chains; a table declared by
    every node afterwards has the joiner's copy from the start, kept current by every write."""
    nodes = cluster(2)
    joiner = cluster.join()
    assert joiner.view.outside == frozenset() and joiner.view.chains.chain(0) == (0, 1, 2)
    tables = together(*[lambda n=n: n.table("t", rows=60, dim=1) for n in [*nodes, joiner]])
    together(*[lambda t=t: t.push(KEYS, np.ones((60, 1), np.float32)).wait(10) for t in tables])
    assert np.array_equal(_copy(joiner, "t", 0), np.full((30, 1), 3.0))
    assert np.array_equal(tables[2].pull(KEYS, timeout=10), np.full((60, 1), 3.0))


class FakeJoiner(FakeNode):
    """A FakeNode that joins the running cluster (membership.join.ask) instead of starting with it."""

    def __init__(self, coordinator: str, num_nodes: int) -> None:
        self._asking = True
        super().__init__(coordinator, num_nodes, num_nodes)  # ranks are never reused: the next is num_nodes

    def resume(self) -> None:
        if not self._asking:  # (nothing but JOINED may come before it is a member)
            super().resume()

    def ask(self) -> dict:
        cluster, payload = join.ask(self.transport, NodeConfig(join=self.config.coordinator, **FAST))
        self.client.view.joined(cluster, payload)
        self.client.joined(payload)
        self._asking = False
        self.resume()
        return payload


def test_coordinator_enters_a_joiner_once_it_declared_and_counts_it_once_synced(make_coordinator, make_fake):
    """The coordinator's side: JOINED says what the joiner owes, MEMBERSHIP{entered} follows its
    declaration, SYNCED makes its copy whole. After node 0 dies range 0 goes to node 1 and node 2
    fills it; if node 1 dies too before node 2 is done, the cluster stops, although the joiner holds
    range 0 whole: a joiner's copy never heads a range."""
    coord = make_coordinator(3, backups=1)
    fakes = [make_fake(coord.address, r, 3, backups=1) for r in range(3)]
    seen = [f.events.memberships for f in fakes]
    together(*[f.join for f in fakes])
    together(*[lambda f=f: f.client.declare({"name": "t"}) for f in fakes])
    joiner = FakeJoiner(coord.address, 3)
    try:
        payload = joiner.ask()
        assert (payload["rank"], payload["tables"], payload["backups"], payload["outside"]) == (3, 1, 1, [3])
        wait_until(lambda: all(got for got in seen), what="MEMBERSHIP{joined}")
        assert seen[0][0]["joined"] == 3 and seen[0][0]["outside"] == [3] and coord.changes.chains.chain(0) == (0, 1)
        joiner.client.declare({"name": "t"})
        wait_until(lambda: all(len(got) == 2 for got in seen), what="MEMBERSHIP{entered}")
        assert seen[1][1]["entered"] == 3 and seen[1][1]["epoch"] == 3 and "outside" not in seen[1][1]
        assert coord.changes.chains.chain(0) == (0, 1, 3) and coord.changes.whole[0] == {0, 1}
        joiner.client.synced(3)
        wait_until(lambda: coord.changes.whole[0] == {0, 1, 3}, what="the joiner's SYNCED")

        coord.report_failure(0, "gone")
        wait_until(lambda: len(seen[1]) == 3 and len(seen[2]) == 3, what="MEMBERSHIP epoch 4")
        assert coord.changes.chains.chain(0) == (1, 2, 3)
        fakes[1].client.synced(4)  # node 2 never says it: range 0 is still filling there
        coord.report_failure(1, "gone too")
        wait_until(lambda: fakes[2].failures and joiner.failures, what="NodeFailure on nodes 2 and 3")
        text = str(fakes[2].failures[0])
        assert "key range(s) [0] had no whole copy left on a node that can head them" in text, text
        assert "(node(s) [2] had not finished copying them; node(s) [3] hold one, but a node that joined never " \
            "heads a range)" in text, text
    finally:
        joiner.close()
