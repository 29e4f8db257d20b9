"""pskv.schedule on a real 2-node cluster: round t's totals hold every worker's push of round t, also
when node 0 reaches node.run() late (its scheduler's worker must not tick node 0's clock ahead of
node 0's own workers: once it did, and node 1's workers read round totals without node 0's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SCENARIOS = str(Path(__file__).with_name("schedule_scenarios.py"))


def test_round_totals_count_every_worker_when_node_0_starts_late(cluster_factory):
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "1.5"], threads=2)
    assert cluster.wait(timeout=100) == 0, cluster.logs_tail()
    for rank in range(2):
        assert f"rounds 10 wrong [] workers 4 node={rank}" in cluster.output(rank), cluster.logs_tail()
