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

    with pytest.raises(SystemExit) as info:
        mf.main(["--sampling", "pool", "--data", "no-such-data-set"])
    assert info.value.code == 2
    assert capsys.readouterr().err == "pskv run mf: error: --sampling: mf draws no negative samples; drop the flag\n"
    with pytest.raises(SystemExit) as info:
        mf.main(["--sampling", "bogus"])
    assert info.value.code == 2
    assert capsys.readouterr().err == ("pskv run mf: error: argument --sampling: 'bogus' is not naive, preloc, pool "
                                       "or onlylocal; see `pskv run mf --help`\n")


# ---- prefetch (issue 31): the order of a worker's calls, in this process -------------------------------
class _Done:
    def __init__(self, result=None) -> None:
        self.result = result

    def wait(self, timeout=None):
        return self.result


class _Items:
    """A table of the `add` updater whose rows change at once (a node's own rows); logs each call."""

    def __init__(self, rows: int, dim: int) -> None:
        self.data = np.random.default_rng(5).normal(0, 0.1, (rows, dim)).astype(np.float32)
        self.calls: list[str] = []

    def pull(self, keys):
        self.calls.append("pull")
        return self.data[keys]

    def pull_async(self, keys):
        self.calls.append("pull_async")
        return _Done(self.data[keys])

    def push(self, keys, updates, copy=True):
        self.calls.append("push")
        np.add.at(self.data, keys, updates)
        return _Done()


def _part_and_run(*flags: str):
    """One worker's _train over 5 batches of zipf ratings (sgd updater) on an _Items table: (calls, U, rows, sse)."""
    from pskv.apps import common, mf
    from pskv.data import ratings

    args = mf._parser().parse_args(["--rank", "4", "--batch", "200", "--item-updater", "sgd", "--lambda", "0.05",
                                    *flags])
    r = ratings.zipf_ratings(50, 40, 1000, seed=3)
    part = mf.Part(mf.Problem("zipf", r, r.take(np.arange(0)), (-np.inf, np.inf)), 0, 1, args)
    part.clock = common.Clock(type("Worker", (), {"clock": lambda self: None})(), args)  # bsp/ssp: clock() is a no-op
    items = _Items(40, 5)
    progress = type("P", (), {"update": lambda self, n: None})()
    sse = mf._train(part, items, np.random.default_rng(1).permutation(1000), args, 0.0, 0.05, progress)
    return items.calls, part.U, items.data, sse


def test_mf_prefetch_pulls_the_next_batch_before_pushing_this_one_and_learns_the_same():
    """With prefetch a worker pulls batch i+1's rows before it pushes batch i (none past the last); with
    the add updater the rows it shares with batch i get batch i's change, so users, items and error
    are exactly those of the old order (pull, train, push)."""
    calls, U, rows, sse = _part_and_run()
    assert calls == ["pull", "pull_async", "push", "pull_async", "push", "pull_async", "push", "pull_async", "push",
                     "push"]
    old_calls, old_U, old_rows, old_sse = _part_and_run("--no-prefetch")
    assert old_calls == ["pull", "push"] * 5
    assert sse == old_sse and np.array_equal(U, old_U) and np.array_equal(rows, old_rows)


@pytest.mark.parametrize("flags", [("--consistency", "bsp"), ("--consistency", "ssp:1")])
def test_mf_prefetch_stays_within_a_clock_under_bsp_and_ssp(flags):
    """Under BSP/SSP a batch's rows are pulled after the clock of the batch before: the old order."""
    calls, *_ = _part_and_run(*flags)
    assert calls == ["pull", "push"] * 5


def test_mf_dsgd_prefetch_gives_the_rmse_of_the_old_order():
    """--schedule dsgd on 2 nodes (no item shared by two workers within a sub-epoch): with prefetch,
    whose rows get the worker's own last change, the RMSEs are those of --no-prefetch to 1e-9."""
    got = {}
    for flag in ("--prefetch", "--no-prefetch"):
        proc = _run("--nodes", "2", "--threads", "1", "--", "--max-ratings", "20000", "--epochs", "2", "--rank",
                    "8", "--schedule", "dsgd", "--progress", "json", flag)
        got[flag] = [json.loads(line.split("@@pskv ", 1)[1]) for line in proc.stdout.splitlines()
                     if '"kind": "epoch"' in line]
    assert len(got["--prefetch"]) == 2, got
    for new, old in zip(got["--prefetch"], got["--no-prefetch"]):
        assert new["train_rmse"] == pytest.approx(old["train_rmse"], rel=1e-9)
        assert new["test_rmse"] == pytest.approx(old["test_rmse"], rel=1e-9)
