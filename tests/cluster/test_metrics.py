"""Metrics of a 2-node cluster (`pskv launch --metrics P`): each node's endpoint at P + rank counts the
known pushes and pulls exactly, and `pskv top --once` shows them, a line per node and table."""

from __future__ import annotations

import re
import socket
import sys
import textwrap
import urllib.request

import pytest

from helpers import free_port, wait_until
from pskv import cli
from pskv.monitor import top

pytest.importorskip("prometheus_client")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

# Each node pushes once and pulls twice all 100 rows of "t", its own 50 first (rows 50r..50r+49: one
# local pass, then one request of the other 50 keys to the other node), says "ready", and stays up
# until the test has looked (the file argv[1] appears).
SCRIPT = textwrap.dedent("""
    import pathlib, sys, time
    import numpy as np
    import pskv

    with pskv.init() as node:
        t = node.table("t", rows=100, dim=4)
        keys = np.roll(np.arange(100), -50 * node.rank)
        t.push(keys, np.ones((100, 4), np.float32)).wait(60)
        t.pull(keys)
        t.pull(keys)
        print("metrics-node ready", flush=True)
        deadline = time.monotonic() + 150
        while not pathlib.Path(sys.argv[1]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
""")
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _port_pair() -> int:
    """P such that P and P + 1 were free just now."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports on 127.0.0.1")


def _start(cluster_factory, tmp_path):
    """A ready cluster and its P; a node that lost its port to another process meanwhile: try new ports."""
    script = tmp_path / "metrics_node.py"
    script.write_text(SCRIPT)
    for attempt in range(3):
        port = _port_pair()
        cluster = cluster_factory(2, [sys.executable, str(script), str(tmp_path / "go")], metrics=port,
                                  env={"PSKV_SHARED_MEMORY": "0"})  # (remote keys and requests: messages, not shared memory)

        def state():
            if all("metrics-node ready" in cluster.output(r) for r in range(2)):
                return "ready"
            try:
                return f"exited with {cluster.wait(timeout=0.01)}"
            except TimeoutError:
                return None

        outcome = wait_until(state, timeout=150, what="both nodes ready")
        if outcome == "ready":
            return cluster, port
        if "cannot serve metrics" not in cluster.logs_tail():
            raise AssertionError(f"{outcome}\n{cluster.logs_tail()}")
    raise AssertionError(f"3 tries, each lost a metrics port\n{cluster.logs_tail()}")


def _samples(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {(name, labels): value for name, labels, value in top.parse(text)}


def _get(samples: dict, name: str, **labels) -> float:
    return samples[name, tuple(sorted(labels.items()))]


def test_metrics_count_pushes_and_pulls_exactly(cluster_factory, tmp_path, capsys):
    """Both endpoints count 1 push and 2 pulls of 100 keys (150 local, 150 remote), 1 + 2 requests to the
    other node with a histogram each, 3 requests served; all names valid; top shows the same totals."""
    cluster, port = _start(cluster_factory, tmp_path)
    try:
        for rank in range(2):
            s = _samples(port + rank)
            t = {"node": str(rank), "table": "t"}
            assert _get(s, "pskv_requests_total", kind="pull", **t) == 2
            assert _get(s, "pskv_requests_total", kind="push", **t) == 1
            assert _get(s, "pskv_keys_total", location="local", **t) == 150
            assert _get(s, "pskv_keys_total", location="remote", **t) == 150
            assert _get(s, "pskv_request_keys_total", kind="pull", **t) == 100
            assert _get(s, "pskv_request_keys_total", kind="push", **t) == 50
            assert _get(s, "pskv_request_failures_total", kind="pull", **t) == 0
            assert _get(s, "pskv_served_requests_total", node=str(rank)) == 3
            assert _get(s, "pskv_members", node=str(rank)) == 2
            for kind, count in (("pull", 2), ("push", 1)):
                buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in s.items()
                                 if name == "pskv_request_duration_seconds_bucket" and ("kind", kind) in labels)
                counts = [c for _, c in buckets]
                assert counts == sorted(counts) and counts[-1] == count, buckets  # cumulative, +Inf last
                assert _get(s, "pskv_request_duration_seconds_count", kind=kind, **t) == count
            assert all(name.startswith("pskv_") and NAME.match(name) for name, _ in s)
            assert _get(s, "pskv_sent_bytes_total", node=str(rank)) > 0
            assert _get(s, "pskv_received_bytes_total", node=str(rank)) > 0
        assert cli.main(["top", "--once", "--interval", "0.2", "--metrics-port", str(port), "--nodes", "2"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[:5] for line in lines[1:]] == [
            ["0", "*", "3", "0.0", "300"], ["0", "t", "3", "0.0", "300"],
            ["1", "*", "3", "0.0", "300"], ["1", "t", "3", "0.0", "300"]], lines
        assert all(line.split()[8].endswith("ms") for line in lines[1:]), lines  # p50 of the requests sent
    finally:
        (tmp_path / "go").touch()
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
