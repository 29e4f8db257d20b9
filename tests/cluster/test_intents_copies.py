"""Copies of keys several nodes intend (client.intent_sync, server.intents grants) on real clusters: exact sums."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import wait_until
from pskv.checkpoint import format as fmt

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("intent_copy_scenarios.py"))
SHARED, ROWS = np.arange(3, 600, 20), 600  # (intent_copy_scenarios.SHARED, intent_scenarios.ROWS)


def _run(cluster_factory, nodes: int, threads: int, *args: str, **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads, **kwargs)
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    for rank in range(nodes):
        assert f"{args[0]} ok" in cluster.output(rank), cluster.logs_tail()


@pytest.mark.parametrize(("nodes", "threads", "variant"),
                         [(2, 2, "async"), (3, 2, "async"), (2, 2, "bsp"), (3, 1, "ssp")])
def test_every_node_copies_the_keys_all_intend_and_pushes_reach_the_owners_once(cluster_factory, nodes, threads,
                                                                                variant):
    """Every worker intends the same 30 keys: each node serves the ones it does not own from copies
    (pulls counted by the copies), pushes of ones reach the owners exactly once, the copies go when the
    windows end."""
    _run(cluster_factory, nodes, threads, "copies", variant)


@pytest.mark.parametrize("nodes", [2, 3])
def test_a_checkpoint_taken_while_copies_hold_unsent_pushes_has_them_all(cluster_factory, tmp_path, nodes):
    """No sync rounds (flushes only): at the checkpoint every copy holds 15 unsent pushes of ones of its
    node; the checkpoint holds every push of every node exactly once, and training goes on to the exact end."""
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, nodes, 1, "copies", "checkpoint", str(ckpt))
    values = fmt.load(ckpt)["c"].values
    assert (values[SHARED, 0] == 15 * nodes).all(), values[SHARED, 0]
    assert values[np.setdiff1d(np.arange(ROWS), SHARED)].sum() == 0


@pytest.mark.parametrize(("nodes", "variant"), [(2, "async"), (3, "async"), (3, "bsp")])
def test_copies_with_backups_push_through_the_chain_exactly_once(cluster_factory, nodes, variant):
    """backups=1: every worker intends the same 30 keys; each node's copies sync through the keys'
    chains (a push to the head, passed down to the tail, then a pull): exact sums after a barrier."""
    _run(cluster_factory, nodes, 2, "copies", variant, backups=1)


def test_a_set_of_copied_keys_comes_after_the_pushes_a_round_took(cluster_factory):
    """Node 0 pushes into its copies, another thread's round sends them, node 0 sets the keys and pushes
    on: the owner applies the set after those pushes (the set waits for the round): set value + 3."""
    _run(cluster_factory, 2, 1, "copies_set")


def test_a_faster_sync_rate_shows_another_nodes_pushes_sooner(cluster_factory):
    """PSKV_INTENT_SYNC=inf (no rounds) on both nodes, one table with its own pskv.Relocate(intent_sync=0.02):
    node 1's 5 pushes, one at a time, show in node 0's fast copies after >= 5 rounds, in its slow ones
    after 0 rounds never (until the barrier's flush); both exact after it."""
    _run(cluster_factory, 2, 1, "sync_rate", env={"PSKV_INTENT_SYNC": "inf"})


@pytest.mark.parametrize("mode", ["test", "self"])
def test_copies_pushes_survive_their_owners_death(cluster_factory, mode):
    """backups=1 on 3 nodes: nodes 0 and 1 push ones into copies of 20 keys node 2 heads; node 2 is
    SIGKILLed (by the test once both push; or by itself as its server takes node 1's 10th sync push,
    unapplied). Each survivor's column holds exactly its pushes after failover and a barrier; then
    intents go on (those of node 2's keys to their range's new head, none to the dead node), exactly."""
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "copies_failover", mode], backups=1,
                              failure_timeout=3.0)
    if mode == "test":
        wait_until(lambda: all("copies running" in cluster.output(r) for r in range(3)), 120,
                   lambda: f"every node pushing\n{cluster.logs_tail()}")
        cluster.kill(2)
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    for rank in (0, 1):
        assert f"copies_failover ok {mode} node {rank}" in cluster.output(rank), cluster.logs_tail()
        assert "members [0, 1]" in cluster.output(rank), cluster.logs_tail()
        assert "made no progress" not in cluster.output(rank), cluster.logs_tail()  # (no INTENT to the dead)
