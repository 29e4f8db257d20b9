"""`pskv demo` trains MF on 2 nodes x 2 threads and ends with a test RMSE well below the mean baseline."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(120)]


def _demo(*args: str) -> tuple[str, float, float]:
    proc = subprocess.run([sys.executable, "-m", "pskv", "demo", "--plot", "", *args], capture_output=True,
                          text=True, timeout=100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\r" not in proc.stdout + proc.stderr  # not a terminal: lines, as the apps print, no bar frames
    lines = proc.stdout.strip().splitlines()
    final = re.fullmatch(r"test RMSE (\d\.\d+)", lines[-1])
    assert final, lines[-1]
    baseline = float(re.search(r"predict the mean rating\): test RMSE (\d\.\d+)", proc.stdout).group(1))
    return proc.stdout + proc.stderr, float(final.group(1)), baseline


@pytest.mark.slow
def test_demo_movielens_short_run_beats_the_mean_baseline():
    """The real demo (MovieLens-100K), 6 epochs: one line per epoch, last line the final test RMSE."""
    output, rmse, baseline = _demo("--epochs", "6")
    assert len(re.findall(r"epoch +\d+ +train RMSE", output)) == 6
    assert rmse < 0.95 and rmse < baseline - 0.15, (rmse, baseline)


@pytest.mark.slow
def test_demo_synthetic_small_run_beats_the_mean_baseline():
    """`--data synthetic` still trains on generated ratings and ends far below the mean baseline."""
    output, rmse, baseline = _demo("--data", "synthetic", "--ratings", "40000", "--users", "800", "--items", "400",
                                   "--epochs", "6")
    assert len(re.findall(r"epoch +\d+ +train RMSE", output)) == 6
    assert rmse < 0.7 * baseline


def test_demo_progress_lines_show_a_rate_only_after_a_second_of_reports(monkeypatch, capsys):
    """Into a file: a line every 2 s, the rate counted from the first report (numba compiles before
    it), never a jump over the milliseconds after it; the last line at close."""
    from pskv import demo

    now = [100.0]
    monkeypatch.setattr(demo.time, "monotonic", lambda: now[0])
    progress = demo._Progress(unit="ratings", terminal=False)
    for t, done in [(0.0, 50_000), (0.01, 60_000), (0.5, 100_000), (2.0, 250_000), (3.0, 350_000), (4.5, 500_000)]:
        now[0] = 100.0 + t
        progress.update(done, 1_000_000)
    progress.write("epoch  1")
    progress.close(finished=True)
    out, err = capsys.readouterr()
    assert out == "epoch  1\n"
    assert err.splitlines() == ["   25.0%  250,000 ratings  100,000 ratings/s",
                                "   50.0%  500,000 ratings  100,000 ratings/s",
                                "  100.0%  1,000,000 ratings  211,111 ratings/s"]
