"""`pskv demo` trains MF on 2 nodes x 2 threads and ends with a test RMSE well below the mean baseline."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _demo(*args: str) -> tuple[str, float, float]:
    proc = subprocess.run([sys.executable, "-m", "pskv", "demo", "--plot", "", *args], capture_output=True,
                          text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    final = re.fullmatch(r"test RMSE (\d\.\d+)", lines[-1])
    assert final, lines[-1]
    baseline = float(re.search(r"predict the mean rating\): test RMSE (\d\.\d+)", proc.stdout).group(1))
    return proc.stdout + proc.stderr, float(final.group(1)), baseline


def test_demo_movielens_short_run_beats_the_mean_baseline():
    """The real demo (MovieLens-100K), 6 epochs: one line per epoch, last line the final test RMSE."""
    output, rmse, baseline = _demo("--epochs", "6")
    assert len(re.findall(r"epoch +\d+ +train RMSE", output)) == 6
    assert rmse < 0.95 and rmse < baseline - 0.15, (rmse, baseline)


def test_demo_synthetic_small_run_beats_the_mean_baseline():
    """`--data synthetic` still trains on generated ratings and ends far below the mean baseline."""
    output, rmse, baseline = _demo("--data", "synthetic", "--ratings", "40000", "--users", "800", "--items", "400",
                                   "--epochs", "6")
    assert len(re.findall(r"epoch +\d+ +train RMSE", output)) == 6
    assert rmse < 0.7 * baseline
