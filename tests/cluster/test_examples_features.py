"""The feature examples under examples/ run as their docstrings say, on 1 node and under `pskv launch -n 2`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(example: str, nodes: int) -> str:
    command = [sys.executable, str(EXAMPLES / example)]
    if nodes > 1:
        command = [sys.executable, "-m", "pskv", "launch", "-n", str(nodes), "--", *command]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("nodes", [1, 2])
def test_schedule_example_solves_least_squares_the_same_on_every_node(nodes):
    out = _run("schedule.py", nodes)
    errors = re.findall(r"node (\d): 320 rounds, max \|beta - beta_true\| = (\S+)", out)
    assert sorted(int(r) for r, _ in errors) == list(range(nodes)), out
    assert all(float(e) < 1e-9 for _, e in errors), out
    assert len({e for _, e in errors}) == 1  # the same rounds everywhere: the same beta


@pytest.mark.parametrize("nodes", [2])
def test_outofcore_example_sums_exactly_in_a_small_budget(nodes):
    out = _run("outofcore.py", nodes)
    found = re.findall(r"node (\d): sum (\d+) of (\d+) pushed; (\d+) KiB of files, peak (\d+) KiB resident", out)
    assert sorted(int(f[0]) for f in found) == list(range(nodes)), out
    for _, total, pushed, files, peak in found:
        assert total == pushed == str(100 * 250 * 8 * nodes)
        assert int(files) >= 12500 // nodes and int(peak) < int(files)  # rows on disk, not all in memory


@pytest.mark.parametrize("nodes, final", [(1, "[-2. -2.]"), (2, "[-5. -5.]")])
def test_aggregation_example_applies_one_update_per_round(nodes, final):
    """Each round every thread of every node pushes 1: w -= 0.5 * (2 threads x nodes), 3 rounds from 1."""
    out = _run("aggregation.py", nodes)
    finals = re.findall(r"^(?:\[node \d\] )?(\[\S+ \S+\])$", out, re.M)  # the last print of each node
    assert finals == [final] * nodes, out


def test_backups_example_runs_on_three_nodes_with_one_backup():
    proc = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", "3", "--backups", "1", "--", sys.executable,
                           str(EXAMPLES / "backups.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(re.findall(r"\[node (\d)\] \[0, 1, 2\]", proc.stdout)) == ["0", "1", "2"], proc.stdout


@pytest.mark.parametrize("nodes", [2])
def test_placement_example_localizes_each_nodes_rows_and_samples(nodes):
    out = _run("placement.py", nodes)
    found = re.findall(r"node (\d): (\d+) of (\d+) rows local, (\d+) sampled, (\d+) localized", out)
    assert sorted(int(f[0]) for f in found) == list(range(nodes)), out
    for _, local, mine, sampled, _ in found:
        assert local == mine == str(10_000 // nodes) and sampled == "1000", out


def test_metrics_example_scrapes_its_own_counts():
    from helpers import free_port

    port = free_port()
    proc = subprocess.run([sys.executable, str(EXAMPLES / "metrics.py")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "METRICS_PORT": str(port)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        'pskv_requests_total{kind="pull",node="0",table="emb"} 1.0',
        'pskv_requests_total{kind="push",node="0",table="emb"} 1.0',
        'pskv_keys_total{location="local",node="0",table="emb"} 30.0',
        'pskv_keys_total{location="remote",node="0",table="emb"} 0.0'], proc.stdout
