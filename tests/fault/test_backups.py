"""Backups (pskv.init(backups=B)): nodes really die (SIGKILL) or stop (SIGSTOP) in the middle of a
push storm from every node; the survivors finish, no acknowledged push is lost and none is
applied twice, and every backup copy equals its head bit for bit (tests/fault/ft_scenarios.py)."""

from __future__ import annotations

import signal
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import pskv
from helpers import replay_pushes, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SCENARIOS = str(Path(__file__).parent / "ft_scenarios.py")
ROWS = 600
FAILURE_TIMEOUT = 3.0


def _storm(cluster_factory, tmp_path, nodes, updater="add", changes=1, backups=1, coordinator=True, hot=0,
           localize=0, leaver=-1):
    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, "storm", str(out), str(ROWS), updater, str(changes),
                                      str(hot), str(localize), str(leaver)],
                              backups=backups, failure_timeout=FAILURE_TIMEOUT, coordinator=coordinator)
    return cluster, out


def _running(cluster, rank):
    wait_until(lambda: "storm running" in cluster.output(rank), 60,
               lambda: f"node {rank} to be in its storm\n{cluster.logs_tail()}")


def _survivors_finish(cluster, epoch: int, members: list[int]) -> None:
    """The launch exits 0, and every survivor logged the membership epoch it ended in."""
    assert cluster.wait(timeout=90) == 0, cluster.logs_tail()
    for rank in members:
        assert f"membership epoch {epoch}, members {members}" in cluster.output(rank), cluster.logs_tail()


def _counts(out: Path, name: str, rank: int) -> np.ndarray:
    return np.bincount(np.fromfile(out / f"{name}-{rank}", np.int64), minlength=ROWS)


def _check(out: Path, nodes: int, dead: list[int], updater: str = "add", hot: np.ndarray | None = None) -> None:
    """Survivors' columns: exactly their acknowledged pushes. The dead's: at least their acknowledged
    ones, at most what they sent (in flight when they died); on replicated (`hot`) rows, whatever
    it had synced: from none to all it sent. Backups: equal to the head's rows."""
    final = np.load(out / "final.npy")
    synced = np.zeros(ROWS, bool)
    if hot is not None:
        synced[hot] = True
    sent = {r: _counts(out, "sent", r) for r in range(nodes)}
    acked = {r: _counts(out, "acked", r) for r in range(nodes)}
    replay = replay_pushes(updater, nodes, int(max(s.max() for s in sent.values())))
    for r in range(nodes):
        col = final[:, r]
        if r not in dead:
            assert (sent[r] == acked[r]).all(), f"survivor {r} did not see all its pushes complete"
            assert (col == replay[acked[r]]).all(), (
                f"node {r}: {int((col != replay[acked[r]]).sum())} rows differ from its acknowledged pushes")
        else:
            assert acked[r].sum() > 0
            possible = [(col == replay[m]) for m in range(int(sent[r].max()) + 1)]
            ok = np.zeros(ROWS, bool)
            for m, hit in enumerate(possible):
                ok |= hit & ((acked[r] <= m) | synced) & (m <= sent[r])
            assert ok.all(), f"dead node {r}: {int((~ok).sum())} rows lost an acknowledged push or got one twice"
    bounds = [i * ROWS // nodes for i in range(nodes + 1)]
    copies = sorted(out.glob("backup-*.npy"))
    assert copies, "no backup copies were written"
    for path in copies:
        r = int(path.stem.split("-")[2])
        cold = ~synced[bounds[r]:bounds[r + 1]]  # replicated rows live in the replicas, not in the ranges
        copy, head = np.load(path), final[bounds[r]:bounds[r + 1]]
        bad = np.flatnonzero(cold & (copy != head).any(axis=1))
        assert not len(bad), (f"{path.name} differs from its head in {len(bad)} rows, e.g. row {bounds[r] + bad[0]}: "
                              f"{copy[bad[0]].tolist()} here, {head[bad[0]].tolist()} at the head")


@pytest.mark.parametrize("nodes,victim,updater,coordinator", [
    (3, 2, "add", True),  # nodes 0 and 1 finish; launch status 0
    (4, 1, "adagrad", True),  # its range moves to node 2, node 3 becomes a backup; rows equal a replay
    (3, 0, "add", True),  # under the launcher (which runs the coordinator) node 0 is no special node
    (3, 0, "add", "node0"),  # no launcher: node 0 runs the coordinator, and node 1 takes it over
], ids=["three-nodes", "adagrad-four-nodes", "node-zero", "coordinator-node"])
def test_one_kill_during_push_storm(cluster_factory, tmp_path, nodes, victim, updater, coordinator):
    """SIGKILL of one node while every node pushes: the survivors finish in epoch 2; every row of a
    survivor equals a replay of its acknowledged pushes, the dead node's hold at least its acknowledged
    ones and none twice, and every copy equals its head. When node 0 ran the coordinator, node 1 takes
    it over after failure_timeout, the others rejoin it, and the barriers after the storm work under it."""
    cluster, out = _storm(cluster_factory, tmp_path, nodes, updater=updater, coordinator=coordinator)
    _running(cluster, victim)
    cluster.kill(victim)
    _survivors_finish(cluster, 2, [r for r in range(nodes) if r != victim])
    if coordinator == "node0":
        assert "node 1 takes it over" in cluster.output(1), cluster.logs_tail()
    _check(out, nodes, dead=[victim], updater=updater)


def test_two_kills_in_a_row(cluster_factory, tmp_path):
    """Node 3 dies, the ranges are copied again (re-replication), then node 1 dies: the two left
    still hold every acknowledged push."""
    cluster, out = _storm(cluster_factory, tmp_path, 4, changes=2)
    _running(cluster, 3)
    cluster.kill(3)
    wait_until(lambda: all("membership epoch 2" in cluster.output(r) for r in (0, 1, 2)), 60,
               lambda: f"epoch 2 everywhere\n{cluster.logs_tail()}")
    cluster.kill(1)
    _survivors_finish(cluster, 3, [0, 2])
    _check(out, 4, dead=[1, 3])


def test_two_backups_two_kills_at_once(cluster_factory, tmp_path):
    """backups=2 on 4 nodes: nodes 1 and 2 are killed together; every range keeps a whole copy on
    node 0 or 3, which finish with every acknowledged push."""
    cluster, out = _storm(cluster_factory, tmp_path, 4, changes=2, backups=2)
    _running(cluster, 1)
    cluster.kill(1)
    cluster.kill(2)
    _survivors_finish(cluster, 3, [0, 3])
    _check(out, 4, dead=[1, 2])


def test_kill_with_replicated_hot_keys(cluster_factory, tmp_path):
    """A table with 20 rows replicated on every node (NuPS) and backups: node 2 dies; the replica syncs
    stop waiting for it; after a last sync the survivors' replicas are equal, hold every push of
    theirs exactly, and of node 2's whatever it had synced."""
    cluster, out = _storm(cluster_factory, tmp_path, 3, hot=20)
    _running(cluster, 2)
    cluster.kill(2)
    _survivors_finish(cluster, 2, [0, 1])
    hot = np.arange(0, ROWS, ROWS // 20)
    _check(out, 3, dead=[2], hot=hot)
    replicas = [np.load(out / f"replica-{r}.npy") for r in (0, 1)]
    assert (replicas[0] == replicas[1]).all() and (replicas[0] == np.load(out / "final.npy")[hot]).all()


@pytest.mark.parametrize("victim,coordinator", [(1, True), (0, "node0")], ids=["node", "coordinator-node"])
def test_stopped_node_is_fenced(cluster_factory, tmp_path, victim, coordinator):
    """SIGSTOP past failure_timeout of node 1, or of node 0 while it runs the coordinator (then node 1
    takes the coordinator over): the others go on without it (heartbeat silence); after SIGCONT it
    learns it is out (Fenced; a taken-over coordinator's term outranks its own) and changes nothing:
    the survivors finish and their sums stay exact."""
    cluster, out = _storm(cluster_factory, tmp_path, 3, coordinator=coordinator)
    others = [r for r in range(3) if r != victim]
    _running(cluster, victim)
    cluster.kill(victim, signal.SIGSTOP)
    try:
        wait_until(lambda: all("membership epoch 2" in cluster.output(r) for r in others), 60,
                   lambda: f"epoch 2 on nodes {others}\n{cluster.logs_tail()}")
    finally:
        cluster.kill(victim, signal.SIGCONT)
    cluster.wait(timeout=90)
    assert "Fenced" in cluster.output(victim), cluster.logs_tail()
    for rank in others:
        assert "storm finished" in cluster.output(rank), cluster.logs_tail()
    _check(out, 3, dead=[victim])


def test_kill_during_a_checkpoint(cluster_factory, tmp_path):
    """backups=1, 3 nodes: node 2 dies while writing checkpoint 1; nodes 0 and 1 see the new epoch and
    take it again as checkpoint 2, which holds every row (node 2's range from its backup), equal to
    the table then; checkpoint 1 stays incomplete."""
    from pskv.checkpoint import format as fmt

    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "checkpoint", str(out), str(ROWS)], backups=1,
                              failure_timeout=FAILURE_TIMEOUT)
    _survivors_finish(cluster, 2, [0, 1])
    assert "checkpoint checkpoint-000002, members [0, 1]" in cluster.output(0), cluster.logs_tail()
    assert [(s, done) for s, _, done in fmt.steps(out / "ckpt")] == [(1, False), (2, True)]
    saved = pskv.load_checkpoint(out / "ckpt")["w"]
    assert (saved.values == np.load(out / "at-checkpoint.npy")).all()
    assert (saved.state["accumulator"] > 0).any(axis=1).sum() > ROWS // 2


def _readers(out: Path, survivors: list[int]) -> int:
    """Every row a survivor holds (its ranges and the keys it reads) equals the final table; returns
    how many keys the survivors read beyond their own ranges."""
    final = np.load(out / "final.npy")
    extra = 0
    for rank in survivors:
        keys = np.load(out / f"reader-{rank}-keys.npy")
        rows = np.load(out / f"reader-{rank}-rows.npy")
        assert (rows == final[keys]).all(), f"node {rank}: {int((rows != final[keys]).any(axis=1).sum())} stale copies"
        extra += len(keys)
    return extra - ROWS  # the survivors' ranges cover every row once


def test_kill_during_localize(cluster_factory, tmp_path):
    """backups=1, 3 nodes: every node localizes 20 random keys every 25 pushes (it becomes their
    reader, or is declined when another node reads them) while node 1 is killed; the survivors'
    sums stay exact, and every copy a survivor reads locally equals the final table."""
    cluster, out = _storm(cluster_factory, tmp_path, 3, updater="adagrad", localize=1)
    _running(cluster, 1)
    cluster.kill(1)
    _survivors_finish(cluster, 2, [0, 2])
    _check(out, 3, dead=[1], updater="adagrad")
    assert _readers(out, [0, 2]) > 0, "no survivor read any key of another range"


def test_node_leaves_in_the_middle_of_a_push_storm(cluster_factory, tmp_path):
    """node.leave() of node 2 of 4 (backups=1, Adagrad) while the others push: its pushes complete first,
    the others go on in epoch 2 and finish; every row equals a replay of every push, node 2's included
    (nothing was in flight when it left); the launch exits 0."""
    cluster, out = _storm(cluster_factory, tmp_path, 4, updater="adagrad", leaver=2)
    _survivors_finish(cluster, 2, [0, 1, 3])
    assert "node 2 left after 301 pushes" in cluster.output(2), cluster.logs_tail()
    assert "node 2 left; membership epoch 2" in cluster.output(0), cluster.logs_tail()
    _check(out, 4, dead=[2], updater="adagrad")
    sent, acked = (np.fromfile(out / f"{name}-2", np.int64) for name in ("sent", "acked"))
    assert len(sent) == len(acked) == 301 * 16


def test_the_last_member_cannot_leave_and_aggregated_tables_need_backups():
    with pskv.init() as node:
        with pytest.raises(pskv.ClusterError, match="it is the last member; call shutdown"):
            node.leave()
        node.table("agg", 10, 2, aggregate=pskv.NodeAggregate())
        with pytest.raises(pskv.ConfigError, match=r"cannot move the aggregation state of table\(s\) \['agg'\]"):
            node.leave()


def test_aggregated_table_kill(cluster_factory, tmp_path, victim=0):
    """aggregate=pskv.NodeAggregate() with backups: each node's per-round sum of its two threads is a
    chain-replicated push whose tail answers with the rows after it. Node 0 dies (its ranges move to
    node 1, node 2's copy is filled again); the survivors' rounds all complete, every pulled
    row is exactly what the node's own rounds made it, and the final table holds every completed
    round once."""
    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "aggregate", str(out), str(ROWS), "1"],
                              backups=1, failure_timeout=FAILURE_TIMEOUT)
    _running(cluster, victim)
    cluster.kill(victim)
    survivors = [r for r in range(3) if r != victim]
    _survivors_finish(cluster, 2, survivors)
    for rank in survivors:
        assert "wrong rows pulled 0," in cluster.output(rank), cluster.logs_tail()
    _check(out, 3, dead=[victim])


@pytest.mark.parametrize("acked", [0, 150], ids=["killed", "after-its-round-write"])
def test_aggregated_bsp_table_kill(cluster_factory, tmp_path, acked, victim=0):
    """A BSP aggregated table with backups: every node pushes the same keys each round, and a
    round of a key completes with every live node's sum, at its range's head, as one replicated
    write (server.rounds). Node 0 dies mid-run (its ranges, and the coordinator, move): SIGKILLed
    by the test, or by itself once the tail acknowledged its 150th round write, before it answered
    the nodes (the new head then answers their sums of that round at once). The survivors' 400
    rounds all complete; every pulled row holds exactly 2 x the rounds of the key in each
    survivor's column (the rounds included both); the final table holds each survivor's rounds
    once, the dead node's acknowledged ones, and backups equal heads."""
    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "aggregate", str(out), str(ROWS), "1", str(victim),
                                  str(acked)], backups=1, failure_timeout=FAILURE_TIMEOUT)
    if not acked:
        _running(cluster, victim)
        cluster.kill(victim)
    survivors = [r for r in range(3) if r != victim]
    _survivors_finish(cluster, 2, survivors)
    for rank in survivors:
        assert "aggregated rounds 400, wrong rows pulled 0," in cluster.output(rank), cluster.logs_tail()
    level2 = [re.search(r"<Rounds table='w' completed=(\d+) waiting=0 answered_again=(\d+)>", cluster.output(r))
              for r in survivors]
    assert all(level2), cluster.logs_tail()
    completed, again = [int(m.group(1)) for m in level2], [int(m.group(2)) for m in level2]
    assert min(completed) > 0 and sum(completed) > 400 * 16 // 2, completed  # (at least their own ranges')
    if acked:
        assert sum(again) > 0, again  # the round node 0 wrote but never answered: answered by its new head
    _check(out, 3, dead=[victim])
