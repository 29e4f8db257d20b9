"""A run that dies is resumed from its last checkpoint on another node count (`--resume`) and ends
where an undisturbed run ends."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MF = ["--data", "ml-100k", "--max-ratings", "30000", "--epochs", "8", "--rank", "20", "--progress", "none"]


def _rmse(text: str) -> float:
    # the summary's line; not necessarily the last: under the launcher a node's stderr lines (its
    # "checkpoint ... (epoch 8)") travel in another pipe and may be echoed after its stdout's
    return float(re.findall(r"^(?:\[node \d+\] )?test RMSE (\d+\.\d+)$", text, re.M)[-1])


@pytest.mark.long(45)
def test_mf_killed_mid_run_resumes_on_two_nodes_and_matches(cluster_factory, tmp_path):
    """3 nodes checkpoint every 2 epochs; node 1 is SIGKILLed after epoch 5 (the run stops: no
    backups); `pskv run mf --nodes 2 -- ... --resume` goes on from epoch 4 and ends within 0.005 of
    the test RMSE of an undisturbed 3-node run."""
    calm = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", "--nodes", "3", "--", *MF], capture_output=True,
                          text=True, timeout=200)
    assert calm.returncode == 0, calm.stdout[-2000:] + calm.stderr[-2000:]
    ckpt = tmp_path / "ckpt"
    cluster = cluster_factory(3, [sys.executable, "-m", "pskv.apps.mf", *MF, "--checkpoint-dir", str(ckpt),
                                  "--checkpoint-every", "2"], failure_timeout=3.0)
    wait_until(lambda: len(re.findall(r"epoch +\d+ ", cluster.output(0))) >= 5, 150,
               lambda: f"epoch 5\n{cluster.logs_tail()}")
    cluster.kill(1)
    assert cluster.wait(timeout=60) != 0
    resumed = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", "--nodes", "2", "--", *MF,
                              "--checkpoint-dir", str(ckpt), "--resume"], capture_output=True, text=True, timeout=200)
    out = resumed.stdout
    assert resumed.returncode == 0, out[-2000:] + resumed.stderr[-2000:]
    start = int(re.search(r"resumed from \S+ after epoch (\d+)", out).group(1))
    assert start in (4, 6), out  # the last complete checkpoint before the kill
    assert re.findall(r"epoch +(\d+) ", out) == [str(e) for e in range(start + 1, 9)], out
    assert abs(_rmse(out) - _rmse(calm.stdout)) <= 0.005, (_rmse(out), _rmse(calm.stdout))
