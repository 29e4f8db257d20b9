"""Two-level aggregation (mshadow-ps) on 2 nodes x 2 threads: round sums, SGD on the owner, callbacks, misuse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SCENARIOS = str(Path(__file__).with_name("aggregation_scenarios.py"))


def _run(cluster_factory, *args: str, nodes: int = 2, threads: int = 2):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads)
    status = cluster.wait(timeout=60)
    assert status == 0, cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("model", ["bsp", "async", "ssp"])
def test_round_sums_exact(cluster_factory, model):
    """Every pull of a round returns the level-1 sums: of all nodes (BSP, SSP), own plus a prefix of the others (Async)."""
    cluster = _run(cluster_factory, "rounds", model)
    assert all(f"rounds ok node={r} model={model}" in cluster.output(r) for r in range(2))


@pytest.mark.parametrize("model", ["bsp", "async"])
def test_sgd_on_owner_matches_numpy(cluster_factory, model):
    """pskv.SGD applied by the owner once per round equals w -= lr * (sum of all pushes), round by round under BSP."""
    cluster = _run(cluster_factory, "sgd", model)
    assert all("sgd ok" in cluster.output(r) for r in range(2))


def test_pull_callback_runs_once_before_wait_returns(cluster_factory):
    """pull_async(callback=) on an aggregated table sees the written result, once, before wait() returns."""
    cluster = _run(cluster_factory, "callbacks")
    assert all("callbacks ok" in cluster.output(r) for r in range(2))


def test_double_push_and_second_pull_raise(cluster_factory):
    """A second push of a key in one round, or a second outstanding pull, raises AggregationError and changes nothing."""
    cluster = _run(cluster_factory, "misuse")
    assert all("misuse ok" in cluster.output(r) for r in range(2))
