"""`pskv run mnist`: LeNet-5 on Fashion-MNIST (Debian's dataset-fashion-mnist, fetched by pskv data)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")  # `make test` installs it: never skipped in CI

import pskv  # noqa: E402
from pskv.checkpoint.format import read_manifest, steps  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SMALL = ["--progress", "none", "--limit", "3200", "--test-limit", "1000", "--batch", "32", "--epochs", "2"]


def _run(*args: str, nodes: int = 1) -> str:
    cmd = [sys.executable, "-m", "pskv", "run", "mnist", "--nodes", str(nodes), "--", *SMALL, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _accuracy(out: str) -> float:
    return float(re.search(r"test accuracy (\d\.\d+)", out).group(1))


def _weights(directory) -> list[tuple[dict, np.ndarray]]:
    """(extra, the weights table's rows) of every complete checkpoint, oldest first."""
    found = []
    for _, path, complete in steps(directory):
        if complete:
            extra = read_manifest(path)["extra"]
            found.append((extra, pskv.load_checkpoint(path)[extra["table"]].values))
    return found


def test_mnist_async_on_two_nodes_learns():
    out = _run("--mode", "async", nodes=2)
    assert "mode async" in out and _accuracy(out) > 0.4, out


@pytest.mark.long
def test_mnist_sync_on_two_nodes_trains_the_weights_of_one_and_pskv_evaluate_follows_it(tmp_path):
    """1 node, then 2 nodes in sync mode with a checkpoint every 25 steps, while `pskv evaluate`
    (started first, waiting) tests each checkpoint once, in step order, and stops after the final one."""
    import csv
    import os

    one = _run("--checkpoint-dir", str(tmp_path / "one"), "--eval-freq", "25", "--log", str(tmp_path / "one.jsonl"))
    assert _accuracy(one) > 0.5, one  # 10 classes: chance is 0.1
    rows = [json.loads(line) for line in (tmp_path / "one.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and rows[1]["train_loss"] < rows[0]["train_loss"] < 2.3
    evaluator = subprocess.Popen([sys.executable, "-m", "pskv", "evaluate", "--checkpoint-dir", str(tmp_path / "two"),
                                  "--test-limit", "500", "--out", str(tmp_path / "r.csv"), "--plot",
                                  str(tmp_path / "curve.png"), "--poll", "0.05", "--timeout", "120"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        two = _run("--checkpoint-dir", str(tmp_path / "two"), "--eval-freq", "25", nodes=2)
        out, _ = evaluator.communicate(timeout=120)
    finally:
        if evaluator.poll() is None:
            evaluator.kill()
            evaluator.wait(10)
    assert "2 node(s) x 1 thread(s), mode sync" in two and _accuracy(two) > 0.5, two
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert [e["step"] for e, _ in a] == [e["step"] for e, _ in b] == [25, 50, 75, 100, 125, 150, 175, 200]
    assert [e["final"] for e, _ in a] == [False] * 7 + [True]  # every checkpoint kept: an evaluator reads each
    # the same weights up to float rounding (half-batch means summed vs one mean); at lr 0.05 with momentum
    # 0.9 early training then amplifies the rounding (measured: 4e-8 at step 25, 8e-5 at 100, 2e-2 at 125)
    for (ea, wa), (eb, wb) in zip(a[:2], b[:2]):
        assert np.abs(wa - wb).max() < 1e-5, (ea["step"], np.abs(wa - wb).max())
    assert evaluator.returncode == 0, out
    results = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [int(r["step"]) for r in results] == [25, 50, 75, 100, 125, 150, 175, 200], out
    assert float(results[-1]["test_acc"]) > 0.5 and "evaluated 8 checkpoint(s)" in out
    assert os.path.getsize(tmp_path / "curve.png") > 1000


def test_mnist_out_writes_weights_that_give_the_printed_accuracy(tmp_path):
    """--out MODEL.pt: load_model in this process tests the same images to the accuracy the app printed."""
    from pskv.apps import mnist

    out = _run("--out", str(tmp_path / "lenet.pt"), "--epochs", "1")
    model = mnist.load_model(tmp_path / "lenet.pt")
    _, _, vx, vy = mnist.load("fashion-mnist", 3200, 1000)
    assert mnist.accuracy(model, vx, vy)[1] == pytest.approx(_accuracy(out), abs=1e-4)
