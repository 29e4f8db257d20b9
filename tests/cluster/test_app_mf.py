"""The MF app (pskv.apps.mf) on real clusters: a slice of MovieLens-100K and generated zipf data."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _rmse(stdout: str) -> tuple[float, float]:
    """(final test RMSE, predict-the-mean baseline) from the summary of node 0."""
    lines = [line.removeprefix("[node 0] ") for line in stdout.strip().splitlines()]
    final = re.fullmatch(r"test RMSE (\d+\.\d+)", lines[-1])
    assert final, lines[-5:]
    baseline = re.search(r"predict the mean rating\): test RMSE (\d+\.\d+)", stdout)
    return float(final.group(1)), float(baseline.group(1))


def test_mf_ml100k_slice_two_nodes_beats_the_mean():
    """5 epochs on 30,000 MovieLens-100K ratings, 2 nodes x 2 threads, end well below the mean baseline."""
    proc = _run("--nodes", "2", "--threads", "2", "--", "--data", "ml-100k", "--max-ratings", "30000",
                "--epochs", "5", "--progress", "none")
    assert len(re.findall(r"epoch +\d+ +train_rmse", proc.stdout)) == 5
    rmse, baseline = _rmse(proc.stdout)
    assert rmse < baseline - 0.1, (rmse, baseline)


@pytest.mark.parametrize("model", ["bsp", "ssp:2"])
def test_mf_under_bsp_and_ssp_learns_and_clocks(model):
    """The same slice under BSP / SSP(2) (a clock per batch, row cache, push buffer) also ends well
    below the mean baseline, with every epoch reported."""
    proc = _run("--nodes", "2", "--threads", "2", "--", "--data", "ml-100k", "--max-ratings", "30000",
                "--epochs", "4", "--consistency", model, "--progress", "none")
    assert len(re.findall(r"epoch +\d+ +train_rmse", proc.stdout)) == 4
    rmse, baseline = _rmse(proc.stdout)
    assert rmse < baseline - 0.1, (rmse, baseline)


def test_mf_zipf_two_nodes_learns():
    """Generated zipf-skewed ratings on 2 nodes x 2 threads: test RMSE falls clearly below the baseline."""
    proc = _run("--nodes", "2", "--threads", "2", "--", "--data", "zipf:2000x1000x100000", "--rank", "10",
                "--epochs", "8", "--progress", "none")
    rmse, baseline = _rmse(proc.stdout)
    assert rmse < 0.92 * baseline, (rmse, baseline)


def test_mf_one_node_writes_factors_that_reproduce_the_rmse(tmp_path):
    """--out writes factors and biases whose predictions give the test RMSE the app printed."""
    from pskv.data import fetch, ratings

    out = tmp_path / "factors"
    proc = _run("--", "--max-ratings", "20000", "--epochs", "3", "--rank", "8", "--out", str(out),
                "--progress", "none", "--log", str(tmp_path / "log.jsonl"))
    rmse, _ = _rmse(proc.stdout)
    r = ratings.load_inter(fetch("ml-100k", quiet=True) / "ml-100k.inter")
    keep = np.sort(np.random.default_rng([0, 1]).permutation(len(r))[:20000])  # as mf's --max-ratings
    _, test = ratings.split(r.take(keep), test_fraction=0.1, seed=0)
    U, V = np.load(out / "user_factors.npy"), np.load(out / "item_factors.npy")
    bu, bi = np.load(out / "user_bias.npy"), np.load(out / "item_bias.npy")
    mu = json.loads((out / "meta.json").read_text())["global_mean"]
    pred = np.clip(mu + bu[test.users] + bi[test.items] + (U[test.users] * V[test.items]).sum(1), 1, 5)
    assert abs(np.sqrt(np.mean((pred - test.values) ** 2)) - rmse) < 1e-3
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 3


def test_mf_refuses_sampling_and_unknown_technique_names_before_any_node(capsys):
    """mf draws no negatives: a sampling scheme is refused (status 2) before any data or node, and an
    unknown scheme is a usage error listing the valid ones."""
    from pskv.apps import mf

    assert mf.main(["--sampling", "pool", "--data", "no-such-data-set"]) == 2
    assert capsys.readouterr().err == "pskv run mf: error: --sampling: mf draws no negative samples; drop the flag\n"
    with pytest.raises(SystemExit) as info:
        mf.main(["--sampling", "bogus"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("pskv run mf: error: argument --sampling: 'bogus' is not "
                                                        "naive, preloc, pool or onlylocal")
