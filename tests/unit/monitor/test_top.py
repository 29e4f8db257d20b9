"""monitor/top.py: the text format parser, histogram quantiles, one frame's lines, and `pskv top --once`
against a node's real endpoint (and one that does not answer)."""

from __future__ import annotations

import json
import math
import os
import tempfile

import numpy as np
import pytest

from helpers import free_port
from pskv import cli
from pskv.monitor import top

pytestmark = pytest.mark.timeout(60)

TEXT = """\
# HELP pskv_requests_total pulls and pushes
# TYPE pskv_requests_total counter
pskv_requests_total{kind="pull",node="0",table="emb"} 6.0
pskv_requests_total{kind="push",node="0",table="emb"} 4.0
pskv_keys_total{location="local",node="0",table="emb"} 100.0
pskv_keys_total{location="remote",node="0",table="emb"} 50.0
pskv_keys_total{location="local",node="0",table="w \\"x\\""} 1.0
pskv_sent_bytes_total{node="0"} 4096.0
pskv_clock{node="0"} 3.0
pskv_pending_requests{node="0"} 2.0
pskv_deferred_requests{node="0"} 1.0
pskv_request_duration_seconds_bucket{kind="pull",le="0.001",node="0",table="emb"} 0.0
pskv_request_duration_seconds_bucket{kind="pull",le="0.002",node="0",table="emb"} 10.0
pskv_request_duration_seconds_bucket{kind="pull",le="+Inf",node="0",table="emb"} 10.0
"""


def test_parse_reads_names_labels_and_values():
    """Samples come back with sorted labels (escapes undone); comments are skipped."""
    samples = top.parse(TEXT)
    assert samples[0] == ("pskv_requests_total", (("kind", "pull"), ("node", "0"), ("table", "emb")), 6.0)
    assert ("pskv_keys_total", (("location", "local"), ("node", "0"), ("table", 'w "x"')), 1.0) in samples
    assert top.parse('a_total{le="+Inf"} +Inf\n')[0][2] == math.inf


def test_quantile_interpolates_within_the_bucket():
    """As Prometheus' histogram_quantile: linear inside the bucket; the last finite bound for +Inf."""
    assert top.quantile(0.5, {0.001: 0, 0.002: 10, math.inf: 10}) == pytest.approx(0.0015)
    assert top.quantile(0.99, {0.001: 5, math.inf: 10}) == 0.001
    assert top.quantile(0.5, {0.001: 0, math.inf: 0}) is None


def test_frame_has_a_line_per_node_and_table():
    """Node line (`*`) with totals, bytes, clock and queue; a line per table; rates over the interval."""
    before = top.View(top.parse(TEXT.replace(" 6.0", " 1.0").replace("4096.0", "2048.0")), when=10.0)
    now = top.View(top.parse(TEXT), when=12.0)
    lines = top.frame([now, "http://x:1/metrics unreachable: refused"], {0: before})
    assert lines[0].split() == list(top._HEADER)
    node, emb = lines[1].split(), lines[2].split()
    assert node[:6] == ["0", "*", "10", "2.5", "151", "0.0"]
    assert node[6:8] == ["-", "1.0kB"] and node[10:] == ["3", "3"]  # (4096 - 2048) / 2 s; clock 3; 2 pending + 1 deferred
    assert emb[:5] == ["0", "emb", "10", "2.5", "150"] and emb[8] == "1.50ms" and emb[10:] == ["-", "-"]
    assert lines[-1].split()[1:3] == ["http://x:1/metrics", "unreachable:"]


def test_top_once_prints_a_node_and_its_tables(metrics_node, capsys):
    """`pskv top --once` on a 1-node cluster's endpoint: its totals; an unreachable endpoint makes it exit 1."""
    node, port = metrics_node
    t = node.table("t", rows=10, dim=2)
    t.pull(np.arange(10))
    t.pull(np.arange(3))
    assert cli.main(["top", "--once", "--interval", "0.05", "--metrics-port", str(port)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:5] for line in lines[1:]] == [["0", "*", "2", "0.0", "13"], ["0", "t", "2", "0.0", "13"]]
    dead = free_port()
    assert cli.main(["top", "--once", "--interval", "0.05", f"127.0.0.1:{dead}"]) == 1
    assert f"127.0.0.1:{dead}/metrics unreachable" in capsys.readouterr().out


def test_top_without_endpoints_is_an_error(capsys, monkeypatch, tmp_path):
    """`pskv top` with neither --metrics-port nor URLs, and no run of this user with metrics (a private
    TMPDIR: no run files), says what to give it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main(["top", "--once"]) == 2
    assert "--metrics-port P" in capsys.readouterr().err


def test_top_finds_the_newest_live_run_by_its_file(monkeypatch, tmp_path):
    """runs.register writes this process's run file; a bare `pskv top` (top.find) watches the newest live run's
    endpoints; a file whose launcher is gone (a PID that runs no more) is skipped; --metrics-port P without
    --nodes takes the nodes of the run at P."""
    from pskv.monitor import runs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert top.find(None, None, "127.0.0.1", []) == []
    urls = ["http://127.0.0.1:9100/metrics", "http://127.0.0.1:9101/metrics"]
    path = runs.register(urls, "python train.py", 9100)
    assert path == tmp_path / f"pskv-runs-{os.getuid()}" / f"run-{os.getpid()}.json"
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    dead = {"pid": 2 ** 22 + 7, "started": 1e12, "command": "x", "metrics_port": 9300, "urls": ["http://h:1/metrics"]}
    (path.parent / "run-gone.json").write_text(json.dumps(dead))  # newer, but its launcher is gone
    assert top.find(None, None, "127.0.0.1", []) == urls
    assert top.find(9100, None, "127.0.0.1", []) == urls
    assert top.find(9100, 1, "127.0.0.1", []) == urls[:1]
    assert [r["command"] for r in runs.live()] == ["python train.py"]

