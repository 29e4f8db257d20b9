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
