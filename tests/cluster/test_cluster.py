"""Multi-process clusters on loopback: exact sums, push/pull/set semantics, barriers, updaters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("scenarios.py"))


def _run(cluster_factory, nodes: int, threads: int, *args: str, timeout: float = 150):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads)
    status = cluster.wait(timeout=timeout)
    assert status == 0, cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("nodes,steps", [(2, 1500), (4, 600)])
def test_concurrent_pushes_sum_exactly(cluster_factory, nodes, steps):
    """Every thread of every node pushes `steps` times to overlapping keys (3,000 or 4,800 pushes
    in flight together); all nodes see exact sums."""
    cluster = _run(cluster_factory, nodes, 2, "sums", str(steps))
    for rank in range(nodes):
        assert "sums ok" in cluster.output(rank)


def test_push_pull_set_barrier_semantics(cluster_factory):
    """Pull after waited push, duplicates, set (last wins) and barrier rounds hold on 3 nodes."""
    cluster = _run(cluster_factory, 3, 2, "semantics")
    assert all("semantics ok" in cluster.output(r) for r in range(3))


def test_updaters_match_numpy_reference(cluster_factory):
    """assign, SGD, Adagrad, Adam and a custom rule over 2 nodes equal their numpy references."""
    cluster = _run(cluster_factory, 2, 2, "updaters")
    assert all("updaters ok" in cluster.output(r) for r in range(2))
