"""client.slices (issue 31): batches over several key ranges sent as one slice per range. Adagrad pushes
summed before they leave and pulls into `out`'s slices equal, bit for bit, one shard in one process
(2 and 3 nodes, with and without shared memory); concurrent pushes of sorted keys sum exactly."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCENARIOS = str(Path(__file__).with_name("slices_scenarios.py"))


@pytest.mark.parametrize("nodes, shared", [(2, "0"), (3, "0"), (3, "1")])
def test_adagrad_pushes_and_pulls_in_slices_equal_one_shard(cluster_factory, nodes, shared):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, "adagrad"], env={"PSKV_SHARED_MEMORY": shared})
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    out = cluster.output(0)
    counts = dict(re.findall(r"(\w+)=(\d+)", out.split("adagrad ok", 1)[1].splitlines()[0]))
    if shared == "0":  # (with shared memory every node's shard is mapped here: nothing travels)
        assert int(counts["remote"]) > 0 and int(counts["fused"]) > 0, out


@pytest.mark.parametrize("shared", ["0", "1"])
def test_sorted_pushes_of_every_worker_sum_exactly(cluster_factory, shared):
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "sums"], threads=2, env={"PSKV_SHARED_MEMORY": shared})
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    for rank in range(3):
        out = cluster.output(rank)
        assert "sums ok" in out, out
        counts = dict(re.findall(r"(\w+)=(\d+)", out.split("sums ok", 1)[1].splitlines()[0]))
        assert int(counts["shared" if shared == "1" else "remote"]) > 0, counts
