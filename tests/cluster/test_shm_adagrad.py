"""Adagrad pushes through shared memory (client.stages.Shared._summed): summed once in key order and
pushed range by range to each node's shard, they give bit for bit what one unshared shard gives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SCENARIOS = str(Path(__file__).with_name("shm_adagrad_scenarios.py"))


def test_adagrad_pushes_across_both_shards_equal_one_process_bit_for_bit(cluster_factory):
    cluster = cluster_factory(2, [sys.executable, SCENARIOS], threads=1)
    assert cluster.wait(timeout=100) == 0, cluster.logs_tail()
    assert "adagrad equal True shared True remote 0" in cluster.output(0), cluster.logs_tail()
