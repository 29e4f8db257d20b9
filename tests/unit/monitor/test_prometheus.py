"""monitor/prometheus.py: the collector's series (names, labels, exact values), the tracker's latency
histograms, and one node's exporter: served at its port, gone after shutdown; a clear ConfigError
when prometheus-client is missing or the port is taken."""

from __future__ import annotations

import re
import socket
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import pskv
from helpers import free_port
from pskv.errors import ConfigError, NodeFailure
from pskv.monitor import top
from pskv.monitor.prometheus import INSTALL, Exporter, NodeCollector, kind_and_table
from pskv.net.requests import LATENCY_BUCKETS, Latency, RequestTracker

pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.timeout(60)

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")  # Prometheus' metric name rule
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # ...and label names (no leading __: reserved)


def exposition(sample: dict) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(lambda: sample))
    return generate_latest(registry).decode()


def values(text: str):
    """get(name, **labels): the value of that series in `text` (KeyError if it is not there)."""
    found = {(name, labels): value for name, labels, value in top.parse(text)}
    return lambda name, **labels: found[name, tuple(sorted(labels.items()))]


def fake_sample() -> dict:
    lat = Latency()
    lat.counts[2], lat.counts[-1], lat.seconds, lat.keys, lat.failed = 3, 1, 12.5, 40, 2
    return {"rank": 1, "epoch": 0, "members": [0, 1], "clock": 7, "messages_sent": 11, "bytes_sent": 2048,
            "messages_received": 9, "requests_served": 5, "request_errors": 1, "dropped": 2, "fenced": 0,
            "declined": 0, "clock_waits": 3, "clock_wait_seconds": 0.5, "membership_changes": 0, "failed": False,
            "pending_requests": 4, "deferred_requests": 0, "held_messages": 0, "rss_bytes": 10, "max_rss_bytes": 20,
            "tables": {"emb": {"pulls": 2, "pushes": 1, "local_keys": 30, "remote_keys": 40, "localizes": 0,
                               "forwards": 0, "relocated_in": 0, "replica_syncs": 0}},
            "staleness": {"emb": float("inf")},
            "latency": {"pull on table 'emb' by node 1": lat}}


def test_collector_series_follow_prometheus_naming():
    """Every series is pskv_*, valid by Prometheus' rules; counters end in _total, units are base units."""
    text = exposition(fake_sample())
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert types and all(name.startswith("pskv_") and NAME.match(name) for name in types)
    for name, labels, _ in top.parse(text):
        assert name.startswith("pskv_") and NAME.match(name), name
        assert all(LABEL.match(k) and not k.startswith("__") for k, _ in labels), labels
        assert dict(labels)["node"] == "1"
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
        assert not re.search(r"_(ms|milliseconds|kb|mb|kib|mib)(_|$)", name), name
    assert types["pskv_request_duration_seconds"] == "histogram"
    assert types["pskv_sent_bytes_total"] == "counter" and types["pskv_pending_requests"] == "gauge"


def test_collector_values_are_the_sample():
    """The counters, gauges and the histogram carry the sample's numbers exactly."""
    get = values(exposition(fake_sample()))
    emb = {"node": "1", "table": "emb"}
    assert get("pskv_requests_total", kind="pull", **emb) == 2 and get("pskv_requests_total", kind="push", **emb) == 1
    assert get("pskv_keys_total", location="local", **emb) == 30
    assert get("pskv_keys_total", location="remote", **emb) == 40
    assert get("pskv_table_staleness", **emb) == float("inf")
    assert get("pskv_request_duration_seconds_count", kind="pull", **emb) == 4
    assert get("pskv_request_duration_seconds_sum", kind="pull", **emb) == 12.5
    assert get("pskv_request_keys_total", kind="pull", **emb) == 40
    assert get("pskv_request_failures_total", kind="pull", **emb) == 2
    assert get("pskv_sent_bytes_total", node="1") == 2048 and get("pskv_clock", node="1") == 7
    assert get("pskv_pending_requests", node="1") == 4 and get("pskv_members", node="1") == 2
    assert get("pskv_dropped_messages_total", node="1", reason="garbage") == 2


def test_histogram_buckets_are_cumulative_and_end_at_count():
    """Buckets rise with `le`, one per LATENCY_BUCKETS bound and +Inf, and +Inf equals the count."""
    text = exposition(fake_sample())
    buckets = [(dict(labels)["le"], value) for name, labels, value in top.parse(text)
               if name == "pskv_request_duration_seconds_bucket"]
    assert len(buckets) == len(LATENCY_BUCKETS) + 1 and buckets[-1] == ("+Inf", 4)
    counts = [c for _, c in buckets]
    assert counts == sorted(counts) and counts[1] == 0 and counts[2] == 3


def test_request_descriptions_become_kind_and_table():
    """The tracker's request descriptions split into the labels kind and table."""
    assert kind_and_table("pull on table 'emb' by node 3") == ("pull", "emb")
    assert kind_and_table("push_pull on table \"it's\" by node 0") == ("push_pull", "it's")
    assert kind_and_table("replica sync of table 'h'") == ("replica_sync", "h")
    assert kind_and_table("node 2 hands its rows over (leave)") == ("other", "")


def test_tracker_counts_latency_keys_and_failures():
    """A completed request lands in one bucket with its keys; failed ones (error, expiry, fail_all) count apart."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(5, desc="pull on table 't' by node 0")
    tracker.on_reply(rid, 2)
    assert "pull on table 't' by node 0" not in tracker.latency()  # counted when complete
    tracker.on_reply(rid, 3)
    lat = tracker.latency()["pull on table 't' by node 0"]
    assert sum(lat.counts) == 1 and lat.keys == 5 and lat.failed == 0 and lat.seconds >= 0
    rid, _ = tracker.new_request(1, desc="push on table 't' by node 0")
    tracker.on_reply(rid, 1, error=pskv.PskvError("boom"))
    tracker.new_request(1, desc="push on table 't' by node 0")
    tracker.expire(float("inf"), 1.0, lambda *a: pskv.PskvError("stalled"))
    tracker.new_request(1, desc="push on table 't' by node 0")
    tracker.fail_all(lambda: NodeFailure("gone", 1, ""))
    push = tracker.latency()["push on table 't' by node 0"]
    assert push.failed == 3 and sum(push.counts) == 0 and push.keys == 0
    tracker.new_request(0, desc="set on table 't' by node 0")  # nothing to wait for: not a request sent
    assert "set on table 't' by node 0" not in tracker.latency()


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_node_serves_metrics_until_shutdown(metrics_node):
    """pskv.init(metrics_port=P): node 0 serves its counters at P; shutdown closes the port and ends the thread."""
    node, port = metrics_node
    t = node.table("t", rows=10, dim=2)
    t.push(np.arange(4), np.ones((4, 2), np.float32)).wait(10)
    t.pull(np.arange(10))
    get = values(_scrape(f"http://127.0.0.1:{port}/metrics"))
    assert get("pskv_keys_total", node="0", table="t", location="local") == 14
    assert get("pskv_requests_total", node="0", table="t", kind="pull") == 1
    assert any(th.name == "pskv-metrics-0" for th in threading.enumerate())
    node.shutdown(timeout=10)
    assert not any(th.name == "pskv-metrics-0" for th in threading.enumerate())
    with pytest.raises(urllib.error.URLError):
        _scrape(f"http://127.0.0.1:{port}/metrics")


def test_missing_prometheus_client_is_a_clear_config_error(monkeypatch):
    """Without prometheus-client, a node asked for metrics fails with how to install it, and leaves nothing running."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now raises ImportError
    with pytest.raises(ConfigError, match=re.escape(INSTALL)):
        Exporter("127.0.0.1", free_port(), 0, dict)
    before = {th.name for th in threading.enumerate()}
    with pytest.raises(ConfigError, match=r"prometheus-client is not installed; pip install 'pskv\[metrics\]'"):
        pskv.init(metrics_port=free_port())
    assert not {th.name for th in threading.enumerate() if th.name.startswith("pskv-")} - before


def test_metrics_port_in_use_is_a_config_error():
    """A taken port fails with a ConfigError naming host, port and PSKV_METRICS_PORT."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}.*PSKV_METRICS_PORT"):
            Exporter("127.0.0.1", port, 0, dict)
