"""Sparse tables (key_space="uint64") on multi-process clusters: exact sums, push_pull, pull_range,
bounded delay with worker clocks, BSP/SSP sparse tables."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("sparse_scenarios.py"))


def _run(cluster_factory, nodes: int, threads: int, *args: str, **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads, **kwargs)
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    return cluster


def test_sparse_sums_ranges_and_memory(cluster_factory):
    cluster = _run(cluster_factory, 3, 2, "sums")
    held = [int(cluster.output(r).split("keys=")[1].split()[0]) for r in range(3)]
    total = int(cluster.output(0).split(" of ")[1].split()[0])
    assert sum(held) == total and min(held) > 0  # every written key on exactly one node


def test_push_pull_sparse_and_dense(cluster_factory):
    cluster = _run(cluster_factory, 2, 2, "push_pull")
    assert all("push_pull ok" in cluster.output(r) for r in range(2))


def test_a_tables_filters_apply_to_every_push_and_pull_that_gives_none(cluster_factory):
    cluster = _run(cluster_factory, 2, 1, "table_filters", env={"PSKV_SHARED_MEMORY": "0"})  # (bytes on the wire: no shared memory)
    assert all(cluster.output(r).count("table_filters ") == 2 for r in range(2))


def test_wait_clock_bounds_delay(cluster_factory):
    cluster = _run(cluster_factory, 2, 2, "bounded")
    assert all("bounded ok" in cluster.output(r) for r in range(2))


def test_checkpoint_of_a_sparse_table_restores_on_another_cluster_size(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 3, 1, "save", str(ckpt))
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "restore", str(ckpt)], threads=1,
                              restore=str(ckpt))
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    assert all("restored" in cluster.output(r) for r in range(2))


def test_sparse_bsp_and_ssp_pulls_hold_every_update_stamped_before_the_bound(cluster_factory):
    """2 nodes x 2 threads, a sparse SSP(1) table and a BSP one: pulls hold exactly the updates
    their clock bound needs and the worker's own, sets are never overtaken, final sums exact."""
    cluster = _run(cluster_factory, 2, 2, "clocked")
    assert all("clocked ok" in cluster.output(r) for r in range(2))
