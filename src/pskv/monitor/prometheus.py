"""Prometheus metrics of one node, computed when scraped: `PSKV_METRICS_PORT=P` serves node r at P + r.

    pip install 'pskv[metrics]'
    pskv launch -n 2 --metrics 9100 -- python examples/quickstart.py
    curl -s http://127.0.0.1:9101/metrics | grep '^pskv_keys_total'

Threads and ownership: the Node starts the `Exporter` in its constructor and closes it in its
teardown. The exporter's thread (pskv-metrics-R) is prometheus_client's HTTP server; each scrape
runs in a short-lived thread of that server and calls `sample()` (node.diagnostics' `Report.sample`:
`stats()` plus the `RequestTracker` latency histograms), so every value is read at scrape time
from counters the data path keeps anyway (GIL-atomic `+=`, approximate under threads) and nothing
is added to the data path but the histograms' counting (net/requests.py). The registry holds
only `NodeCollector`: every series is named pskv_*, with a `node` label (the rank).
"""

from __future__ import annotations

import ast
import math
import re
import threading
from collections.abc import Callable, Iterator

from ..errors import ConfigError
from ..net.requests import LATENCY_BUCKETS, Latency

INSTALL = "pip install 'pskv[metrics]'"

_DESC = re.compile(r"(?P<kind>[a-z_ ]+?) (?:on|of) table (?P<table>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")

# stats() keys of a table -> (series, help); each a counter with labels node, table
_TABLE_COUNTERS = {
    "forwards": ("pskv_forwarded_keys", "keys of this table that this node's server passed on to their owner"),
    "relocated_in": ("pskv_relocated_keys", "keys of this table that moved to this node (Relocate)"),
    "localizes": ("pskv_localize_keys", "keys of this table that this node's workers asked to move here"),
    "replica_syncs": ("pskv_replica_syncs", "replica sync rounds this node sent for this table (Replicate)"),
    "cache_hits": ("pskv_cache_hits", "pulled rows this node's row cache answered (BSP/SSP)"),
    "cache_misses": ("pskv_cache_misses", "pulled rows this node's row cache did not have (BSP/SSP)"),
    "cache_evictions": ("pskv_cache_evictions", "rows evicted from this node's row cache (BSP/SSP)"),
    "flushes": ("pskv_push_buffer_flushes", "flushes of this node's push buffer (BSP/SSP)"),
    "buffered_rows": ("pskv_push_buffer_rows_in", "rows added to this node's push buffer (BSP/SSP)"),
    "flushed_rows": ("pskv_push_buffer_rows_out", "rows sent from this node's push buffer (BSP/SSP)"),
    "aggregated_rounds": ("pskv_aggregated_rounds", "rounds of node aggregation (NodeAggregate)"),
    "aggregated_messages": ("pskv_aggregated_messages", "messages node aggregation sent (NodeAggregate)"),
}
# stats() keys of the node -> (series, help); counters with label node
_NODE_COUNTERS = {
    "messages_sent": ("pskv_sent_messages", "messages this node sent to other nodes (not the coordinator)"),
    "bytes_sent": ("pskv_sent_bytes", "bytes of the messages this node sent to other nodes"),
    "messages_received": ("pskv_received_messages", "messages this node's inbox received (a packed frame once)"),
    "bytes_received": ("pskv_received_bytes", "bytes of the messages this node's inbox received"),
    "requests_served": ("pskv_served_requests", "requests from other nodes this node's server handled"),
    "request_errors": ("pskv_served_request_errors", "requests from other nodes answered with an error"),
    "declined": ("pskv_relocation_declined_keys", "keys whose move this node, as manager, declined (leases)"),
    "clock_waits": ("pskv_clock_waits", "pulls that waited for the global clock (BSP/SSP)"),
    "clock_wait_seconds": ("pskv_clock_wait_seconds", "seconds pulls waited for the global clock (BSP/SSP)"),
    "membership_changes": ("pskv_membership_changes", "membership changes this node saw (nodes died, left, joined)"),
}
# stats() keys of the node -> (series, help); gauges with label node
_NODE_GAUGES = {
    "clock": ("pskv_clock", "the global clock: every worker of the cluster ended the clocks below it"),
    "epoch": ("pskv_membership_epoch", "the membership epoch (one more per change)"),
    "pending_requests": ("pskv_pending_requests", "requests of this node waiting for replies"),
    "deferred_requests": ("pskv_deferred_requests", "requests waiting here for keys in transfer (Relocate)"),
    "held_messages": ("pskv_held_messages", "messages held until this node is welcomed"),
    "failed": ("pskv_failed", "1 once this node failed (it raises NodeFailure), else 0"),
    "rss_bytes": ("pskv_resident_memory_bytes", "resident memory of this node's process"),
    "max_rss_bytes": ("pskv_max_resident_memory_bytes", "peak resident memory of this node's process"),
}


def kind_and_table(desc: str) -> tuple[str, str]:
    """A request description ("pull on table 'emb' by node 0", "replica sync of table 'h'") as the
    labels (kind, table): ("pull", "emb"), ("replica_sync", "h"); ("other", "") for the rest."""
    m = _DESC.match(desc)
    if m is None:
        return "other", ""
    return m["kind"].replace(" ", "_"), ast.literal_eval(m["table"])


class NodeCollector:
    """A prometheus_client collector of one node's sample (see the module docstring)."""

    def __init__(self, sample: Callable[[], dict]) -> None:
        self._sample = sample

    def describe(self) -> list:
        return []  # registering must not sample the node: the series come at scrape time

    def collect(self) -> Iterator:
        return iter(families(self._sample()))


def families(sample: dict) -> list:
    """The metric families of one node's sample (stats() and the extras of diagnostics.Report.sample)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    node = str(sample["rank"])
    out = []
    requests = CounterMetricFamily(
        "pskv_requests", "pulls and pushes this node's workers issued on the table", labels=["node", "table", "kind"]
    )
    keys = CounterMetricFamily(
        "pskv_keys",
        "keys of those calls, answered here (local) or sent to another node (remote)",
        labels=["node", "table", "location"],
    )
    staleness = GaugeMetricFamily(
        "pskv_table_staleness", "the table's staleness bound in clocks (0: BSP, +Inf: Async)", labels=["node", "table"]
    )
    extra = {
        key: CounterMetricFamily(name, doc, labels=["node", "table"]) for key, (name, doc) in _TABLE_COUNTERS.items()
    }
    for table, st in sorted(sample["tables"].items()):
        requests.add_metric([node, table, "pull"], st["pulls"])
        requests.add_metric([node, table, "push"], st["pushes"])
        keys.add_metric([node, table, "local"], st["local_keys"])
        keys.add_metric([node, table, "remote"], st["remote_keys"])
        if table in sample.get("staleness", {}):
            staleness.add_metric([node, table], sample["staleness"][table])
        for key, family in extra.items():
            if key in st:
                family.add_metric([node, table], st[key])
    out += [requests, keys, staleness, *(f for f in extra.values() if f.samples)]
    out += _latency(node, sample.get("latency", {}))
    for key, (name, doc) in _NODE_COUNTERS.items():
        if key in sample:
            counter = CounterMetricFamily(name, doc, labels=["node"])
            counter.add_metric([node], sample[key])
            out.append(counter)
    for key, (name, doc) in _NODE_GAUGES.items():
        if key in sample:
            gauge = GaugeMetricFamily(name, doc, labels=["node"])
            gauge.add_metric([node], float(sample[key]))
            out.append(gauge)
    members = GaugeMetricFamily("pskv_members", "live nodes of the cluster as this node sees them", labels=["node"])
    members.add_metric([node], len(sample["members"]))
    dropped = CounterMetricFamily(
        "pskv_dropped_messages",
        "messages dropped: garbage or another cluster's (garbage), or from a node that is no member any more (fenced)",
        labels=["node", "reason"],
    )
    for reason, key in (("garbage", "dropped"), ("fenced", "fenced")):
        if key in sample:
            dropped.add_metric([node, reason], sample[key])
    return [*out, members, dropped]


def _latency(node: str, latency: dict[str, Latency]) -> list:
    """Histograms, keys and failures of the requests this node sent, by table and kind."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    hist = HistogramMetricFamily(
        "pskv_request_duration_seconds",
        "requests this node sent to other nodes, from issue to their last reply",
        labels=["node", "table", "kind"],
    )
    keys = CounterMetricFamily(
        "pskv_request_keys", "keys of those requests (completed)", labels=["node", "table", "kind"]
    )
    failures = CounterMetricFamily(
        "pskv_request_failures",
        "requests this node sent that failed (a node died, an error reply, no progress, shutdown)",
        labels=["node", "table", "kind"],
    )
    merged: dict[tuple[str, str], Latency] = {}  # descriptions that differ only after the table name
    for desc, lat in latency.items():
        into = merged.setdefault(kind_and_table(desc), Latency())
        into.counts = [a + b for a, b in zip(into.counts, lat.counts, strict=True)]
        into.seconds += lat.seconds
        into.keys += lat.keys
        into.failed += lat.failed
    for (kind, table), lat in sorted(merged.items()):
        labels = [node, table, kind]
        cumulative, buckets = 0, []
        for bound, count in zip((*LATENCY_BUCKETS, math.inf), lat.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
        hist.add_metric(labels, buckets, lat.seconds)
        keys.add_metric(labels, lat.keys)
        failures.add_metric(labels, lat.failed)
    return [hist, keys, failures]


class Exporter:
    """prometheus_client's HTTP server for one node, at http://host:port/metrics. `close()` is idempotent."""

    def __init__(self, host: str, port: int, rank: int, sample: Callable[[], dict]) -> None:
        """Start serving (thread pskv-metrics-R). Raises ConfigError if prometheus-client is missing
        or the port cannot be bound."""
        try:
            import prometheus_client
        except ImportError:
            raise ConfigError(
                f"node {rank}: PSKV_METRICS_PORT asks for metrics at {host}:{port}, but "
                f"prometheus-client is not installed; {INSTALL}, or unset PSKV_METRICS_PORT"
            ) from None
        registry = prometheus_client.CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(sample))
        try:
            self._httpd, self._thread = prometheus_client.start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(
                f"node {rank}: cannot serve metrics at {host}:{port} ({exc.strerror or exc}); "
                "PSKV_METRICS_PORT=P serves node r at port P + r: choose P where those ports are "
                "free"
            ) from None
        self._thread.name = f"pskv-metrics-{rank}"
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"
        self._lock = threading.Lock()  # guards _closed: close() may come from teardown and atexit at once
        self._closed = False

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving, close the port and join the thread (at most `timeout` seconds)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread.is_alive():  # (shutdown() waits for serve_forever: never call it on a dead thread)
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)

    def __repr__(self) -> str:
        return f"<Exporter {self.url}{' closed' if self._closed else ''}>"
