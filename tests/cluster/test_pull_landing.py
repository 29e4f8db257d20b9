"""The short path of a blocking plain pull (client.route.Route._pull) and its reply's rows landing
in the caller's `out` (net.replybox, issue 31) on a 2-node cluster without shared memory: exact rows
with and without out=, above and below the size that travels packed, after pushes, into a slice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("landing_scenarios.py"))


def test_blocking_pulls_land_exact_rows(cluster_factory):
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "landed"], threads=1, env={"PSKV_SHARED_MEMORY": "0"})
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    assert "landed ok" in cluster.output(0)
