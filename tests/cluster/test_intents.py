"""Intent signaling (client.intents, server.intents) on real multi-process clusters: exact values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("intent_scenarios.py"))


def _run(cluster_factory, nodes: int, threads: int, *args: str, **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads, **kwargs)
    status = cluster.wait(timeout=150)
    assert status == 0, cluster.logs_tail()
    for rank in range(nodes):
        assert f"{args[0]} ok" in cluster.output(rank), cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("nodes", [2, 3])
def test_keys_move_to_their_only_intending_node_and_shared_keys_stay(cluster_factory, nodes):
    """A key one node intends moves there ahead of its window (also past another node's lease), a
    key several intend stays with the node that intended it first, ended windows leave no intent at
    the managers, moved keys stay; pulls of moved keys send no message; sums exact."""
    _run(cluster_factory, nodes, 1, "decide")


@pytest.mark.parametrize("variant", ["async", "bsp", "replicate"])
def test_intents_keep_sums_exact(cluster_factory, variant):
    """3 nodes x 2 threads intend, push and pull random keys while intents move them: exact sums."""
    _run(cluster_factory, 3, 2, "exact", variant)


def test_intents_with_backups_keep_sums_exact(cluster_factory):
    """With backups=1 an intent's move makes the node a reader (as localize); sums exact."""
    _run(cluster_factory, 3, 2, "exact", "backups", backups=1)
