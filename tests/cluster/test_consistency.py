"""BSP, SSP and Async over real clusters: exact clock-stamped sums, where pulls block, BSP's
sequential equivalence, the row cache, push coalescing and barriers (consistency_scenarios.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("consistency_scenarios.py"))


def _run(cluster_factory, nodes: int, threads: int, *args: str, timeout: float = 150, env=None) -> list[dict]:
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads, env=env)
    status = cluster.wait(timeout=timeout)
    assert status == 0, cluster.logs_tail()
    results = []
    for rank in range(nodes):
        for line in cluster.output(rank).splitlines():
            if "RESULT " in line:
                results.append(json.loads(line.split("RESULT ", 1)[1]))
    return results


@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_ssp_pull_includes_stamped_updates_and_blocks_only_when_behind(cluster_factory, staleness):
    """A pull at clock c holds every update stamped <= c-s-1 (checked exactly on the nodes); it
    returns only after the slow worker ended clock c-s-1, waits for no later clock than that, and
    waits only when the global clock is behind it."""
    results = _run(cluster_factory, 2, 2, "ssp", str(staleness))
    workers = [r for r in results if "worker" in r]
    nodes = [r for r in results if "node" in r]
    assert len(workers) == 4 and len(nodes) == 2
    slow = next(r for r in workers if r["slow"])
    blocked = 0
    for r in workers:
        for c, needed, behind, end in r["pulls"]:
            # the cause of any wait, not its length (a loaded machine stretches every wait): the pull
            # asked for exactly the global clock its staleness needs (None: the row cache held copies
            # fresh enough, so it asked for none and could not wait)
            assert needed in (None, c - staleness), f"worker {r['worker']}: pull at clock {c} waited for {needed}"
            if needed is not None and needed > 0:
                assert end >= slow["clocking"][needed - 1], \
                    f"pull at clock {c} returned before the slow worker ended clock {needed - 1}"
            blocked += behind and not r["slow"]
    assert blocked > 0, "the fast workers never had to wait for the slow one"
    for r in nodes:  # every pull that waited for the global clock found it behind what it needed
        assert 0 <= r["clock_waits"] <= r["behind"], r
    assert sum(r["clock_waits"] for r in nodes) > 0


def test_async_never_waits_for_the_slow_worker(cluster_factory):
    """Under Async no pull asks for a clock, none waits, and the fast workers finish all their clocks
    while the slow one stays at clock 1 (it waits for that on its node, with a deadline)."""
    results = _run(cluster_factory, 2, 2, "ssp", "async")
    assert all(r["clock_waits"] == 0 and r["behind"] == 0 for r in results if "node" in r)
    workers = [r for r in results if "worker" in r]
    assert len(workers) == 4
    assert all(needed is None for r in workers for _, needed, _, _ in r["pulls"])


def test_bsp_equals_the_sequential_schedule(cluster_factory):
    """Alternating-block updates on 3 nodes x 2 threads under BSP give exactly the sequential result."""
    results = _run(cluster_factory, 3, 2, "bsp")
    expected = [r["expected"] for r in results if "expected" in r]
    got = [r["values"] for r in results if "values" in r]
    assert len(expected) == 3 and len(got) == 3
    for e, g in zip(expected, got):
        assert np.array_equal(np.array(e), np.array(g))


def test_row_cache_and_push_coalescing(cluster_factory):
    """Cache hits send nothing, a worker reads its own writes through the cache, the cache evicts
    at its bound; 200 buffered pushes cross the network as one message, with exact sums."""
    results = _run(cluster_factory, 2, 1, "cache", env={"PSKV_SHARED_MEMORY": "0"})  # (it counts messages: shared memory sends none)
    assert len(results) == 2
    for r in results:
        assert r["hit_keys"] == 0
        assert r["buffered_keys"] == 0  # nothing left the node before the clock
        assert r["plain_keys"] == 1000 and r["plain_messages"] >= 200  # the Async table sends every push
        assert r["buffered_rows"] >= 1000 + 4 and r["flushed_rows"] <= 4 + 2 + 5 + 5
        assert r["hits"] >= 4


def test_barrier_under_ssp_sees_every_earlier_update(cluster_factory):
    """Under SSP(5) with cached copies, a pull after a barrier includes all updates before it."""
    results = _run(cluster_factory, 2, 2, "barrier")
    assert [r["ok"] for r in results] == [True, True]
