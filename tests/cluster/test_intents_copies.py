"""Copies of keys several nodes intend (client.intent_sync, server.intents grants) on real clusters: exact sums."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pskv.checkpoint import format as fmt

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("intent_copy_scenarios.py"))
SHARED, ROWS = np.arange(3, 600, 20), 600  # (intent_copy_scenarios.SHARED, intent_scenarios.ROWS)


def _run(cluster_factory, nodes: int, threads: int, *args: str):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads)
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


def test_a_set_of_copied_keys_comes_after_the_pushes_a_round_took(cluster_factory):
    """Node 0 pushes into its copies, another thread's round sends them, node 0 sets the keys and pushes
    on: the owner applies the set after those pushes (the set waits for the round): set value + 3."""
    _run(cluster_factory, 2, 1, "copies_set")
