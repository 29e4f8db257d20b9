"""A node that dies or hangs makes every other node raise NodeFailure in time; launch exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SCENARIOS = str(Path(__file__).parents[1] / "cluster" / "scenarios.py")
FAILURE_TIMEOUT = 3.0


def _failures(cluster, ranks):
    """(node_id, seconds, message) of the NodeFailure line each surviving rank printed."""
    seen = {}
    for rank in ranks:
        m = re.search(r"NodeFailure node_id=(-?\d+) after=([\d.]+) msg=(.*)", cluster.output(rank))
        assert m, f"node {rank} saw no NodeFailure:\n{cluster.logs_tail()}"
        seen[rank] = (int(m.group(1)), float(m.group(2)), m.group(3))
    return seen


def test_killed_node_fails_the_others_fast(cluster_factory):
    """SIGKILL of node 2: nodes 0 and 1 raise NodeFailure(node_id=2) because the launcher saw it die
    (not after a heartbeat timeout); status != 0."""
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "failure", "2", "kill"],
                              threads=1, failure_timeout=FAILURE_TIMEOUT)
    status = cluster.wait(timeout=60)
    assert status != 0
    for rank, (node_id, seconds, message) in _failures(cluster, [0, 1]).items():
        assert node_id == 2, cluster.logs_tail()
        # fast by its cause: the launcher's report of the exit, which comes at once, not the silence
        # that heartbeats notice after failure_timeout (a timing bound would fail on a loaded machine)
        assert "killed by SIGKILL" in message, (rank, message)
        assert seconds < 30, f"node {rank} took {seconds} s"  # a hang, not a slow machine


def test_dead_coordinator_node_without_backups_fails_the_others(cluster_factory):
    """No launcher, backups=0: node 0 runs the coordinator and is SIGKILLed; nodes 1 and 2 raise
    NodeFailure for the coordinator's silence (no takeover without backups), never hang."""
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "failure", "0", "kill"], threads=1,
                              failure_timeout=FAILURE_TIMEOUT, coordinator="node0")
    cluster._grace = 30.0  # the launcher would SIGTERM them after failure_timeout: the nodes' own verdict is tested
    assert cluster.wait(timeout=60) != 0
    for rank in (1, 2):  # in the pulls, or still in the barrier if node 0 died before releasing it to them
        m = re.search(r"NodeFailure node_id=(-?\d+) .*msg=(.*)", cluster.output(rank))
        assert m, f"node {rank} saw no NodeFailure:\n{cluster.logs_tail()}"
        assert m.group(1) == "-1" and "coordinator" in m.group(2) and "silent" in m.group(2), (rank, m.group(0))
        assert "takes it over" not in cluster.output(rank)


def test_hung_node_detected_by_heartbeats(cluster_factory):
    """SIGSTOP of node 1 (process alive, silent): node 0 raises NodeFailure(node_id=1) for missed
    heartbeats, not before the heartbeat timeout."""
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "failure", "1", "stop"],
                              threads=1, failure_timeout=FAILURE_TIMEOUT)
    try:
        wait_until(lambda: "NodeFailure" in cluster.output(0), 60,
                   lambda: f"NodeFailure on node 0\n{cluster.logs_tail()}")
        ((node_id, seconds, message),) = _failures(cluster, [0]).values()
        assert node_id == 1
        assert "missed heartbeats" in message, message  # the cause; no upper bound on how long it took
        # not before failure_timeout (less 1 s: node 1's last heartbeat may come before node 0's first pull)
        assert seconds > FAILURE_TIMEOUT - 1, seconds
    finally:
        cluster.kill(1)  # SIGKILL also ends a stopped process
    assert cluster.wait(timeout=30) != 0


def test_launcher_exits_nonzero_when_a_node_is_killed(tmp_path):
    """`pskv launch` with a node that SIGKILLs itself stops the rest and exits non-zero (within the
    run's 60 s limit: the survivors would otherwise pull until their 100,000 pulls ran out)."""
    cmd = [sys.executable, "-m", "pskv", "launch", "-n", "3", "--",
           sys.executable, SCENARIOS, "failure", "1", "kill"]
    env = {**os.environ, "PSKV_FAILURE_TIMEOUT": str(FAILURE_TIMEOUT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "[node 0] NodeFailure node_id=1" in proc.stdout, proc.stdout + proc.stderr
    assert "[node 2] NodeFailure node_id=1" in proc.stdout, proc.stdout + proc.stderr
