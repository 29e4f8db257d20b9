"""A node that dies or hangs makes every other node raise NodeFailure in time; launch exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SCENARIOS = str(Path(__file__).parents[1] / "cluster" / "scenarios.py")
FAILURE_TIMEOUT = 3.0


def _failures(cluster, ranks):
    """(node_id, seconds) of the NodeFailure line each surviving rank printed."""
    seen = {}
    for rank in ranks:
        m = re.search(r"NodeFailure node_id=(-?\d+) after=([\d.]+)", cluster.output(rank))
        assert m, f"node {rank} saw no NodeFailure:\n{cluster.logs_tail()}"
        seen[rank] = (int(m.group(1)), float(m.group(2)))
    return seen


def _wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_killed_node_fails_the_others_fast(cluster_factory):
    """SIGKILL of node 2: nodes 0 and 1 raise NodeFailure(node_id=2) well within the bound; status != 0."""
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "failure", "2", "kill"],
                              threads=1, failure_timeout=FAILURE_TIMEOUT)
    status = cluster.wait(timeout=60)
    assert status != 0
    for rank, (node_id, seconds) in _failures(cluster, [0, 1]).items():
        assert node_id == 2, cluster.logs_tail()
        assert seconds < FAILURE_TIMEOUT + 2, f"node {rank} took {seconds} s"


def test_hung_node_detected_by_heartbeats(cluster_factory):
    """SIGSTOP of node 1 (process alive, silent): node 0 raises NodeFailure(node_id=1) after the heartbeat timeout."""
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "failure", "1", "stop"],
                              threads=1, failure_timeout=FAILURE_TIMEOUT)
    try:
        assert _wait_for(lambda: "NodeFailure" in cluster.output(0), 30), cluster.logs_tail()
        ((node_id, seconds),) = _failures(cluster, [0]).values()
        assert node_id == 1
        assert FAILURE_TIMEOUT - 1 < seconds < FAILURE_TIMEOUT + 3, seconds
    finally:
        cluster.kill(1)  # SIGKILL also ends a stopped process
    assert cluster.wait(timeout=30) != 0


def test_launcher_exits_nonzero_when_a_node_is_killed(tmp_path):
    """`pskv launch` with a node that SIGKILLs itself stops the rest and exits non-zero in bounded time."""
    cmd = [sys.executable, "-m", "pskv", "launch", "-n", "3", "--",
           sys.executable, SCENARIOS, "failure", "1", "kill"]
    env = {**os.environ, "PSKV_FAILURE_TIMEOUT": str(FAILURE_TIMEOUT)}
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env=env)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert time.monotonic() - start < 40
    assert "[node 0] NodeFailure node_id=1" in proc.stdout, proc.stdout + proc.stderr
    assert "[node 2] NodeFailure node_id=1" in proc.stdout, proc.stdout + proc.stderr
