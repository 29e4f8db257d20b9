"""A node joins a cluster with backups (membership.joining) in the middle of a push storm from every node;
it enters the chains (an extra copy at the end of range 0's chain), gets its copy by SNAPSHOT and
pushes too. Then, in some tests, a node is SIGKILLed or leaves (node.leave()). Every row, pulled on
every member, equals a replay of every acknowledged push; every backup copy (the joiner's too) and
every reader's copy equals the head's rows (tests/cluster/elastic_backups_scenarios.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import replay_pushes, wait_or_dump, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCENARIOS = str(Path(__file__).parent / "elastic_backups_scenarios.py")
ROWS, NODES, COLUMNS = 600, 3, 4  # node 3 joins
# seconds of silence before a node counts as dead: a joiner compiling numba kernels cold under CI load
# (load 11-36) was silent for over 3 s and cut off (the product default is 10 s)
FAILURE_TIMEOUT = 8.0
BOUNDS = [i * ROWS // NODES for i in range(NODES + 1)]


class Storm:
    """Three nodes with backups=1 push; a fourth joins them. The test moves it on through files."""

    def __init__(self, cluster_factory, tmp_path: Path, updater: str, localize: int, coordinator=True,
                 kill: tuple[int, str] | None = None) -> None:
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.updater = updater
        command = [sys.executable, SCENARIOS, "storm", str(self.out), str(ROWS), updater, str(COLUMNS), str(localize)]
        self.first = cluster_factory(NODES, command, backups=1, failure_timeout=FAILURE_TIMEOUT, coordinator=coordinator)
        self.wait_files([f"running-{r}" for r in range(NODES)])
        self.joiner = cluster_factory(1, command, join=self.first.coordinator_address,
                                      env={"PSKV_SECRET_FILE": self.first.secret_file})
        if kill is not None:  # (victim, "" or what node 1 logs first): while the joiner comes in
            victim, after = kill
            if after:
                wait_until(lambda: after in self.first.output(1), 90, lambda: f"{after!r}\n{self.logs()}")
            self.first.kill(victim)
            return
        self.wait_files(["running-3"])
        self.wait_files([f"seen-2-{r}" for r in range(NODES)])  # pushes after the join and the entry

    def logs(self) -> str:
        return self.first.logs_tail(40) + self.joiner.logs_tail(40)

    def output(self, rank: int) -> str:
        return self.joiner.output(0) if rank == NODES else self.first.output(rank)

    def wait_files(self, names: list[str]) -> None:
        wait_until(lambda: all((self.out / name).exists() for name in names), 90,
                   lambda: f"files {names}\n{self.logs()}")

    def finish(self, members: list[int], epoch: int) -> None:
        """Stop the storm; both launches exit 0 and every member ended in membership epoch `epoch`."""
        (self.out / "stop").touch()
        for cluster in (self.first, self.joiner):
            assert wait_or_dump(cluster, 120) == 0, self.logs()
        for rank in members:
            assert f"membership epoch {epoch}, members {members}" in self.output(rank), self.logs()

    def check(self, members: list[int], dead: tuple[int, ...] = ()) -> None:
        """Every member pulled the same table; a live node's (or a leaver's) column is exactly the replay
        of its acknowledged pushes, a dead one's holds each acknowledged push once and nothing it did not
        send; backup and reader copies equal the head's rows."""
        final = np.load(self.out / f"final-{members[0]}.npy")
        for rank in members[1:]:
            assert np.array_equal(np.load(self.out / f"final-{rank}.npy"), final), f"node {rank} pulled other rows"
        sent = {r: np.bincount(np.fromfile(self.out / f"sent-{r}", np.int64), minlength=ROWS) for r in range(COLUMNS)}
        acked = {r: np.bincount(np.fromfile(self.out / f"acked-{r}", np.int64), minlength=ROWS) for r in range(COLUMNS)}
        replay = replay_pushes(self.updater, COLUMNS, int(max(s.max() for s in sent.values())))
        for r in range(COLUMNS):
            col = final[:, r]
            assert acked[r].sum() > 0, f"node {r} made no push"
            if r not in dead:
                assert (sent[r] == acked[r]).all(), f"node {r} did not see all its pushes complete"
                wrong = col != replay[acked[r]]
                assert not wrong.any(), f"node {r}: {int(wrong.sum())} rows differ from a replay of its pushes"
                continue
            ok = np.zeros(ROWS, bool)
            for m in range(int(sent[r].max()) + 1):
                ok |= (col == replay[m]) & (acked[r] <= m) & (m <= sent[r])
            assert ok.all(), f"dead node {r}: {int((~ok).sum())} rows lost an acknowledged push or got one twice"
        copies = sorted(self.out.glob("backup-*.npy"))
        if NODES in members:
            assert any(p.name.startswith(f"backup-{NODES}-") for p in copies), f"the joiner holds no copy: {copies}"
        for path in copies:
            r = int(path.stem.split("-")[2])
            bad = np.flatnonzero((np.load(path) != final[BOUNDS[r]:BOUNDS[r + 1]]).any(axis=1))
            where = f"{len(bad)} rows, e.g. {BOUNDS[r] + bad[0]}" if len(bad) else ""
            assert not len(bad), f"{path.name} differs from the head's rows in {where}"
        for rank in members:
            keys = np.load(self.out / f"reader-{rank}-keys.npy")
            rows = np.load(self.out / f"reader-{rank}-rows.npy")
            assert np.array_equal(rows, final[keys]), f"node {rank}'s copies of the rows it holds differ"


@pytest.mark.parametrize("updater,localize", [("add", 0), ("adagrad", 1)], ids=["add", "adagrad-readers"])
def test_a_node_joins_a_cluster_with_backups_during_a_push_storm(cluster_factory, tmp_path, updater, localize):
    """Node 3 joins: epoch 2 makes it a member, epoch 3 puts it at the end of range 0's chain; it pushes
    too, and every row on every node equals a replay of every acknowledged push."""
    storm = Storm(cluster_factory, tmp_path, updater, localize)
    assert "storm started as node 3, members [0, 1, 2, 3], backs up key ranges [0]" in storm.output(3), storm.logs()
    storm.finish([0, 1, 2, 3], 3)
    for rank in range(NODES):
        text = storm.output(rank)
        assert "node 3 joined; membership epoch 2" in text and "node 3 entered the chains; membership epoch 3" in text
    storm.check([0, 1, 2, 3])


@pytest.mark.parametrize("victim,updater,localize,coordinator", [
    (0, "add", 0, True), (2, "adagrad", 1, True), (0, "add", 0, "node0"),
], ids=["head-of-the-joiners-range", "adagrad-readers", "coordinator-node"])
def test_a_head_dies_after_a_join_and_nothing_is_lost(cluster_factory, tmp_path, victim, updater, localize,
                                                      coordinator):
    """After the join, SIGKILL of a node that heads a range (node 0: range 0 goes to node 1, node 2 fills
    in before the joiner; node 2: range 2 goes to node 0): the others finish in epoch 4, exact. When
    node 0 ran the coordinator, node 1 takes it over and learns from the joiner's REJOIN what it is."""
    storm = Storm(cluster_factory, tmp_path, updater, localize, coordinator)
    storm.first.kill(victim)
    members = [r for r in range(COLUMNS) if r != victim]
    storm.wait_files([f"seen-3-{r}" for r in members if r < NODES] + ["seen-1-3"])
    storm.finish(members, 4)
    if coordinator == "node0":
        assert "node 1 takes it over" in storm.output(1), storm.logs()
    storm.check(members, dead=(victim,))


@pytest.mark.parametrize("after", ["", "node 3 joined", "node 3 entered the chains"],
                         ids=["as-it-starts", "once-a-member", "once-in-the-chains"])
def test_a_head_dies_while_a_node_joins_and_nothing_is_lost(cluster_factory, tmp_path, after):
    """SIGKILL of node 0 while the joiner comes in (as it starts, once it is a member, once it entered
    the chains and fills its copy of range 0 behind nodes 0 and 1): whatever the order, range 0 keeps
    a whole copy at its head, the joiner ends up in the chains, the others finish in epoch 4, exact."""
    storm = Storm(cluster_factory, tmp_path, "add", 0, kill=(0, after))
    storm.wait_files(["running-3", "seen-3-1", "seen-3-2"])
    storm.finish([1, 2, 3], 4)
    storm.check([1, 2, 3], dead=(0,))


@pytest.mark.parametrize("leaver,updater", [(1, "add"), (3, "adagrad")], ids=["a-starting-node", "the-joiner"])
def test_a_node_leaves_after_a_join_and_nothing_is_lost(cluster_factory, tmp_path, leaver, updater):
    """After the join, node.leave() of a starting node (range 1 goes to node 2, range 0's chain becomes
    [0, 2, 3]) or of the joiner (range 0's chain is [0, 1] again): the others finish in epoch 4, exact."""
    storm = Storm(cluster_factory, tmp_path, updater, 0)
    (storm.out / f"leave-{leaver}").touch()
    wait_until(lambda: f"node {leaver} left after" in storm.output(leaver), 90, storm.logs)
    members = [r for r in range(COLUMNS) if r != leaver]
    storm.wait_files([f"seen-3-{r}" for r in members if r < NODES] + ([] if leaver == NODES else ["seen-1-3"]))
    storm.finish(members, 4)
    storm.check(members)
