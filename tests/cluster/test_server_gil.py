"""The server's runs of plain requests (issue 31) on a loopback cluster: exact sums and per-sender
order under a storm of outstanding requests, with shared memory off so every request of another
node goes through the server."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCENARIOS = str(Path(__file__).with_name("server_gil_scenarios.py"))


def test_a_storm_of_outstanding_requests_sums_exactly_and_keeps_each_senders_order(cluster_factory):
    """2 nodes x 2 threads: 200 pushes of 1,000 or 10 keys each, with pulls, 8 outstanding per thread;
    then unwaited push/pull/set/pull chains of each worker's own keys read exactly their writes."""
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "storm", "200"], threads=2,
                              env={"PSKV_SHARED_MEMORY": "0"})
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    runs = 0
    for rank in range(2):
        line = re.search(r"storm ok node=\d runs=(\d+) served=(\d+)", cluster.output(rank))
        assert line, cluster.logs_tail()
        runs += int(line.group(1))
    assert runs > 0  # requests queued up and were served in runs
