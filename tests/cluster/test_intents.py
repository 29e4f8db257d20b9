"""Intent signaling (client.intents, server.intents) on real multi-process clusters: exact values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import wait_until

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


def test_intents_on_every_option_then_a_checkpoint_restores_onto_three_nodes(cluster_factory, tmp_path):
    """2 nodes x 2 threads intend, push (push_pull too) and pull on a table per option (disk, location
    caches, replicas, pool sampling, BSP + Cache, filters; through shared memory): exact sums; intents
    on a sparse and an aggregated table have no effect; a checkpoint restored onto 3 nodes holds the
    sums, and intents and pushes go on exactly."""
    ckpt = str(tmp_path / "ckpt")
    _run(cluster_factory, 2, 2, "compose", str(tmp_path), ckpt)
    _run(cluster_factory, 3, 1, "restored", str(tmp_path), ckpt, "4", restore=ckpt)


def test_intents_while_a_node_joins_and_another_leaves(cluster_factory, tmp_path):
    """Nodes 0 and 1 train with intents; node 2 joins and all train; node 1 leaves: exact sums, and
    intents keep working on the members left."""
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, SCENARIOS, "elastic", str(out)]
    first = cluster_factory(2, command)
    for r in range(2):
        wait_until((out / f"ready-{r}").exists, 120, lambda: first.logs_tail(30))
    joiner = cluster_factory(1, command, join=first.coordinator_address, env={"PSKV_SECRET_FILE": first.secret_file})
    assert joiner.wait(timeout=150) == 0, joiner.logs_tail()
    assert first.wait(timeout=150) == 0, first.logs_tail()
    assert "elastic ok node=2" in joiner.output(0) and "elastic ok node=0" in first.output(0), first.logs_tail()
    assert "node 1 left" in first.output(1), first.logs_tail()
