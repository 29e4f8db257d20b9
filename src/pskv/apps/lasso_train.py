"""Lasso's run on a cluster (apps/lasso.py: the app, its flags and output): the tables and the scheduler
(`setup`), each worker's rows, residuals and copy of beta (`Rows`), the rounds (`train`), and the checks
of the flags and --data that every node makes (`check_args`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

import pskv

from .. import schedule
from ..errors import ConfigError
from . import common, lasso_design
from .lasso_design import load

SUMS, GAP = "lasso-sums", "lasso-gap"  # the round sums' table and the duality gap's


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
    check_args(args)
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
    schedule.RoundSums.declare(node, SUMS, per_round + 1, extra=2 * p + 3)
    schedule.RoundSums.declare(node, GAP, p + 3)
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


class Rows:
    """One worker's rows, residuals and copy of beta."""

    def __init__(self, w: pskv.Worker, st: State) -> None:
        s, args = st.s, st.s.args
        me, workers = s.index(w), s.workers
        n = len(st.y)
        lo, hi = me * n // workers, (me + 1) * n // workers
        self.w, self.x, self.y = w, lasso_design.block(st.x, lo, hi), st.y[lo:hi]
        self.n, self.p, self.alpha = n, st.x.shape[1], args.alpha
        self.width = st.sched.per_round + 1
        self.sums = schedule.RoundSums(w, SUMS, self.width)
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
        self.gap_sums = schedule.RoundSums(w, GAP, self.p + 3)
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
    me = Rows(w, st)
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
        _record(st, me, sums[-1], last, gap)
    progress.close()


def _record(st: State, me: Rows, rss: float, last: int, gap: float) -> None:
    """The leader's result of the run, for finish(): the final objective (rss with every update applied)."""
    st.final.update(
        objective=me.objective(rss),
        nonzeros=int(np.count_nonzero(me.beta)),
        intercept=float(st.y.mean() - me.mean @ me.beta),
        beta=me.beta.copy(),
        rounds=last,
        gap=gap / max(me.yy, 1e-300),
        converged=last < st.rounds,
    )


def check_args(args: argparse.Namespace, *, orchestrating: bool = False) -> None:
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
