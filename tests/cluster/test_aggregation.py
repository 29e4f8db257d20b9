"""Two-level aggregation (mshadow-ps) on 2 nodes x 2 threads: round sums, SGD on the owner, callbacks, misuse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SCENARIOS = str(Path(__file__).with_name("aggregation_scenarios.py"))


def _run(cluster_factory, *args: str, nodes: int = 2, threads: int = 2, backups: int = 0):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads, backups=backups)
    status = cluster.wait(timeout=60)
    assert status == 0, cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("model,backups", [("bsp", 0), ("async", 0), ("ssp", 0), ("bsp", 1), ("ssp", 1)])
def test_round_sums_exact(cluster_factory, model, backups):
    """Every pull of a round returns the level-1 sums: of all nodes (BSP, SSP), own plus a prefix of
    the others (Async); with backups too (level 2 at the range heads, server.rounds)."""
    cluster = _run(cluster_factory, "rounds", model, backups=backups)
    assert all(f"rounds ok node={r} model={model}" in cluster.output(r) for r in range(2))


@pytest.mark.parametrize("model,backups", [("bsp", 0), ("async", 0), ("bsp", 1)])
def test_sgd_on_owner_matches_numpy(cluster_factory, model, backups):
    """pskv.SGD applied by the owner once per round equals w -= lr * (sum of all pushes), round by
    round under BSP (with backups: once per round at the range's head; each node's backup copy
    equals the head's rows bit for bit)."""
    cluster = _run(cluster_factory, "sgd", model, backups=backups)
    assert all("sgd ok" in cluster.output(r) for r in range(2))


def test_pull_callback_runs_once_before_wait_returns(cluster_factory):
    """pull_async(callback=) on an aggregated table sees the written result, once, before wait() returns."""
    cluster = _run(cluster_factory, "callbacks")
    assert all("callbacks ok" in cluster.output(r) for r in range(2))


def test_double_push_and_second_pull_raise(cluster_factory):
    """A second push of a key in one round, or a second outstanding pull, raises AggregationError and changes nothing."""
    cluster = _run(cluster_factory, "misuse")
    assert all("misuse ok" in cluster.output(r) for r in range(2))
