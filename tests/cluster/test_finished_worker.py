"""A finished worker's pushes are not lost (issue 30, F0): node.run() and worker.close() complete
a worker's outstanding requests, and a barrier covers every push its node issued before it,
whichever handle issued it. Real 2-node clusters; exact values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("finished_worker_scenarios.py"))


def _run(cluster_factory, name: str):
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, name], threads=1)
    status = cluster.wait(timeout=150)
    assert status == 0, cluster.logs_tail()
    return cluster


def test_pushes_of_a_returned_run_a_closed_worker_and_the_main_handle_are_in_the_next_barrier(cluster_factory):
    """Node 1 pushes +1 to 50 rows of node 0's range 200 times without waiting, through a node.run()
    worker that returns, a worker that closes, the main thread's handle; after a new worker's
    barrier every node reads exactly 200."""
    cluster = _run(cluster_factory, "handles")
    for rank in range(2):
        for how in ("run", "close", "main"):
            assert f"{how} ok node={rank} value=200" in cluster.output(rank), cluster.logs_tail()


def test_buffered_bsp_ssp_and_aggregated_pushes_are_in_the_next_barrier(cluster_factory):
    """The same through BSP/SSP push buffers (a returned run, the main handle) and a NodeAggregate
    table whose last round node 1's two threads push without pulling: exactly 200 everywhere."""
    cluster = _run(cluster_factory, "buffered")
    for rank in range(2):
        for how in ("bsp", "bsp-main", "ssp", "ssp-main", "aggregate"):
            assert f"{how} ok node={rank} value=200" in cluster.output(rank), cluster.logs_tail()
