"""Elastic membership without backups: a node leaves a running cluster (node.leave()) in the middle of
a push storm from every node; it hands its rows, updater state and key ranges to the others first
(server.handoff), and every row then equals a replay of every push ever made, the leaver's
included (tests/fault/ft_scenarios.py `storm` with backups=0)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import replay_pushes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SCENARIOS = str(Path(__file__).parent.parent / "fault" / "ft_scenarios.py")
ROWS = 600


@pytest.mark.parametrize("nodes,leaver,updater,localize", [
    (3, 2, "adagrad", 0),  # its range goes to node 0; Adagrad state moves with the rows
    (3, 1, "add", 1),  # every node localizes random keys: rows moved to the leaver go back to their managers
    (4, 2, "adagrad", 1),
], ids=["adagrad", "localized-rows", "four-nodes"])
def test_node_leaves_without_backups_and_nothing_is_lost(cluster_factory, tmp_path, nodes, leaver, updater, localize):
    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, "storm", str(out), str(ROWS), updater, "1", "0",
                                      str(localize), str(leaver)], backups=0)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    members = [r for r in range(nodes) if r != leaver]
    assert f"node {leaver} left after 301 pushes" in cluster.output(leaver), cluster.logs_tail()
    for rank in members:
        assert f"membership epoch 2, members {members}" in cluster.output(rank), cluster.logs_tail()
    final = np.load(out / "final.npy")
    sent = {r: np.bincount(np.fromfile(out / f"sent-{r}", np.int64), minlength=ROWS) for r in range(nodes)}
    acked = {r: np.bincount(np.fromfile(out / f"acked-{r}", np.int64), minlength=ROWS) for r in range(nodes)}
    replay = replay_pushes(updater, nodes, int(max(s.max() for s in sent.values())))
    assert acked[leaver].sum() == 301 * 16
    for r in range(nodes):
        assert (sent[r] == acked[r]).all(), f"node {r} did not see all its pushes complete"
        wrong = final[:, r] != replay[acked[r]]
        assert not wrong.any(), f"node {r}: {int(wrong.sum())} rows differ from a replay of its pushes"


JOIN_SCENARIOS = str(Path(__file__).parent / "elastic_scenarios.py")


def _joiner(cluster, out: Path, args: list[str], tmp_path: Path, name: str = "joiner"):
    """Start a node that joins `cluster` (PSKV_JOIN); returns (Popen, its log path)."""
    import os
    import subprocess
    log = tmp_path / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    env.update(PSKV_JOIN=cluster.coordinator_address, PSKV_SECRET_FILE=cluster.secret_file, PYTHONUNBUFFERED="1")
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, JOIN_SCENARIOS, *args], stdout=f, stderr=subprocess.STDOUT, env=env)
    return proc, log


@pytest.fixture
def processes():
    """Processes a test started itself: each is killed (by its PID) and reaped at the end."""
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.long
@pytest.mark.parametrize("updater", ["add", "adagrad"])
def test_a_node_joins_and_another_leaves_during_a_push_storm(cluster_factory, tmp_path, processes, updater):
    """3 nodes push; node 3 joins (pskv.init(join=...)), takes its share of every range and pushes too;
    then node 1 leaves, handing everything over. Every row equals a replay of every push made."""
    from helpers import wait_or_dump, wait_until
    nodes, columns = 3, 4
    out = tmp_path / "out"
    out.mkdir()
    args = ["storm", str(out), str(ROWS), updater, "2", "1", str(columns)]
    cluster = cluster_factory(nodes, [sys.executable, JOIN_SCENARIOS, *args])
    for rank in range(nodes):
        wait_until(lambda: "storm running" in cluster.output(rank), 60, lambda: cluster.logs_tail())
    proc, log = _joiner(cluster, out, args, tmp_path)
    processes.append(proc)
    assert wait_or_dump(cluster, 120, (proc, log)) == 0, cluster.logs_tail() + log.read_text()
    assert proc.wait(30) == 0, log.read_text()
    text = log.read_text()
    assert "storm started as node 3, members [0, 1, 2, 3], owns 150 rows" in text, text  # 1/4 of each range
    assert "node 1 left after" in cluster.output(1), cluster.logs_tail()
    for rank in (0, 2):
        assert "node 3 joined; membership epoch 2" in cluster.output(rank), cluster.logs_tail()
        assert "node 1 left; membership epoch 3, members [0, 2, 3]" in cluster.output(rank), cluster.logs_tail()
    final = np.load(out / "final.npy")
    sent = {r: np.bincount(np.fromfile(out / f"sent-{r}", np.int64), minlength=ROWS) for r in range(columns)}
    acked = {r: np.bincount(np.fromfile(out / f"acked-{r}", np.int64), minlength=ROWS) for r in range(columns)}
    replay = replay_pushes(updater, columns, int(max(s.max() for s in sent.values())))
    assert acked[3].sum() == 300 * 16
    for r in range(columns):
        assert (sent[r] == acked[r]).all(), f"node {r} did not see all its pushes complete"
        wrong = final[:, r] != replay[acked[r]]
        assert not wrong.any(), f"node {r}: {int(wrong.sum())} rows differ from a replay of its pushes"


@pytest.mark.parametrize("model", ["bsp", "ssp"])
def test_bsp_and_ssp_clocks_count_the_current_members(cluster_factory, tmp_path, model):
    """Two nodes step BSP (or SSP(1)) clocks; a third joins (its clocks start at the global clock, and
    the others' pulls wait for it from then on), then node 1 leaves (the others stop waiting for it).
    Nobody hangs, every node reads its own pushes as the model promises, and every push is in the table."""
    from helpers import wait_or_dump, wait_until

    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, JOIN_SCENARIOS, "clocks", str(out), "16", "3", model]
    first = cluster_factory(2, command)
    for r in range(2):
        wait_until(lambda: (out / f"running-{r}").exists(), 60, lambda: first.logs_tail(30))
    joiner = cluster_factory(1, command, join=first.coordinator_address, env={"PSKV_SECRET_FILE": first.secret_file})
    wait_until(lambda: (out / "running-2").exists(), 60, lambda: first.logs_tail(30) + joiner.logs_tail(30))
    (out / "leave-1").touch()
    wait_until(lambda: "left after" in first.output(1), 60, lambda: first.logs_tail(30) + joiner.logs_tail(30))
    (out / "stop").touch()
    wait_until(lambda: all((out / f"count-{r}").exists() for r in range(3)), 60,
               lambda: first.logs_tail(30) + joiner.logs_tail(30))
    (out / "counted").touch()
    for cluster in (first, joiner):
        assert wait_or_dump(cluster, 90) == 0, first.logs_tail(30) + joiner.logs_tail(30)
    start = int(joiner.output(0).split("clocks start at ")[1].split()[0])
    assert start >= 20, joiner.output(0)  # the cluster's clock when it joined
    assert "clocks done after" in joiner.output(0) and "members [0, 2]" in joiner.output(0), joiner.output(0)
    final = np.load(out / "final.npy")
    counts = [int((out / f"count-{r}").read_text()) for r in range(3)]
    assert [int(final[:, r].sum()) for r in range(3)] == counts


def join_leave_cycles(cluster_factory, tmp_path, seed: int, rounds: int = 3) -> None:
    """A cluster pushes without pause while, `rounds` times over, a node joins (`start_local(join=)`,
    as `pskv launch --join`) and then another (drawn by `seed`) leaves; every row must equal a
    replay of every push made, and every node must have seen every change."""
    import random
    import time

    from helpers import wait_or_dump, wait_until
    rng = random.Random(seed)
    nodes, updater = rng.choice([2, 3]), rng.choice(["add", "adagrad"])
    columns = nodes + rounds
    print(f"\njoin/leave seed {seed}: {nodes} nodes, {updater}, {rounds} rounds", flush=True)
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, JOIN_SCENARIOS, "cycle", str(out), str(ROWS), updater, str(columns)]
    first = cluster_factory(nodes, command)
    clusters = {r: (first, r) for r in range(nodes)}  # rank -> (its Cluster, its index there)

    def logs() -> str:
        return "".join(c.logs_tail(30) for c in {id(c): c for c, _ in clusters.values()}.values())

    for r in range(nodes):
        wait_until(lambda: (out / f"running-{r}").exists(), 60, lambda: f"node {r} running\n{logs()}")
    members = list(range(nodes))
    for k in range(rounds):
        rank = nodes + k  # ranks are never reused: the next is one past the highest so far
        clusters[rank] = (cluster_factory(1, command, join=first.coordinator_address,
                                          env={"PSKV_SECRET_FILE": first.secret_file}), 0)
        wait_until(lambda: (out / f"running-{rank}").exists(), 60, lambda: f"node {rank} joined and running\n{logs()}")
        time.sleep(rng.uniform(0.0, 0.3))
        leaver = rng.choice(members)
        (out / f"leave-{leaver}").touch()
        cluster, index = clusters[leaver]
        wait_until(lambda: "left after" in cluster.output(index), 60, lambda: f"node {leaver} left\n{logs()}")
        members = sorted(set(members) - {leaver} | {rank})
    (out / "stop").touch()
    for cluster in {id(c): c for c, _ in clusters.values()}.values():
        assert wait_or_dump(cluster, 90) == 0, logs()
    epoch = 1 + 2 * rounds
    for rank in members:
        cluster, index = clusters[rank]
        text = cluster.output(index)
        assert f"membership epoch {epoch}, members {members}" in text, logs()
        assert "cycle done after" in text and f"members {members}, {len(members)} nodes" in text, logs()
    for rank in range(nodes, columns):
        cluster, index = clusters[rank]
        owned = int(cluster.output(index).split("owns ")[1].split()[0])
        assert owned > 0, f"node {rank} joined but took no rows: {logs()}"
    final = np.load(out / "final.npy")
    sent = {r: np.bincount(np.fromfile(out / f"sent-{r}", np.int64), minlength=ROWS) for r in range(columns)}
    acked = {r: np.bincount(np.fromfile(out / f"acked-{r}", np.int64), minlength=ROWS) for r in range(columns)}
    replay = replay_pushes(updater, columns, int(max(s.max() for s in sent.values())))
    for r in range(columns):
        assert (sent[r] == acked[r]).all(), f"node {r} did not see all its pushes complete"
        wrong = final[:, r] != replay[acked[r]]
        assert not wrong.any(), f"node {r}: {int(wrong.sum())} rows differ from a replay of its pushes"


@pytest.mark.timeout(240)
def test_nodes_join_and_leave_three_times_over_during_a_push_storm(cluster_factory, tmp_path):
    join_leave_cycles(cluster_factory, tmp_path, seed=1)
