"""Backups on a healthy cluster: what the chains keep stays bounded (backups_scenarios.py; failures:
tests/fault/test_backups.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SCENARIOS = str(Path(__file__).with_name("backups_scenarios.py"))


def test_reader_copy_records_are_pruned_like_the_ranges(cluster_factory):
    """A node writing to keys it localized (a reader copy, on the tail of their range) keeps one id
    per write in that copy's record; the low-watermark floors prune it as the ranges' records: once
    the pushes completed, no node keeps any id (before: 2,000 kept on node 0 for good)."""
    pushes = 2000
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "records", str(pushes)], backups=1)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    results = {}
    for rank in range(2):
        for line in cluster.output(rank).splitlines():
            if "RESULT " in line:
                got = json.loads(line.split("RESULT ", 1)[1])
                results[got["node"]] = got
    assert results[0] == {"node": 0, "kept": [0, 0], "sum": 10 * pushes}, cluster.logs_tail()
    assert results[1] == {"node": 1, "kept": [0, 0], "sum": 0}, cluster.logs_tail()
