"""`pskv bench` end to end, in its smallest form: every cell, the authenticated twins and the raw-pyzmq
floor are measured and printed (not how fast: speed lives in benchmarks/RESULTS.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_bench_prints_every_cell_the_auth_twins_and_the_floor():
    proc = subprocess.run([sys.executable, "-m", "pskv", "bench", "--quick", "--sizes", "1,1000", "--dims", "8",
                           "--rounds", "1", "--budget", "0.01", "--auth"], capture_output=True, text=True, timeout=130)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    cells = re.findall(r"^\| (pull|push) \| (numpy|local|remote|remote\+auth) \| (call|rtt|window 8) \| ([\d,]+) \| 8 \|",
                       out, re.M)
    # 2 ops x 2 sizes: numpy and local one call each, remote and remote+auth a round trip and a window
    assert len(cells) == 2 * 2 * (1 + 1 + 2 + 2), out
    assert {(w, m) for _, w, m, _ in cells} == {("numpy", "call"), ("local", "call"), ("remote", "rtt"),
                                                ("remote", "window 8"), ("remote+auth", "rtt"),
                                                ("remote+auth", "window 8")}
    twins = re.findall(r"^\| (pull|push) \| (rtt|window 8) \| ([\d,]+) \| 8 \| .* \| (\d+\.\d\d) \|$", out, re.M)
    assert len(twins) == 8 and all(float(ratio) > 0 for *_, ratio in twins), out
    floor = out[out.index("## the floor"):]
    assert len(re.findall(r"^\| (pull|push|8 outstanding|pskv pull) .*\| \d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\) \|$",
                          floor, re.M)) == 8, floor
    assert re.search(r"^- \[(MET |MISS|n/a )\] remote 1,000-key pull round trip", out, re.M)
