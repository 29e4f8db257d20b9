"""Coalesced small pulls (client.coalesce, issue 31) on a 2-node cluster without shared memory:
exact rows of merged calls, order with a following push, callback-only pulls never held, waits
(of this or another thread) send what is held, and nothing stays held without a wait."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("coalesce_scenarios.py"))


@pytest.mark.parametrize("name", ["merged", "ordered", "callbacks", "waiters"])
def test_coalesced_pulls(cluster_factory, name):
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, name], threads=1, env={"PSKV_SHARED_MEMORY": "0"})
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    assert f"{name} ok" in cluster.output(0)
