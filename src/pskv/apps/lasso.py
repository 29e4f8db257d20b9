"""Lasso by parallel coordinate descent on a STRADS-style scheduler (pskv.schedule).

    pskv run lasso --nodes 2 -- --data all --alpha 0.05 --scheduler strads
    pskv run lasso --nodes 2 -- --data synthetic:400x2000:0.9 --scheduler all --plot schedulers.png
    pskv run lasso --nodes 2 -- --data rating.train.libsvm --alpha 0.001     # sparse, your own file

Minimizes scikit-learn's Lasso objective (1/(2n)) |y - X beta - b|^2 + alpha |beta|_1 with a
fitted intercept b (b = mean(y) - mean(X) beta, so the centered problem is solved), and prints
`objective ...` as its last line. Examples are sharded by rows over the workers (each keeps its
rows of X, its residuals r and the offset c that centers them: centered residual = r + c). Per
round the scheduler (node 0's extra thread) publishes up to --per-round coordinates S; every
worker computes its partial sums x_j . r for j in S and pushes them; once all are in (worker
clocks), every worker pulls the same totals and applies the same soft-thresholded updates
beta_j = S(x~_j . r~ / n + z_j beta_j, alpha) / z_j (z_j: the centered column's mean square),
so every worker holds the same beta; worker 0 reports |change| back to the scheduler's priority
model. --scheduler: strads (priority sampling + a correlation check: two coordinates whose
columns correlate by --rho or more never go in one round; computed from the sampled candidates'
sparse columns for sparse X, schedule.sparse_correlation_check), shotgun (random, no check), cyclic;
`all` runs the three one after the other (`pskv run` starts a cluster for each) and --plot
draws their objective against time.

--data: `all` (Bioconductor's ALL: 128 x 12,625 gene expressions, Debian's r-bioc-all; y planted
on --planted genes), `synthetic:NxP:RHO` (blocks of 10 features correlated RHO; y planted), both
dense, or a libsvm/svmlight or .pskvsp file, the target in the label column (pskv.data.sparse):
held sparse, each worker its rows by columns (CSC), the updates looping over nonzeros in numba
(apps/lasso_design.py); --dense holds a small file dense instead. The answer does not depend on
the node count: every worker applies the same updates from the same totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import schedule
from ..data import DataError
from ..data.trained import write_atomic
from ..errors import ConfigError
from . import common
from .lasso_design import load  # noqa: F401 - (X, y) of --data: the tests' and the benchmark's reader too
from .lasso_train import State, check_args, setup, train


def _parser() -> argparse.ArgumentParser:
    p = common.parser("lasso", "Lasso by parallel coordinate descent on a STRADS-style scheduler", epochs=20)
    g = p.add_argument_group("lasso")
    g.add_argument(
        "--data",
        default="all",
        help="all, synthetic:NxP:RHO, or a libsvm/svmlight or .pskvsp file "
        "(the target in the label column; held sparse)",
    )
    g.add_argument("--dense", action="store_true", help="hold a --data file dense (small files only)")
    g.add_argument("--alpha", type=float, default=0.05, help="L1 weight (scikit-learn's alpha)")
    g.add_argument("--scheduler", default="strads", help="strads, shotgun, cyclic, or all (one run each)")
    g.add_argument(
        "--per-round",
        type=int,
        default=0,
        help="coordinates updated in parallel per round (0: 16 for all "
        "/ synthetic, 256 for a file: sparse columns of distinct "
        "features are mostly uncorrelated)",
    )
    g.add_argument("--candidates", type=int, default=0, help="strads: candidates drawn per round (0: 4 x per-round)")
    g.add_argument(
        "--rho",
        type=float,
        default=0.5,
        help="strads: the largest |correlation| of two coordinates of one round (and each one's summed "
        "|correlation| with the others < 1)",
    )
    g.add_argument("--planted", type=int, default=20, help="all / synthetic: non-zero coefficients of the planted y")
    g.add_argument("--eval-every", type=int, default=1, help="rounds between objective evaluations")
    g.add_argument(
        "--tol",
        type=float,
        default=1e-4,
        help="stop once the duality gap is at most tol x |y - mean(y)|^2 (scikit-learn's tol; 0: run every round)",
    )
    g.add_argument(
        "--check-every", type=int, default=0, help="rounds between duality gap checks (0: p / per-round, an epoch)"
    )
    g.add_argument("--out", type=Path, metavar="MODEL.npz", help="write beta and the intercept (load_model reads it)")
    return p


def load_model(path) -> tuple[np.ndarray, float]:
    """(beta, intercept) that `--out` wrote; predict with X @ beta + intercept."""
    with np.load(path) as model:
        return model["beta"], float(model["intercept"])


def finish(st: State, wall: float) -> list[str]:
    st.sched.stop()  # (workers that converged ended before the last published round)
    st.sched.close(timeout=60)
    info = st.sched.stats()
    f = st.final
    rounds = f.get("rounds", st.rounds)
    stop = (
        f"converged after {rounds} rounds (duality gap {f['gap']:.2g} x |y - mean y|^2 <= --tol)"
        if f.get("converged")
        else f"{rounds} rounds, the last one (duality gap {f.get('gap', float('nan')):.2g} "
        "x |y - mean y|^2 at the last check)"
    )
    if st.s.args.out and "beta" in f:
        write_atomic(st.s.args.out, lambda out: np.savez(out, beta=f["beta"], intercept=np.float64(f["intercept"])))
    share = info["choose_seconds"] / max(wall, 1e-9)
    return [
        f"lasso: {st.s.args.scheduler}, {stop}; {wall:.2f} s ({1000 * wall / max(rounds, 1):.2f} ms per "
        f"round, {info['updates'] / max(info['rounds'], 1):.1f} coordinates per round); the scheduler chose for "
        f"{info['choose_seconds']:.2f} s ({share:.0%} of the run, pipelined), "
        f"{f.get('nonzeros', 0)} non-zero coefficients, intercept {f.get('intercept', float('nan')):.6g}",
        f"objective {f.get('objective', float('nan')):.10g}",
    ]


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check lasso's arguments (`pskv run lasso` calls it before any node starts, each node's
    main again): a wrong flag or a --data file that is not what it claims (its first lines) ends the
    run in one line with status 2 (common.arguments)."""
    return common.arguments("lasso", _parser(), argv, lambda args: check_args(args, orchestrating=True))


def main(argv: list[str] | None = None) -> int:
    """Run lasso on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    if args.scheduler == "all":
        raise ConfigError("--scheduler all runs one cluster per scheduler: start it with `pskv run lasso`")
    try:
        return common.run_app("lasso", args, metrics=1, setup=setup, train=train, finish=finish)
    except (DataError, ConfigError) as exc:  # (raised in setup, on every node alike: each reads the same file)
        print(f"pskv run lasso: error: {exc}", file=sys.stderr)
        return 2


def orchestrate(argv: list[str], nodes: int | None, threads: int | None, launch) -> int | None:
    """`pskv run lasso -- --scheduler all ...`: one cluster per scheduler, then their objectives in one
    plot (--plot). None: not that case (run as usual). (`pskv run` called check(argv) before.)"""
    args, _ = _parser().parse_known_args(argv)
    if args.scheduler != "all":
        return None
    rest = [
        a
        for i, a in enumerate(argv)
        if not (
            a == "--scheduler"
            or (i and argv[i - 1] == "--scheduler")
            or a == "--plot"
            or (i and argv[i - 1] == "--plot")
            or a.startswith("--scheduler=")
            or a.startswith("--plot=")
        )
    ]
    curves = {}
    with tempfile.TemporaryDirectory(prefix="pskv-lasso-") as tmp:
        for policy in schedule.POLICIES:
            log = Path(tmp) / f"{policy}.jsonl"
            status = launch(
                nodes or 1,
                [sys.executable, "-m", "pskv.apps.lasso", *rest, "--scheduler", policy, "--log", str(log)],
                threads=threads or 1,
            )
            if status != 0:
                return status
            curves[policy] = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    for policy, rows in curves.items():
        last = rows[-1] if rows else {}
        print(f"lasso {policy}: objective {last.get('objective', float('nan')):.10g} after {last.get('wall', 0):.2f} s")
    if args.plot:
        print(_plot(args.plot, curves))
    return 0


def _plot(path: Path, curves: dict) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"--plot {path}: matplotlib is not installed; pip install 'pskv[plot]'"
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, curve in curves.items():
        rows = [r for r in curve if np.isfinite(r.get("objective", np.nan))]
        ax.plot([r["wall"] for r in rows], [r["objective"] for r in rows], marker=".", label=policy)
    ax.set_xlabel("seconds")
    ax.set_ylabel("objective")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"wrote {path}"


if __name__ == "__main__":
    sys.exit(main())
