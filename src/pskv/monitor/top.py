"""`pskv top`: a live view of a running cluster, read from its nodes' metrics endpoints.

    pskv launch -n 2 --metrics 9100 -- python examples/quickstart.py &
    pskv top                                         # this machine's newest run with metrics (monitor.runs)
    pskv top --metrics-port 9100                     # the nodes at ports 9100, 9101, ... (--nodes N: N of them)
    pskv top --once http://10.0.0.7:9100/metrics     # one frame, for scripts and tests

One line per node (TABLE `*`: all its tables) and one per table of each node: requests and keys
its workers issued (totals, and per second over the last interval), bytes per second in and out,
p50/p99 latency of its requests to other nodes (over the last interval, or since the start when
none completed in it), the global clock and the queue (requests waiting for replies, or waiting
here for keys in transfer). Standard library only: urllib scrapes, ANSI codes redraw, so it
runs where prometheus-client is not installed.

Threads and ownership: one thread, the caller's; every scrape has a timeout.
"""

from __future__ import annotations

import math
import re
import sys
import time
import urllib.error
import urllib.request
from typing import TextIO

Sample = tuple[str, tuple[tuple[str, str], ...], float]  # name, sorted labels, value

_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_HEADER = ("NODE", "TABLE", "REQS", "REQ/S", "KEYS", "KEYS/S", "IN/S", "OUT/S", "P50", "P99", "CLOCK", "QUEUE")
_WIDTHS = (4, 12, 9, 8, 11, 9, 7, 7, 8, 8, 6, 5)


def parse(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and blank lines skipped)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None or line.startswith("#"):
            continue
        labels = tuple(
            sorted((k, re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e[0]], v)) for k, v in _LABEL.findall(m[2] or ""))
        )
        out.append((m[1], labels, float(m[3])))
    return out


def urls_for(port: int | None, nodes: int | None, host: str, urls: list[str]) -> list[str]:
    """The endpoints to watch: node r at http://host:(port + r)/metrics, then `urls` (host:port or URLs)."""
    out = [f"http://{host}:{port + r}/metrics" for r in range(nodes or 0)] if port else []
    for given in urls:
        url = given if "://" in given else f"http://{given}"
        out.append(url if url.split("://", 1)[1].count("/") else url + "/metrics")
    return out


def find(port: int | None, nodes: int | None, host: str, urls: list[str]) -> list[str]:
    """The endpoints `pskv top` watches. With `urls` or `port`: urls_for, where `port` without `nodes`
    means the nodes of the live run (monitor.runs) that serves at `port`, else every port from `port`
    up that answers (none answering: just `port`, shown as unreachable). With neither: the newest live
    run's endpoints ([] when no run of this user has metrics on)."""
    from . import runs

    if port is None and not urls:
        found = runs.live()
        return list(found[0]["urls"]) if found else []
    if port and nodes is None:
        mine = [r for r in runs.live() if r.get("metrics_port") == port]
        if mine:
            return list(mine[0]["urls"]) + urls_for(None, None, host, urls)
        nodes = _answering(host, port)
    return urls_for(port, nodes, host, urls)


def _answering(host: str, port: int, most: int = 1024) -> int:
    """How many consecutive ports from `port` up serve metrics (at least 1: the first is always shown)."""
    n = 0
    while n < most and not isinstance(scrape(f"http://{host}:{port + n}/metrics", timeout=1.0), str):
        n += 1
    return max(n, 1)


def scrape(url: str, timeout: float = 2.0) -> list[Sample] | str:
    """The samples at `url`, or why there are none (one line)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return parse(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{url} unreachable: {getattr(exc, 'reason', exc)}"


class View:
    """One node's numbers at one moment: per table (and `*`, all of them) totals and histograms."""

    def __init__(self, samples: list[Sample], when: float) -> None:
        self.when = when
        self.node = "?"
        self.totals: dict[tuple[str, str], float] = {}  # (table, column) -> value; table "*" for the node
        self.buckets: dict[str, dict[float, float]] = {}  # table -> le -> cumulative count
        for name, labels, value in samples:
            lab = dict(labels)
            self.node = lab.get("node", self.node)
            table = lab.get("table")
            column = {
                "pskv_requests_total": "reqs",
                "pskv_keys_total": "keys",
                "pskv_sent_bytes_total": "out",
                "pskv_received_bytes_total": "in",
                "pskv_clock": "clock",
                "pskv_pending_requests": "queue",
                "pskv_deferred_requests": "queue",
            }.get(name)
            if column is not None:
                for t in {"*", table or "*"}:
                    self.totals[t, column] = self.totals.get((t, column), 0.0) + value
            elif name == "pskv_request_duration_seconds_bucket":
                le = math.inf if lab["le"] == "+Inf" else float(lab["le"])
                for t in ("*", table) if table else ("*",):  # (table "": requests of no table)
                    hist = self.buckets.setdefault(t, {})
                    hist[le] = hist.get(le, 0.0) + value

    def tables(self) -> list[str]:
        return sorted({t for t, _ in self.totals if t != "*"} | set(self.buckets) - {"*"})


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """histogram_quantile as Prometheus computes it: linear within the bucket; None without counts."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    target, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= target:
            if bound == math.inf:
                return lower
            return lower + (bound - lower) * ((target - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


def rows(now: View, before: View | None) -> list[tuple[str, ...]]:
    """The lines of one node: `*` first, then each table."""
    dt = (now.when - before.when) if before is not None else 0.0
    out: list[tuple[str, ...]] = []
    for table in ["*", *now.tables()]:

        def total(column: str, table: str = table) -> float | None:
            return now.totals.get((table, column))

        def rate(column: str, table: str = table) -> float | None:
            value = total(column, table)
            if dt <= 0 or value is None or before is None:  # (dt > 0: there is a view before)
                return None
            return (value - before.totals.get((table, column), 0.0)) / dt

        hist = now.buckets.get(table, {})
        delta = {le: c - (before.buckets.get(table, {}).get(le, 0.0) if before else 0.0) for le, c in hist.items()}
        recent = delta if delta and max(delta.values()) > 0 else hist
        node_only = table == "*"
        out.append(
            (
                now.node,
                table,
                _count(total("reqs")),
                _rate(rate("reqs")),
                _count(total("keys")),
                _rate(rate("keys")),
                _bytes(rate("in")) if node_only else "-",
                _bytes(rate("out")) if node_only else "-",
                _ms(quantile(0.5, recent)),
                _ms(quantile(0.99, recent)),
                _count(total("clock")) if node_only else "-",
                _count(total("queue")) if node_only else "-",
            )
        )
    return out


def frame(views: list[View | str], before: dict[int, View]) -> list[str]:
    """The text of one refresh: a header and each node's lines (or why it could not be read)."""
    lines = [
        " ".join(h.rjust(w) if i > 1 else h.ljust(w) for i, (h, w) in enumerate(zip(_HEADER, _WIDTHS, strict=True)))
    ]
    for i, view in enumerate(views):
        if isinstance(view, str):
            lines.append(f"{'?'.ljust(_WIDTHS[0])} {view}")
            continue
        for row in rows(view, before.get(i)):
            lines.append(
                " ".join(c.rjust(w) if j > 1 else c.ljust(w) for j, (c, w) in enumerate(zip(row, _WIDTHS, strict=True)))
            )
    return lines


def run(
    urls: list[str], *, once: bool = False, interval: float = 1.0, out: TextIO | None = None, frames: int | None = None
) -> int:
    """Show the cluster at `urls` every `interval` seconds until Ctrl-C (`frames`: that many). `once`:
    print one frame (rates over one interval) and return 1 if a node could not be read, else 0."""
    out = out or sys.stdout
    before: dict[int, View] = {}
    shown = 0
    try:
        while True:
            views = [_view(url) for url in urls]
            if once and shown == 0:  # a second look, one interval later, gives the rates
                before = {i: v for i, v in enumerate(views) if isinstance(v, View)}
                shown = 1
                time.sleep(interval)
                continue
            lines = frame(views, before)
            if once:
                out.write("\n".join(lines) + "\n")
                return int(any(isinstance(v, str) for v in views))
            stamp = time.strftime("%H:%M:%S")
            out.write(
                "\x1b[H\x1b[2J" + f"pskv top  {len(urls)} node(s)  {stamp}  (Ctrl-C quits)\n" + "\n".join(lines) + "\n"
            )
            out.flush()
            before = {i: v for i, v in enumerate(views) if isinstance(v, View)}
            shown += 1
            if frames is not None and shown >= frames:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def _view(url: str) -> View | str:
    samples = scrape(url)
    return samples if isinstance(samples, str) else View(samples, time.monotonic())


def _count(value: float | None) -> str:
    """Exact below 10 million (the tests compare these), then 12.3M."""
    return "-" if value is None else f"{value:.0f}" if value < 1e7 else _si(value, "")


def _rate(value: float | None) -> str:
    return "-" if value is None else _si(value, "")


def _bytes(value: float | None) -> str:
    return "-" if value is None else _si(value, "B")


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.1f}{prefix}{unit}"
    return f"{value:.1f}{unit}" if not unit else f"{value:.0f}{unit}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}ms"
