"""MF app benchmark: seconds per epoch and final test RMSE, with and without pskv.

    .venv/bin/python benchmarks/bench_app_mf.py               # full (~2 min on 2 cores)
    .venv/bin/python benchmarks/bench_app_mf.py --quick       # MovieLens-100K and Lapse's toy data only
    .venv/bin/python benchmarks/bench_app_mf.py --markdown    # also print the rows as a Markdown table

Variants, each the same model and hyperparameters (the app's defaults: rank 100, lambda 0.08, step 0.01,
biases, 30 epochs on MovieLens-100K, fixed 90/10 split):
  baseline          one process, no server: numpy arrays and the app's numba kernel, sequential SGD
  classic NxT       `pskv run mf --nodes N --threads T` (static placement, Hogwild-like free schedule)
  dsgd 2x2          Lapse's DSGD schedule (item blocks rotate over the workers), static placement
  dsgd+localize 2x2 + Lapse's relocation of each block to the worker's node before it is used
  free+localize 2x2 + relocation of each next batch's items (no DSGD: items ping-pong between nodes)
  replicate 2x2     NuPS's hot-item replication (`--replicate N`)
On generated zipf data (NuPS's MF workload) classic and dsgd+localize, and on Lapse's toy data
Lapse's README setting (DSGD, rank 2 with its W.mma/H.mma, 10 epochs, 2 nodes).

`run(args) -> list[dict]` is what benchmarks/bench_apps.py calls; each row has app, variant, data,
nodes, threads, epochs, sec_per_epoch (median epoch seconds incl. the RMSE evaluation, the first
epoch excluded: it loads the numba cache), train_seconds, wall_seconds (process start to exit),
test_rmse and note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

APP = "mf"
ZIPF = "zipf:20000x10000x2000000"  # 100 ratings per user
ZIPF_FLAGS = ["--rank", "16", "--epochs", "5"]
LAPSE = ["--data", "lapse-toy", "--rank", "2", "--epochs", "10", "--schedule", "dsgd", "--item-updater", "adagrad",
         "--init-step-size", "0.05", "--lambda", "0.05"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="MovieLens-100K (fewer variants) and Lapse's toy data")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    return p


def baseline(flags: list[str]) -> dict:
    """The app's model, flags and kernel on plain numpy arrays in this process: no server, 1 thread."""
    from pskv.apps import mf

    args = mf._parser().parse_args(flags)
    args.item_updater = "sgd"  # the baseline's kernel is sequential SGD on the whole item matrix
    problem = mf.load(args)
    train, test = problem.train, problem.test
    rng = np.random.default_rng(args.seed)
    U = rng.normal(0, args.init_std, (train.n_users, args.rank)).astype(np.float32)
    V = np.zeros((train.n_items, args.rank + args.biases), np.float32)
    V[:, :args.rank] = rng.normal(0, args.init_std, (train.n_items, args.rank))
    bu = np.zeros(train.n_users, np.float32)
    mu = float(train.values.mean())
    seconds, start = [], time.monotonic()
    for epoch in range(args.epochs):
        t0 = time.monotonic()
        order = rng.permutation(len(train))
        mf.sgd_batch(U, bu, train.users[order], train.items[order], train.values[order], V, mu,
                     mf.step_size(args, epoch), args.lam, args.lambda_bias, args.biases)
        sse = mf.squared_error(U, bu, test.users, test.items, test.values, V, mu, args.biases, *problem.clip)
        seconds.append(time.monotonic() - t0)
    return _row("baseline (numpy+numba, no server)", args.data, 1, 1, args.epochs, seconds,
                time.monotonic() - start, float(np.sqrt(sse / len(test))), f"item {args.item_updater}")


def _run(command: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    """Run a `pskv run` command; after `timeout` s SIGTERM it (the launcher stops its nodes, which a
    SIGKILL would orphan) and return what it printed, with a last line saying so."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        stderr += f"\nstopped after {timeout:.0f} s (not finished)"
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def pskv_run(variant: str, flags: list[str], nodes: int, threads: int, note: str = "") -> dict:
    """`pskv run mf` with `flags` on `nodes` x `threads`; the row from its --log and summary."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        command = [sys.executable, "-m", "pskv", "run", APP, "--nodes", str(nodes), "--threads", str(threads),
                   "--", *flags, "--progress", "none", "--log", str(log)]
        start = time.monotonic()
        proc = _run(command, timeout=900)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            return {"app": APP, "variant": variant, "nodes": nodes, "threads": threads,
                    "note": f"failed: {(proc.stdout + proc.stderr).strip().splitlines()[-1:]}"}
        rows = [json.loads(line) for line in log.read_text().splitlines()]
    train = float(next(line.split(" epochs in ")[1].split(" s")[0] for line in proc.stdout.splitlines()
                       if " epochs in " in line))
    data = flags[flags.index("--data") + 1] if "--data" in flags else "ml-100k"
    return _row(variant, data, nodes, threads, len(rows), [r["seconds"] for r in rows], train,
                rows[-1]["test_rmse"], note, wall)


def _row(variant, data, nodes, threads, epochs, seconds, train, rmse, note, wall=None) -> dict:
    steady = seconds[1:] or seconds
    return {"app": APP, "variant": variant, "data": data, "nodes": nodes, "threads": threads, "epochs": epochs,
            "sec_per_epoch": round(statistics.median(steady), 4), "train_seconds": round(train, 2),
            "wall_seconds": None if wall is None else round(wall, 2), "test_rmse": round(rmse, 4), "note": note}


def run(args: argparse.Namespace) -> list[dict]:
    """Every variant (quick: fewer); returns the rows."""
    quick = getattr(args, "quick", False)
    rows = [baseline([])]
    for nodes, threads in ((1, 1), (2, 2)) if quick else ((1, 1), (1, 2), (2, 1), (2, 2)):
        rows.append(pskv_run(f"classic {nodes}x{threads}", [], nodes, threads))
    rows.append(pskv_run("dsgd 2x2", ["--schedule", "dsgd"], 2, 2))
    rows.append(pskv_run("dsgd+localize 2x2", ["--schedule", "dsgd", "--localize"], 2, 2))
    if not quick:
        rows.append(pskv_run("free+localize 2x2", ["--localize", "--epochs", "5"], 2, 2,
                             "5 epochs: relocating every batch's items ping-pongs them between the nodes"))
    rows.append(pskv_run("replicate 2x2", ["--replicate", "100"], 2, 2))
    if not quick:
        rows.append(baseline(["--data", ZIPF, "--item-updater", "sgd", *ZIPF_FLAGS]))
        rows.append(pskv_run("classic 2x2", ["--data", ZIPF, *ZIPF_FLAGS], 2, 2, "item adagrad (auto)"))
        rows.append(pskv_run("dsgd+localize 2x2", ["--data", ZIPF, "--schedule", "dsgd", "--localize", *ZIPF_FLAGS],
                             2, 2, "item adagrad (auto)"))
    for variant, extra in (("Lapse README: dsgd", []), ("Lapse README: dsgd+localize", ["--localize"])):
        rows.append(pskv_run(variant, LAPSE + extra, 2, 1, "Lapse: 0.38 s for 10 epochs (DSGD, 2 nodes)"))
    return rows


def markdown(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join("" if row.get(k) is None else str(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rows = run(args)
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.markdown:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
