"""Shared memory between the nodes of one host (issue 31, store.shm): real processes on loopback
read and write each other's shards in place, with exact sums, also while keys move; PSKV_SHARED_MEMORY=0
sends everything as messages with the same result; no file outlives its process for long."""

from __future__ import annotations

import glob
import os
import re
import sys
import time
from pathlib import Path

import pytest

from pskv.store import shm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("shm_scenarios.py"))


def _run(cluster_factory, name: str, nodes: int = 2, threads: int = 2, **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, name], threads=threads, **kwargs)
    assert cluster.wait(timeout=150) == 0, cluster.logs_tail()
    return cluster


def _counts(line: str) -> dict:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


@pytest.mark.parametrize("shared", [True, False])
def test_pushes_through_shared_memory_sum_exactly(cluster_factory, shared):
    """2 nodes x 2 threads push to both nodes' keys: exact, and with shared memory no key travels."""
    env = None if shared else {"PSKV_SHARED_MEMORY": "0"}
    cluster = _run(cluster_factory, "sums", env=env)
    for rank in range(2):
        out = cluster.output(rank)
        assert "sums ok" in out, out
        c = _counts(out.split("sums ok")[1].splitlines()[0])
        if shared:
            assert c["remote"] == 0 and c["local"] > 0, c
        else:
            assert c["remote"] > 0, c


def test_keys_moving_while_pushed_in_shared_memory_stay_exact(cluster_factory):
    cluster = _run(cluster_factory, "relocate")
    for rank in range(2):
        out = cluster.output(rank)
        assert "relocate ok" in out, out
        assert _counts(out.split("relocate ok")[1].splitlines()[0])["moved_in"] > 0


def _files_of(pid: int) -> list[str]:
    return glob.glob(os.path.join(shm.root(), "*", f"*.{pid}.t*"))


def test_files_go_at_close_and_after_a_kill(cluster_factory):
    """A node killed with SIGKILL cannot remove its files; the next cluster's nodes sweep them at start."""
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "hold"], threads=1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all("holding" in cluster.output(r) for r in range(2)):
        time.sleep(0.2)
    pids = [int(re.search(r"holding pid=(\d+)", cluster.output(r)).group(1)) for r in range(2)]
    assert all(_files_of(pid) for pid in pids)
    cluster.kill(1)
    cluster.shutdown(timeout=10)
    # (a node of another cluster starting meanwhile, e.g. another test's, may sweep them first:
    # that they stay until a sweep is tests/unit/store/test_shm.py's, in a private directory)
    _run(cluster_factory, "sums", threads=1)
    assert not _files_of(pids[1]) and not _files_of(pids[0])
