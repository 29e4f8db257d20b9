"""The feature examples under examples/ run as their docstrings say, on 1 node and under `pskv launch -n 2`."""

from __future__ import annotations

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


@pytest.mark.parametrize("nodes", [1, 2])
def test_outofcore_example_sums_exactly_in_a_small_budget(nodes):
    out = _run("outofcore.py", nodes)
    found = re.findall(r"node (\d): sum (\d+) of (\d+) pushed; (\d+) MiB of files, peak (\d+) MiB resident", out)
    assert sorted(int(f[0]) for f in found) == list(range(nodes)), out
    for _, total, pushed, files, peak in found:
        assert total == pushed == str(100 * 1000 * 8 * nodes)
        assert int(files) >= 30 // nodes and int(peak) < int(files)  # rows on disk, not all in memory
