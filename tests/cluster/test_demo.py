"""`pskv demo` trains on 2 nodes x 2 threads and ends with a test RMSE well below the mean baseline."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_demo_small_run_beats_the_mean_baseline():
    """A small demo run prints per-epoch RMSE and a summary whose last line is the final test RMSE."""
    proc = subprocess.run([sys.executable, "-m", "pskv", "demo", "--ratings", "40000", "--users", "800",
                           "--items", "400", "--epochs", "6"], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(re.findall(r"epoch +\d+ +train RMSE", proc.stdout + proc.stderr)) == 6
    final = re.fullmatch(r"test RMSE (\d\.\d+)", lines[-1])
    assert final, lines[-1]
    baseline = float(re.search(r"predict the mean rating\): test RMSE (\d\.\d+)", proc.stdout).group(1))
    assert float(final.group(1)) < 0.7 * baseline
