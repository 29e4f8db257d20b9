"""bench_lasso.py's sparse half: scikit-learn's Lasso against `pskv run lasso` on a sparse file, and
the coordinate-round kernels by columns (CSC) against by rows (CSR). Run through bench_lasso.py:

    python benchmarks/bench_lasso.py --data wordnet-glosses --alpha 1e-5 --nodes 2
    python benchmarks/bench_lasso.py --kernels

Each pskv run: `pskv run lasso --nodes N -- --data FILE --alpha A --scheduler S --per-round P
--epochs E` (stops at scikit-learn's tol, 1e-4 of |y - mean y|^2 on the duality gap, or after E
epochs of p / P rounds), its wall time from start to exit. `stalled`: not within 1e-3 of
scikit-learn's objective when it stopped; `diverged`: inf/nan or above 1e6 x scikit-learn's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _file(data: str) -> Path:
    if data == "wordnet-glosses":
        from pskv.data.glosses import prepare

        return prepare() / "glosses.libsvm"
    if data.startswith("sparse-synthetic:"):  # NxP:RHO: blocks of 10 features correlated RHO, |x| < 1.64 set to 0
        return _synthetic(data)
    return Path(data)


def _synthetic(data: str) -> Path:
    """A libsvm file (in the temp dir, reused) of data.genes.correlated with about 90% of each
    column set to 0 (|x| < 1.64), y planted on 20 features; values written exactly (repr)."""
    import tempfile

    from pskv.data import genes

    shape, rho = data.split(":")[1:]
    n, p = (int(v) for v in shape.split("x"))
    path = Path(tempfile.gettempdir()) / f"pskv-bench-{data.replace(':', '-')}.libsvm"
    if not path.is_file():
        x = genes.correlated(n, p, float(rho), 10, 0)
        x[np.abs(x) < 1.64] = 0.0
        y = genes.planted(x, 20, 0)[0]
        with open(path, "w") as f:
            for i in range(n):
                nz = np.flatnonzero(x[i])
                f.write(repr(float(y[i])) + "".join(f" {j + 1}:{float(x[i, j])!r}" for j in nz) + "\n")
    return path


def _sklearn(path: Path, alpha: float) -> dict:
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file
    from sklearn.linear_model import Lasso

    begun = time.perf_counter()
    x, y = load_svmlight_file(str(path))
    x = sp.csr_matrix((x.data, x.indices.astype(np.int32), x.indptr.astype(np.int32)), x.shape)  # (Lasso wants int32)
    loaded = time.perf_counter()
    model = Lasso(alpha=alpha).fit(x, y)
    fitted = time.perf_counter()
    r = y - x @ model.coef_ - model.intercept_
    return {"load": loaded - begun, "fit": fitted - loaded, "shape": x.shape, "nnz": x.nnz,
            "objective": float(r @ r / (2 * len(y)) + alpha * np.abs(model.coef_).sum()),
            "nonzeros": int(np.count_nonzero(model.coef_)), "epochs": int(model.n_iter_)}


def _pskv(path: Path, args, policy: str, per_round: int) -> dict:
    command = [sys.executable, "-m", "pskv", "run", "lasso", "--nodes", str(args.nodes), "--", "--data", str(path),
               "--alpha", str(args.alpha), "--scheduler", policy, "--per-round", str(per_round),
               "--epochs", str(args.epochs), "--progress", "none"]
    begun = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - begun
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    got = re.search(r"objective (\S+)\s*$", proc.stdout.strip())
    summary = [line.split("] ", 1)[-1] for line in proc.stdout.splitlines() if "coordinates per round" in line]
    return {"wall": wall, "objective": float(got.group(1)) if got else float("nan"),
            "summary": summary[-1] if summary else ""}


def main(args, argv) -> None:
    if args.kernels:
        return kernels()
    path = _file(args.data)
    ref = _sklearn(path, args.alpha)
    base = ref["load"] + ref["fit"]
    print(f"lasso on {path.name}: {ref['shape'][0]:,} x {ref['shape'][1]:,}, {ref['nnz']:,} nonzeros, alpha "
          f"{args.alpha:g}; pskv on {args.nodes} nodes x 1 thread, at most {args.epochs} epochs", flush=True)
    print(f"sklearn Lasso (tol 1e-4): load {ref['load']:.2f} s + fit {ref['fit']:.2f} s = {base:.2f} s, objective "
          f"{ref['objective']:.10g}, {ref['nonzeros']} non-zeros, {ref['epochs']} epochs", flush=True)
    print(f"\n{'run':<12} {'objective':>16} {'gap':>9} {'whole run':>10} {'x sklearn':>9}  verdict; pskv's summary")
    for run in (args.runs or "strads:256,shotgun:32,shotgun:256,cyclic:256").split(","):
        policy, per_round = run.split(":")
        tries = [_pskv(path, args, policy, int(per_round)) for _ in range(args.repeat)]
        got = min(tries, key=lambda r: r["wall"])
        gap = (got["objective"] - ref["objective"]) / ref["objective"]
        diverged = not np.isfinite(got["objective"]) or got["objective"] > 1e6 * ref["objective"]
        verdict = "DIVERGED" if diverged else "stalled" if gap > 1e-3 else "ok"
        print(f"{run:<12} {got['objective']:>16.10g} {gap:>9.1e} {got['wall']:>9.2f}s {got['wall'] / base:>8.2f}x  "
              f"{verdict}; {got['summary']}", flush=True)


def kernels(n: int = 100_000, p: int = 50_000, nnz_per_row: int = 12, per_round: int = 256, rounds: int = 200) -> None:
    """One coordinate round, x_j . r for P columns then r -= X[:, S] delta, on a random sparse matrix
    with Zipf-like column sizes (as text): by columns (pskv's CSC kernels) against by rows (CSR: every
    nonzero of the block is scanned to find the round's columns)."""
    import numba

    from pskv.apps.lasso_design import Csr

    rng = np.random.default_rng(0)
    cols = np.minimum((rng.pareto(1.0, n * nnz_per_row) * 5).astype(np.int64), p - 1).astype(np.int32)
    indptr = np.arange(0, n * nnz_per_row + 1, nnz_per_row, dtype=np.int64)
    csr = Csr(indptr, cols, rng.random(n * nnz_per_row), (n, p), np.arange(p))
    csc = csr.columns()

    @numba.njit(cache=True)
    def csr_round(indptr, cols, vals, chosen, r, delta):
        slot = np.full(p, -1, np.int64)
        for k in range(len(chosen)):
            slot[chosen[k]] = k
        out = np.zeros(len(chosen))
        for i in range(len(indptr) - 1):
            for e in range(indptr[i], indptr[i + 1]):
                k = slot[cols[e]]
                if k >= 0:
                    out[k] += vals[e] * r[i]
        for i in range(len(indptr) - 1):
            for e in range(indptr[i], indptr[i + 1]):
                k = slot[cols[e]]
                if k >= 0:
                    r[i] -= vals[e] * delta[k]
        return out

    sets = [np.sort(rng.choice(p, per_round, replace=False)) for _ in range(rounds)]
    delta = np.full(per_round, 1e-9)
    timings = {}
    for name in ("csc", "csr"):
        r = np.ones(n)
        for step in range(2):  # (the first pass compiles)
            begun = time.perf_counter()
            for chosen in sets:
                if name == "csc":
                    csc.dots(chosen, r)
                    csc.axpy(chosen, delta, r)
                else:
                    csr_round(csr.indptr, csr.cols, csr.vals, chosen, r, delta)
            timings[name] = (time.perf_counter() - begun) / rounds
    print(f"coordinate round, {per_round} random columns of {n:,} x {p:,} ({n * nnz_per_row:,} nonzeros): by columns "
          f"(CSC) {1e3 * timings['csc']:.3f} ms, by rows (CSR) {1e3 * timings['csr']:.3f} ms: CSC "
          f"{timings['csr'] / timings['csc']:.0f}x faster")
