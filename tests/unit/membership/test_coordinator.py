"""coordinator.py: rendezvous, table agreement, barriers, heartbeats and aborts, over loopback in one process.

Two kinds of nodes take part: real ones (`pskv.init(coordinator=..., num_nodes=N, rank=i)` in threads; node 0
starts the coordinator) and `FakeNode`s (a Transport, a CoordinatorClient and a receive loop), which can go
silent on demand or join with wrong details.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pskv
from pskv.config import NodeConfig
from pskv.membership.client import CoordinatorClient
from pskv.membership.coordinator import Coordinator
from pskv.membership.events import Events
from pskv.membership.view import View
from pskv.errors import BarrierTimeout, CoordinatorUnreachable, NodeFailure, TableMismatch
from pskv.net.wire import COORDINATOR, Header, Kind, control, control_payload, frame_bytes, unpack_header
from pskv.net.transport import Transport

from helpers import PATIENCE, free_port, together, wait_until

pytestmark = pytest.mark.timeout(60)

# Short failure timeouts, so that the heartbeat tests run in seconds; a rendezvous gets far longer
# than a loaded machine needs to start a few nodes (the tests that want it to time out set theirs).
FAST = dict(failure_timeout=1.0, heartbeat_interval=0.1, rendezvous_timeout=20.0)
# Real nodes may compile numba kernels on first use (a cold cache), holding this process's GIL, and
# so every heartbeat in it, for about a second at a time on a loaded machine: unless a test is about
# failure detection, they get pskv's default failure_timeout.
REAL = FAST | dict(failure_timeout=10.0)


class Recorder(Events):
    """A fake node's side of the coordinator's news: the failures and membership changes, in order."""

    def __init__(self) -> None:
        self.failures: list[NodeFailure] = []
        self.memberships: list[dict] = []

    def failed(self, exc: NodeFailure) -> None:
        self.failures.append(exc)

    def membership(self, payload: dict) -> None:
        self.memberships.append(payload)


class FakeNode:
    """A node without tables: the coordinator client of rank `rank`, fed by its own receive loop."""

    def __init__(self, coordinator: str, rank: int, num_nodes: int, **config) -> None:
        self.config = NodeConfig(coordinator=coordinator, num_nodes=num_nodes, rank=rank, **(FAST | config))
        self.transport = Transport("127.0.0.1")
        self.transport.set_address(COORDINATOR, coordinator)
        self.last_sent = 0.0  # monotonic time of our last message to the coordinator
        self.events = Recorder()
        self.failures = self.events.failures
        self.client = CoordinatorClient(self._send, View(rank, num_nodes), self.config, self.events)
        self._stop = threading.Event()
        self._thread = threading.Thread()
        self.resume()

    def join(self) -> dict[int, str]:
        return self.client.join(self.transport.address, self.config.num_nodes)

    def silence(self) -> None:
        """Stop receiving and heartbeating, as a hung process would."""
        self._stop.set()
        self._thread.join(PATIENCE)

    def resume(self) -> None:
        """Start (again) receiving and heartbeating, as a process does after a long stall."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"test-fake-node-{self.config.rank}", daemon=True)
        self._thread.start()

    def _send(self, frames: list) -> None:
        self.last_sent = time.monotonic()  # before sending: the coordinator hears it later
        self.transport.send(COORDINATOR, frames)

    def close(self) -> None:
        # unblock any call still waiting in the client (e.g. a join that will never be answered)
        self.client.handle(Header(Kind.ABORT, sender=COORDINATOR), {"reason": "test over"})
        self.silence()
        self.transport.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            frames = self.transport.recv(0.02)
            if frames is not None:
                header = unpack_header(frame_bytes(frames[0]))
                self.client.handle(header, control_payload(header, frames))
            self.client.check(time.monotonic())


@pytest.fixture
def make_coordinator():
    """`make(num_nodes, **config) -> started Coordinator`; all closed at teardown."""
    made: list[Coordinator] = []

    def make(num_nodes: int, **config) -> Coordinator:
        coord = Coordinator(num_nodes, config=NodeConfig(**(FAST | config))).start()
        made.append(coord)
        return coord

    try:
        yield make
    finally:
        for coord in made:
            coord.close()


@pytest.fixture
def make_fake():
    """`make(coordinator, rank, num_nodes, **config) -> FakeNode`; all closed at teardown."""
    made: list[FakeNode] = []

    def make(*args, **config) -> FakeNode:
        fake = FakeNode(*args, **config)
        made.append(fake)
        return fake

    try:
        yield make
    finally:
        # leave in order where possible: once all said bye the coordinator stops ticking, so no socket
        # has queued messages to linger over when it closes
        together(*[lambda f=f: f.client.bye(timeout=1) for f in made
                   if f.client.view.welcomed and f.client.failure is None and not f.client._shutdown_ok
                   and f._thread.is_alive()])
        together(*[f.close for f in made])  # in parallel: each may linger up to 2 s on a dead coordinator


@pytest.fixture
def start_nodes():
    """`start(num_nodes, ranks=None, address=None, **overrides) -> list[Node | Exception]`: real nodes, each
    started in its own thread; node 0 (if among ranks) hosts the coordinator. All shut down at teardown."""
    started: list = []

    def start(num_nodes: int, ranks=None, address: str | None = None, **overrides) -> list:
        config = REAL | overrides
        ranks = range(num_nodes) if ranks is None else ranks
        for _ in range(3):
            at = address or f"127.0.0.1:{free_port()}"
            nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=num_nodes, rank=r, **config)
                               for r in ranks])
            started.extend(n for n in nodes if isinstance(n, pskv.Node))
            if address or not any("already in use" in str(n) for n in nodes if isinstance(n, Exception)):
                return nodes
            # another process took the free port before node 0 bound it: start over on another one
        return nodes

    try:
        yield start
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in started])


# ---- rendezvous -----------------------------------------------------------------------------------


def test_rendezvous_fake_nodes_get_every_address(make_coordinator, make_fake):
    """Three nodes joining get the same rank -> address map, and the same non-zero cluster id."""
    coord = make_coordinator(3)
    fakes = [make_fake(coord.address, r, 3) for r in range(3)]
    maps = together(*[f.join for f in fakes])
    expected = {r: f.transport.address for r, f in enumerate(fakes)}
    assert maps == [expected] * 3
    assert {f.client.view.cluster for f in fakes} == {coord.cluster} and coord.cluster != 0


def test_rendezvous_real_nodes_form_one_cluster(start_nodes):
    """Three real nodes started in threads join one cluster and move data between their shards."""
    nodes = start_nodes(3)
    assert all(isinstance(n, pskv.Node) for n in nodes), nodes
    assert [n.rank for n in nodes] == [0, 1, 2] and len({n.cluster for n in nodes}) == 1
    tables = together(*[lambda n=n: n.table("t", rows=30, dim=2) for n in nodes])
    keys = np.arange(30)[::-1]
    values = np.stack([keys, -keys], axis=1).astype(np.float32)  # (30, 2) row k is (k, -k)
    tables[0].set(keys, values).wait(10)  # rows on all three nodes
    assert np.array_equal(tables[2].pull(keys, timeout=10), values)
    tables[1].push(keys, np.ones((30, 2))).wait(10)
    assert np.array_equal(tables[0].pull(keys, timeout=10), values + 1)


def test_rendezvous_timeout_names_missing_ranks(start_nodes):
    """With rank 1 of 3 missing, the others fail after rendezvous_timeout with CoordinatorUnreachable naming it."""
    results = start_nodes(3, ranks=[0, 2], rendezvous_timeout=1.0)  # together() bounds it: no hang
    for rank, exc in zip([0, 2], results):
        assert isinstance(exc, CoordinatorUnreachable), exc
        assert f"node {rank}: the coordinator aborted: only 2 of 3 nodes joined within 1 s; missing ranks [1]" \
            in str(exc)


def test_rendezvous_num_nodes_mismatch_aborts_node(make_coordinator, make_fake):
    """A node that thinks the cluster has 3 nodes, joining a 2-node coordinator, is aborted with both numbers."""
    coord = make_coordinator(2)
    fake = make_fake(coord.address, 0, 3)
    with pytest.raises(CoordinatorUnreachable, match="node 0 thinks the cluster has 3 nodes, the coordinator 2"):
        fake.join()


def test_rendezvous_rank_outside_cluster_aborts_node(make_coordinator, make_fake):
    """A node with rank 5 in a 2-node cluster is aborted with its rank and the valid range."""
    coord = make_coordinator(2)
    fake = make_fake(coord.address, 5, 2)
    with pytest.raises(CoordinatorUnreachable, match=r"rank 5 is outside \[0, 2\)"):
        fake.join()


def test_rendezvous_rank_joined_twice_aborts_second(make_coordinator, make_fake):
    """A second node with an already-joined rank is aborted with both addresses."""
    coord = make_coordinator(2)
    first, second = make_fake(coord.address, 0, 2), make_fake(coord.address, 0, 2)
    results = {}
    t = threading.Thread(target=lambda: results.setdefault("first", _catch(first.join)), name="test-first-join")
    t.start()
    wait_until(lambda: 0 in coord.members.addresses, what="first join")
    with pytest.raises(CoordinatorUnreachable,
                       match=f"rank 0 joined twice \\(first from {first.transport.address}, now from "
                             f"{second.transport.address}\\)"):
        second.join()
    first.close()  # unblocks the first join
    t.join(10)


def test_rendezvous_rank_joined_twice_first_still_welcomed(make_coordinator, make_fake):
    """After a duplicate rank 0 is aborted, the first rank 0 and rank 1 are both welcomed."""
    coord = make_coordinator(2, rendezvous_timeout=30)
    first, dup, other = (make_fake(coord.address, r, 2, rendezvous_timeout=30) for r in (0, 0, 1))
    results = {}
    t = threading.Thread(target=lambda: results.setdefault("first", _catch(first.join)), name="test-first-join")
    t.start()
    wait_until(lambda: 0 in coord.members.addresses, what="first join")
    assert isinstance(_catch(dup.join), CoordinatorUnreachable)
    assert isinstance(other.join(), dict)
    t.join(PATIENCE)  # the welcome comes at once; the deadline only bounds a join that never returns
    first.close()  # unblocks the first join if it was never welcomed
    t.join(10)
    assert results["first"] == {0: first.transport.address, 1: other.transport.address}


def test_rendezvous_malformed_hello_keeps_coordinator(make_coordinator, make_fake):
    """A HELLO whose address is not host:port is dropped; a proper node can still join afterwards."""
    coord = make_coordinator(1, rendezvous_timeout=PATIENCE)  # the join, however late, is in time
    transport = Transport("127.0.0.1")
    try:
        transport.set_address(COORDINATOR, coord.address)
        transport.send(COORDINATOR, control(Kind.HELLO, 0, 0, {"address": "not-an-address", "num_nodes": 1}))
    finally:
        transport.close()
    fake = make_fake(coord.address, 0, 1, rendezvous_timeout=PATIENCE)
    joined = {}
    t = threading.Thread(target=lambda: joined.setdefault("map", _catch(fake.join)), name="test-join")
    t.start()
    t.join(PATIENCE)  # the welcome comes at once; the deadline only bounds a join that never returns
    fake.close()  # unblocks the join if the coordinator is dead
    t.join(10)
    assert joined["map"] == {0: fake.transport.address}


def _catch(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return exc


# ---- table declarations ---------------------------------------------------------------------------


def test_table_mismatch_raises_on_every_node(start_nodes):
    """A table declared (30, 4) on nodes 0, 1 and (30, 8) on node 2 raises TableMismatch on all three,
    naming the differing field only; a later matching declaration still works."""
    nodes = start_nodes(3)
    results = together(*[lambda n=n: n.table("emb", rows=30, dim=8 if n.rank == 2 else 4) for n in nodes])
    for exc in results:
        assert isinstance(exc, TableMismatch), exc
        assert str(exc) == ("table 'emb' (declaration #0) differs between nodes: dim 4 on node 0 but 8 on node 2; "
                            "declare every table the same way and in the same order on every node")
    tables = together(*[lambda n=n: n.table("ok", rows=30, dim=2) for n in nodes])
    assert all(isinstance(t, pskv.Table) for t in tables), tables
    worker = nodes[0].worker()
    try:
        with pytest.raises(pskv.UnknownTable):
            worker.table("emb")
    finally:
        worker.close()


def test_table_mismatch_updater_params(start_nodes):
    """Different updater parameters (SGD lr 0.1 vs 0.2) are a mismatch too."""
    nodes = start_nodes(2)
    results = together(*[lambda n=n: n.table("w", rows=10, updater=pskv.SGD(lr=0.1 * (n.rank + 1)))
                         for n in nodes])
    assert all(isinstance(r, TableMismatch) for r in results), results
    assert "differs between nodes: updater.lr 0.1 on node 0 but 0.2 on node 1;" in str(results[0])


# ---- barriers -------------------------------------------------------------------------------------


def _barrier(node: pskv.Node, timeout: float):
    worker = node.worker()
    try:
        worker.barrier(timeout=timeout)
        return time.monotonic()
    finally:
        worker.close()


def test_barrier_completes_on_all_nodes(start_nodes):
    """A barrier entered by all three nodes (one late) releases each of them, after the last arrived."""
    nodes = start_nodes(3)
    late = time.monotonic() + 0.3

    def slow():
        time.sleep(max(0.0, late - time.monotonic()))
        return _barrier(nodes[2], 10)

    released = together(lambda: _barrier(nodes[0], 10), lambda: _barrier(nodes[1], 10), slow)
    assert all(isinstance(t, float) and t >= late for t in released), released


def test_barrier_repeats(make_coordinator, make_fake):
    """Successive barriers on the coordinator clients all complete, in order."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    for _ in range(5):
        assert together(*[lambda f=f: f.client.barrier(timeout=5) for f in fakes]) == [None, None]


def test_barrier_missing_node_times_out(start_nodes):
    """A barrier that node 2 never enters raises BarrierTimeout on the others after their timeout."""
    nodes = start_nodes(3)
    results = together(lambda: _barrier(nodes[0], 0.5), lambda: _barrier(nodes[1], 0.5))
    for exc in results:
        assert isinstance(exc, BarrierTimeout), exc
        assert "did not complete within 0.5 s" in str(exc)


def test_barrier_timeout_names_missing_node(make_coordinator, make_fake):
    """BarrierTimeout.missing lists the rank that never arrived (as errors.py documents), and the message names it."""
    coord = make_coordinator(3)
    fakes = [make_fake(coord.address, r, 3) for r in range(3)]
    together(*[f.join for f in fakes])
    results = together(*[lambda f=f: f.client.barrier(timeout=0.5) for f in fakes[:2]])
    for exc in results:
        assert isinstance(exc, BarrierTimeout) and exc.missing == [2] and "2" in str(exc)


# ---- heartbeats, failures and leaving -------------------------------------------------------------


def test_heartbeat_silent_node_fails_the_others(start_nodes, make_fake):
    """A node that stops heartbeating is declared failed after failure_timeout; the others get NodeFailure
    naming it, and their API calls raise it."""
    address = f"127.0.0.1:{free_port()}"
    fake = make_fake(address, 2, 3)
    joined = {}
    t = threading.Thread(target=lambda: joined.setdefault("map", _catch(fake.join)), name="test-fake-join")
    t.start()
    nodes = start_nodes(3, ranks=[0, 1], address=address, failure_timeout=FAST["failure_timeout"])
    t.join(PATIENCE)
    assert all(isinstance(n, pskv.Node) for n in nodes) and isinstance(joined["map"], dict), (nodes, joined)
    fake.silence()
    wait_until(lambda: all("failed" in repr(n) for n in nodes), what="NodeFailure on nodes 0 and 1")
    # not before failure_timeout, counted from the fake's last message (the coordinator heard it no earlier)
    assert time.monotonic() - fake.last_sent > FAST["failure_timeout"]
    for node in nodes:
        with pytest.raises(NodeFailure, match=r"node 2 \(127\.0\.0\.1:\d+\) failed: missed heartbeats, last seen "
                                              r"\d+\.\d s ago") as info:
            node.worker()
        assert info.value.node_id == 2 and info.value.address == fake.transport.address


def test_heartbeat_stalled_node_learns_it_was_declared_failed(make_coordinator, make_fake):
    """A node that stalled past failure_timeout and resumes gets NodeFailure naming itself, not the coordinator."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    fakes[1].silence()
    wait_until(lambda: fakes[0].failures, what="node 1 declared failed")
    fakes[1].resume()
    wait_until(lambda: fakes[1].failures, what="node 1 told")
    assert fakes[1].failures[0].node_id == 1, fakes[1].failures[0]


def test_heartbeat_live_nodes_stay_up(make_coordinator, make_fake):
    """Nodes that keep heartbeating are not failed, even after several failure timeouts."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    time.sleep(1.5)  # one and a half failure timeouts
    assert [f.failures for f in fakes] == [[], []] and coord.failures == []


def test_heartbeat_silent_coordinator_fails_nodes(make_coordinator, make_fake):
    """When the coordinator goes silent, each node gets NodeFailure(node_id=-1) naming it after failure_timeout."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    coord.close()
    wait_until(lambda: all(f.failures for f in fakes), what="coordinator silence noticed")
    for f in fakes:
        (exc,) = f.failures
        assert exc.node_id == -1 and exc.address == coord.address
        assert f"the coordinator ({coord.address}) has been silent for" in str(exc)


def test_report_failure_tells_every_other_node(make_coordinator, make_fake):
    """report_failure(rank, reason) reaches every node as NodeFailure with that rank and reason, once."""
    coord = make_coordinator(3)
    fakes = [make_fake(coord.address, r, 3) for r in range(3)]
    together(*[f.join for f in fakes])
    coord.report_failure(1, "process exited with status 3")
    coord.report_failure(1, "process exited with status 3")
    wait_until(lambda: fakes[0].failures and fakes[2].failures, what="failure broadcast")
    for f in (fakes[0], fakes[2]):
        (exc,) = f.failures
        assert exc.node_id == 1 and "process exited with status 3" in str(exc)
    assert coord.failures == [(1, "process exited with status 3")]


def test_abort_from_a_node_fails_the_others(make_coordinator, make_fake):
    """A node's ABORT(reason) makes the coordinator fail it on every other node with that reason."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    fakes[0].client.abort("worker thread 0 raised ValueError('x')")
    wait_until(lambda: fakes[1].failures, what="abort broadcast")
    assert fakes[1].failures[0].node_id == 0 and "ValueError('x')" in str(fakes[1].failures[0])


def test_bye_waits_for_every_node(make_coordinator, make_fake):
    """bye() returns True only once every node said bye; the coordinator then finishes."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    assert fakes[0].client.bye(timeout=0.3) is False  # node 1 has not left yet
    assert together(*[lambda f=f: f.client.bye(timeout=5) for f in fakes]) == [True, True]
    coord._thread.join(PATIENCE)
    assert not coord._thread.is_alive()


def test_coordinator_ignores_messages_of_another_cluster(make_coordinator, make_fake):
    """A BARRIER carrying another cluster id is dropped: the barrier does not complete without the real node."""
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    together(*[f.join for f in fakes])
    fakes[1].transport.send(COORDINATOR, control(Kind.BARRIER, coord.cluster ^ 1, 1, {"gen": 0}))
    with pytest.raises(BarrierTimeout):
        fakes[0].client.barrier(timeout=0.5)

