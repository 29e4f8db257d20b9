"""Model-parallel MF (`pskv run mf -- --schedule ccd`, pskv.apps.mf_ccd) on real clusters: CCD++ rounds on
the scheduler give exactly what a plain one-process CCD++ gives, whatever the node, thread and block counts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SLICE = ["--data", "ml-100k", "--max-ratings", "20000", "--rank", "4", "--epochs", "3", "--progress", "none"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _problem():
    from pskv.apps import mf

    args = argparse.Namespace(data="ml-100k", max_ratings=20000, seed=0, test_fraction=0.1, rank=4)
    return mf.load(args)


def _reference(problem, rank: int, epochs: int, lam: float = 0.15, lam_b: float = 0.02, std: float = 0.1):
    """CCD++ in one process, written plainly: per epoch the user biases, the item biases, then each
    column (add it back, users' closed form, items' closed form, take it out). [(train, test RMSE)]."""
    train, test = problem.train, problem.test
    u, i, mu = train.users, train.items, train.values.mean()
    n_u, n_i = train.n_users, train.n_items
    cu, ci = np.bincount(u, minlength=n_u), np.bincount(i, minlength=n_i)
    U, bu, bi = np.zeros((n_u, rank)), np.zeros(n_u), np.zeros(n_i)
    V = np.random.default_rng([0, 13]).normal(0, std, (n_i, rank + 2))[:, :rank].copy()
    res = train.values.astype(np.float64) - mu

    def solve(idx, weights, sq, counts, lam_c, n):
        den = lam_c * counts + np.bincount(idx, weights=sq, minlength=n)
        return np.divide(np.bincount(idx, weights=weights, minlength=n), den, out=np.zeros(n), where=counts > 0)

    rows = []
    for _ in range(epochs):
        res += bu[u]
        bu = solve(u, res, np.ones(len(u)), cu, lam_b, n_u)
        res -= bu[u]
        res += bi[i]
        bi = solve(i, res, np.ones(len(i)), ci, lam_b, n_i)
        res -= bi[i]
        for c in range(rank):
            res += U[u, c] * V[i, c]
            U[:, c] = solve(u, res * V[i, c], V[i, c] ** 2, cu, lam, n_u)
            V[:, c] = solve(i, res * U[u, c], U[u, c] ** 2, ci, lam, n_i)
            res -= U[u, c] * V[i, c]
        tu, ti = test.users, test.items
        pred = np.clip(mu + bu[tu] + bi[ti] + (U[tu] * V[ti]).sum(1), 1, 5)
        rows.append((np.sqrt(np.mean(res ** 2)), np.sqrt(np.mean((pred - test.values) ** 2))))
    return rows


@pytest.mark.parametrize("cluster, blocks", [(["--nodes", "2", "--threads", "2"], ["--ccd-blocks", "7", "--ccd-per-round", "3"]),
                                             (["--nodes", "1"], ["--ccd-blocks", "16", "--ccd-per-round", "16"])])
def test_ccd_rounds_give_exactly_what_one_process_gives(tmp_path, cluster, blocks):
    """Per epoch, train and test RMSE equal a plain CCD++'s to 1e-9: the partial sums of every worker,
    totalled per round through the table, make the same closed-form updates. 7 blocks, 3 per round: 9
    blocks of which the last are short or empty, 3 rounds per column, 4 workers on 2 nodes."""
    log = tmp_path / "log.jsonl"
    proc = _run(*cluster, "--", *SLICE, "--schedule", "ccd", *blocks, "--log", str(log))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    expected = _reference(_problem(), rank=4, epochs=3)
    np.testing.assert_allclose([[r["train_rmse"], r["test_rmse"]] for r in rows], expected, rtol=0, atol=1e-9)
    assert "mf ccd: cyclic" in proc.stdout and "the scheduler chose for" in proc.stdout


def test_ccd_out_writes_factors_that_reproduce_the_rmse(tmp_path):
    """--out under ccd writes the files of the other schedules; their predictions give the printed RMSE."""
    out = tmp_path / "factors"
    proc = _run("--nodes", "2", "--", *SLICE, "--schedule", "ccd", "--out", str(out))
    printed = float(proc.stdout.strip().splitlines()[-1].split()[-1])
    test = _problem().test
    U, V = np.load(out / "user_factors.npy"), np.load(out / "item_factors.npy")
    bu, bi = np.load(out / "user_bias.npy"), np.load(out / "item_bias.npy")
    mu = json.loads((out / "meta.json").read_text())["global_mean"]
    pred = np.clip(mu + bu[test.users] + bi[test.items] + (U[test.users] * V[test.items]).sum(1), 1, 5)
    assert U.shape == (943, 4) and V.shape[1] == 4
    assert abs(np.sqrt(np.mean((pred - test.values) ** 2)) - printed) < 1e-3


@pytest.mark.parametrize("policy", ["strads"])
def test_ccd_other_policies_learn(policy):
    """strads draws the blocks (some skip a column; shotgun's draws take the same path): still well below
    the mean baseline."""
    proc = _run("--nodes", "2", "--", *SLICE, "--schedule", "ccd", "--ccd-policy", policy)
    lines = proc.stdout.strip().splitlines()
    rmse = float(lines[-1].split()[-1])
    baseline = float(next(line for line in lines if "predict the mean" in line).split()[-1])
    assert rmse < baseline - 0.1, (rmse, baseline)
    assert f"mf ccd: {policy}" in proc.stdout


@pytest.mark.parametrize("flags, says", [(["--localize"], "drop --consistency, --localize"),
                                         (["--ccd-policy", "bogus"], "--ccd-policy 'bogus'")])
def test_ccd_refuses_what_it_cannot_do(flags, says):
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", "--", *SLICE, "--schedule", "ccd", *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and says in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
