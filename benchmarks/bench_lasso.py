"""Lasso: pskv's lasso app on its STRADS-style scheduler (strads, shotgun, cyclic; several
coordinates per round) against scikit-learn's Lasso (coordinate descent, cyclic and random) at
the same alpha, on the same data, in one run.

    python benchmarks/bench_lasso.py [--data all] [--alpha 0.05] [--nodes 2] [--epochs 60] [--plot lasso.png]
    python benchmarks/bench_lasso.py --data wordnet-glosses --alpha 1e-5 [--runs strads:256,...]   # sparse
    python benchmarks/bench_lasso.py --kernels                     # CSC against CSR for coordinate rounds

Sparse data (a libsvm file, or `wordnet-glosses`: `pskv data fetch wordnet-glosses`, 117,659 x
55,593 tf-idf rows; see bench_lasso_sparse.py): scikit-learn's load_svmlight_file + Lasso at its
defaults (tol 1e-4), wall time of each and the objective, then each pskv run as a user starts it,
`pskv run lasso --nodes N -- --data FILE ...`, timed from its start to its exit (starting the
nodes and reading the file included), with its objective's relative gap to scikit-learn's.

Data: `all` (Bioconductor's ALL, 128 patients x 12,625 genes from Debian's r-bioc-all; y planted on
20 genes) or `synthetic:NxP:RHO` (blocks of 10 features correlated RHO). Each pskv run is
`pskv run lasso --nodes N -- --log FILE ...`; its log gives the objective per epoch (p / P
rounds) and the wall time since the app started. Printed per run: the final objective, its
relative gap to scikit-learn's (the best of cyclic and random, tol 1e-12), the first epoch and
time at which the gap fell below 1e-3, and whether it diverged (inf/nan or above 1e6).
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


def _sklearn(x, y, alpha: float, selection: str) -> dict:
    from sklearn.linear_model import Lasso

    start = time.perf_counter()
    model = Lasso(alpha=alpha, selection=selection, tol=1e-12, max_iter=200_000, random_state=0).fit(x, y)
    wall = time.perf_counter() - start
    r = y - x @ model.coef_ - model.intercept_
    return {"objective": float(r @ r / (2 * len(y)) + alpha * np.abs(model.coef_).sum()), "wall": wall,
            "nonzeros": int(np.count_nonzero(model.coef_)), "epochs": int(model.n_iter_)}


def _pskv(args, policy: str, per_round: int, log: Path) -> list[dict]:
    command = [sys.executable, "-m", "pskv", "run", "lasso", "--nodes", str(args.nodes), "--", "--data", args.data,
               "--alpha", str(args.alpha), "--scheduler", policy, "--per-round", str(per_round),
               "--epochs", str(args.epochs), "--progress", "none", "--log", str(log)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    tail = [line for line in proc.stdout.splitlines() if "coordinates per round" in line]
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return rows, (tail[-1].split("] ", 1)[-1] if tail else "")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="all")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--runs", help="POLICY:PER_ROUND,... (dense: strads:16,shotgun:16,strads:32,shotgun:32,shotgun:64,"
                                  "cyclic:16; sparse: strads:256,shotgun:32,shotgun:256,cyclic:256)")
    p.add_argument("--plot", type=Path)
    p.add_argument("--kernels", action="store_true", help="CSC against CSR for coordinate rounds, then exit")
    p.add_argument("--repeat", type=int, default=1, help="sparse: runs of each (the best wall time is printed)")
    args = p.parse_args(argv)
    if args.kernels or not (args.data == "all" or args.data.startswith("synthetic:")):
        import bench_lasso_sparse

        return bench_lasso_sparse.main(args, argv)

    from pskv.apps.lasso import load

    x, y = load(args.data, 20, 0)
    print(f"lasso on {args.data}: {x.shape[0]} x {x.shape[1]}, alpha {args.alpha:g}; pskv on {args.nodes} nodes x 1 "
          f"thread, {args.epochs} epochs (an epoch: p / P rounds)", flush=True)
    ref = {sel: _sklearn(x, y, args.alpha, sel) for sel in ("cyclic", "random")}
    best = min(r["objective"] for r in ref.values())
    for sel, r in ref.items():
        print(f"sklearn Lasso {sel:<7} {r['wall']:7.2f} s  objective {r['objective']:.10g}  {r['nonzeros']} non-zeros, "
              f"{r['epochs']} epochs", flush=True)
    curves = {}
    print(f"\n{'run':<12} {'final objective':>16} {'gap':>10} {'<1e-3 at epoch':>15} {'s':>7}  scheduler")
    with tempfile.TemporaryDirectory() as tmp:
        for run in (args.runs or "strads:16,shotgun:16,strads:32,shotgun:32,shotgun:64,cyclic:16").split(","):
            policy, per_round = run.split(":")
            rows, tail = _pskv(args, policy, int(per_round), Path(tmp) / f"{policy}{per_round}.jsonl")
            curves[run] = rows
            final = rows[-1]["objective"] if rows else float("nan")
            diverged = not np.isfinite(final) or final > 1e6
            hit = next((r for r in rows if np.isfinite(r["objective"]) and (r["objective"] - best) / best < 1e-3), None)
            gap = (final - best) / best if not diverged else float("inf")
            print(f"{run:<12} {final:>16.10g} {gap:>10.2e} {hit['epoch'] if hit else '-':>15} "
                  f"{hit['wall'] if hit else float('nan'):>7.1f}  {'DIVERGED ' if diverged else ''}{tail}", flush=True)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for run, rows in curves.items():
            rows = [r for r in rows if np.isfinite(r["objective"]) and r["objective"] < 1e6]
            ax.plot([r["wall"] for r in rows], [(r["objective"] - best) / best for r in rows], marker=".", label=run)
        ax.set_yscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("relative gap to sklearn's objective")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
