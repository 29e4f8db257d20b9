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
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import pskv

from .. import schedule
from ..data import DataError
from ..data.trained import write_atomic
from ..errors import ConfigError
from . import common, lasso_design
from .lasso_design import load  # (X, y) of --data: the tests' and the benchmark's reader too

_SUMS, _GAP = "lasso-sums", "lasso-gap"


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


@dataclasses.dataclass
class State:
    s: common.Session
    x: np.ndarray | lasso_design.Csr  # (n, p) every example: each worker takes its rows
    y: np.ndarray
    sched: schedule.Scheduler
    rounds: int
    final: dict = dataclasses.field(default_factory=dict)


def setup(s: common.Session) -> State:
    args, node = s.args, s.node
    _check(args)
    x, y = load(args.data, args.planted, args.seed, dense=args.dense)
    n, p = x.shape
    built_in = args.data == "all" or args.data.startswith("synthetic:")
    per_round = min(args.per_round or (16 if built_in else 256), p)
    rounds = args.epochs * -(-p // per_round)
    dependencies = None
    if args.scheduler == "strads" and node.rank == 0:  # the scheduler reads whole columns (node 0 holds X)
        if isinstance(x, np.ndarray):
            std = x - x.mean(axis=0)
            norms = np.linalg.norm(std, axis=0)
            std /= np.where(norms > 0, norms, 1.0)
            dependencies = schedule.correlation_check(lambda idx: std[:, idx], args.rho)
        else:  # from the candidates' nonzeros: no dense column, no Gram matrix
            cols = x.columns()
            dependencies = schedule.sparse_correlation_check(cols.ptr, cols.rows, cols.vals, n, args.rho)
    sched = schedule.Scheduler(
        node,
        "lasso",
        p,
        per_round,
        policy=args.scheduler,
        candidates=args.candidates or None,
        dependencies=dependencies,
        seed=args.seed,
    )
    schedule.RoundSums.declare(node, _SUMS, per_round + 1, extra=2 * p + 3)
    schedule.RoundSums.declare(node, _GAP, p + 3)
    if node.rank == 0:
        layout = "dense" if isinstance(x, np.ndarray) else f"sparse, {x.nnz:,} nonzeros"
        print(
            f"lasso: {n} x {p} ({layout}), alpha={args.alpha:g}, {args.scheduler}, {per_round} coordinates per "
            f"round, at most {rounds} rounds; {s.workers} worker(s)",
            flush=True,
        )
    state = State(s, x, y, sched, rounds)
    sched.start(rounds + 1)  # (the last round updates nothing: it measures the final objective)
    return state


class _Worker:
    """One worker's rows, residuals and copy of beta."""

    def __init__(self, w: pskv.Worker, st: State) -> None:
        s, args = st.s, st.s.args
        me, workers = s.index(w), s.workers
        n = len(st.y)
        lo, hi = me * n // workers, (me + 1) * n // workers
        self.w, self.x, self.y = w, lasso_design.block(st.x, lo, hi), st.y[lo:hi]
        self.n, self.p, self.alpha = n, st.x.shape[1], args.alpha
        self.width = st.sched.per_round + 1
        self.sums = schedule.RoundSums(w, _SUMS, self.width)
        self.beta = np.zeros(self.p)
        self.r = self.y.copy()  # y - X beta on these rows (beta = 0)
        # the column statistics every worker needs: sums over all rows, through the table once
        stats_at = np.arange(2 * self.width, 2 * self.width + 2 * self.p + 3)
        local = np.concatenate([*self.x.sums(), [self.y.sum(), len(self.y), self.y @ self.y]])
        self.sums.table.push(stats_at, local[:, None]).wait()
        st.sched.begin(w)
        w.wait_clock(1)
        total = self.sums.table.pull(stats_at)[:, 0]
        self.mean = total[: self.p] / n
        self.z = total[self.p : 2 * self.p] / n - self.mean**2  # centered columns' mean squares
        self.c = -total[2 * self.p] / n  # centered residual = r + c (c = mean(X) beta - mean(y))
        self.ybar = total[2 * self.p] / n
        self.yy = total[2 * self.p + 2] - n * self.ybar**2  # |y - mean(y)|^2
        self.gap_sums = schedule.RoundSums(w, _GAP, self.p + 3)
        self.gap_l1 = 0.0  # |beta|_1 when the last gap partials were taken

    def gap_partial(self) -> np.ndarray:
        """This worker's (X^T r~, r~ . r~, r~ . (y - mean y), sum r~) for the duality gap of beta now."""
        rc = self.r + self.c
        self.gap_l1 = float(np.abs(self.beta).sum())
        return np.concatenate([self.x.dots(np.arange(self.p), rc), [rc @ rc, rc @ (self.y - self.ybar), rc.sum()]])

    def gap(self, sums: np.ndarray) -> float:
        """scikit-learn's duality gap (enet_coordinate_descent's, on the sum scale: compare with tol x
        |y - mean y|^2) of beta when gap_partial was taken, from every worker's partials."""
        rr, ry, rsum = sums[self.p :]
        xta = sums[: self.p] - self.mean * rsum  # x~_j . r~
        n_alpha, dual_norm = self.alpha * self.n, float(np.abs(xta).max(initial=0.0))
        if dual_norm > n_alpha:
            const = n_alpha / dual_norm
            gap = 0.5 * rr * (1 + const**2)
        else:
            const, gap = 1.0, rr
        return gap + n_alpha * self.gap_l1 - const * ry

    def partial(self, chosen: np.ndarray, measure: bool) -> np.ndarray:
        """(x_j . r for j in chosen, then this worker's sum of centered squared residuals or 0)."""
        out = np.zeros(self.width)
        out[: len(chosen)] = self.x.dots(chosen, self.r)
        if measure:
            out[-1] = float(((self.r + self.c) ** 2).sum())
        return out

    def apply(self, chosen: np.ndarray, sums: np.ndarray) -> np.ndarray:
        """The coordinate updates of `chosen` from the totals; returns the changes."""
        xr = sums[: len(chosen)] + self.c * self.n * self.mean[chosen]  # x~_j . r~ summed over all rows
        z = self.z[chosen]
        rho = xr / self.n + z * self.beta[chosen]
        new = np.where(z > 0, np.sign(rho) * np.maximum(np.abs(rho) - self.alpha, 0.0) / np.where(z > 0, z, 1), 0.0)
        delta = new - self.beta[chosen]
        self.beta[chosen] = new
        self.x.axpy(chosen, delta, self.r)
        self.c += float(self.mean[chosen] @ delta)
        return delta

    def objective(self, rss: float) -> float:
        return rss / (2 * self.n) + self.alpha * float(np.abs(self.beta).sum())


def train(w: pskv.Worker, st: State) -> None:
    s, args, sched = st.s, st.s.args, st.sched
    me = _Worker(w, st)
    leader = common.is_leader(w)
    progress = common.Progress(
        w, total=st.rounds, scale=1, unit="rounds", mode=args.progress, watchdog=s.report.watchdog
    )
    per_epoch = -(-me.p // sched.per_round)
    check = args.check_every or per_epoch  # rounds between duality gap checks
    previous, objective, epoch_start, gap, last = None, float("nan"), time.monotonic(), float("nan"), st.rounds
    for t in range(st.rounds + 1):
        chosen = sched.take(w, t)  # round t - 1's sums are in everywhere, too
        if previous is not None:
            sums = me.sums.totals(t - 1)
            delta = me.apply(previous, sums)
            if leader:
                sched.report(w, t - 1, previous, delta)
            if (t - 1) % args.eval_every == 0 or t == st.rounds:
                objective = me.objective(sums[-1])
            if args.tol > 0 and (t - 1) % check == 0 and t > 1:  # the gap of beta after round t - 2: every
                gap = me.gap(me.gap_sums.totals((t - 1) // check))  # worker finds the same, all stop alike
                if gap <= args.tol * me.yy:
                    last = t
        measure = t % args.eval_every == 0 or t == last  # rss of beta after round t - 1
        if t == last:
            chosen = chosen[:0]  # (the last round updates nothing: it measures the final objective)
        me.sums.push(t, me.partial(chosen, measure)).wait()
        if args.tol > 0 and t % check == 0 and 0 < t < last:
            me.gap_sums.push(t // check, me.gap_partial()).wait()
        sched.end_round(w)
        previous = chosen
        if t:
            progress.update(1)
        if t and t % per_epoch == 0:
            now = time.monotonic()
            s.report.epoch(
                w,
                t // per_epoch,
                progress,
                objective=objective,
                nonzeros=int(np.count_nonzero(me.beta)),
                ms_per_round=1000 * (now - epoch_start) / per_epoch,
            )
            epoch_start = now
            if not np.isfinite(objective) or objective > 1e12:
                progress.write(f"lasso: the objective diverged ({objective:g}) after round {t}")
        if t == last:
            break
    w.wait_clock(last + 2)  # every worker's last push (the final rss) is in
    sums = me.sums.totals(last)  # the final objective: rss with every update applied
    if leader:
        st.final.update(
            objective=me.objective(sums[-1]),
            nonzeros=int(np.count_nonzero(me.beta)),
            intercept=float(st.y.mean() - me.mean @ me.beta),
            beta=me.beta.copy(),
            rounds=last,
            gap=gap / max(me.yy, 1e-300),
            converged=last < st.rounds,
        )
    progress.close()


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


def _check(args: argparse.Namespace, *, orchestrating: bool = False) -> None:
    """Raise ConfigError / DataError for a flag or a --data that cannot work; cheap (a file's first
    lines only), so `pskv run lasso` runs it before any node starts (orchestrate) and each node again."""
    if args.scheduler not in schedule.POLICIES and not (orchestrating and args.scheduler == "all"):
        raise ConfigError(f"--scheduler {args.scheduler!r}: use strads, shotgun, cyclic or all (under `pskv run`)")
    for flag, value, low in (
        ("--epochs", args.epochs, 1),
        ("--per-round", args.per_round, 0),
        ("--eval-every", args.eval_every, 1),
        ("--candidates", args.candidates, 0),
        ("--planted", args.planted, 0),
        ("--check-every", args.check_every, 0),
    ):
        if value < low:
            raise ConfigError(f"{flag} {value} must be >= {low}")
    if not args.alpha >= 0 or not args.tol >= 0 or not 0 < args.rho <= 1:
        raise ConfigError(f"--alpha {args.alpha:g} and --tol {args.tol:g} must be >= 0, --rho {args.rho:g} in (0, 1]")
    if args.data != "all" and not args.data.startswith("synthetic:"):
        lasso_design.check(args.data)


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check lasso's arguments (`pskv run lasso` calls it before any node starts, each node's
    main again): a wrong flag or a --data file that is not what it claims (its first lines) ends the
    run in one line with status 2 (common.arguments)."""
    return common.arguments("lasso", _parser(), argv, lambda args: _check(args, orchestrating=True))


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
