"""Model-parallel MF: CCD++ on the STRADS-style scheduler (`pskv run mf -- --schedule ccd`).

    pskv run mf --nodes 2 -- --schedule ccd --rank 10 --epochs 10
    pskv run mf --nodes 2 -- --schedule ccd --ccd-policy strads --ccd-blocks 32 --ccd-per-round 8

CCD++ (Yu et al., ICDM 2012) updates one latent column at a time. For column c, with the residual
R~ = R - mu - sum over the other columns of u_c' v_c', every user's u_ic and every item's v_jc has a
closed form (weighted lambda as in ALS-WR: n_i and n_j count the ratings):

    u_ic = sum_j R~_ij v_jc / (lambda n_i + sum_j v_jc^2)      v_jc = sum_i R~_ij u_ic / (lambda n_j + sum_i u_ic^2)

Given u_c, the items' v_jc do not depend on each other: any set of them can be updated in parallel
without interference, so the scheduler needs no dependency check here (Lasso's coordinates need one).

Layout: the ratings are split by user over the W workers as in data-parallel mf (user u goes to
worker u mod W), so a worker computes its users' u_c from its own ratings alone. The items are cut
into --ccd-blocks contiguous blocks, the scheduler's coordinates; per round it publishes
--ccd-per-round blocks (cyclic: the blocks rotate in order, each once per column; strads: drawn by
the size of their last change; shotgun: at random). Every worker pushes its partial sums of those
items over its ratings (sum R~ u, sum u^2, count; schedule.RoundSums), and at the next round every
worker pulls the same totals and sets the same v_jc: each keeps a whole copy of V, the same
everywhere. Biases are two more columns: the users' (v = 1; set locally at the start of each epoch)
and the items' (u = 1; one column of rounds). An epoch is the item-bias column, then the --rank
columns, ceil(blocks / per-round) rounds each; train and test RMSE travel in the sums of the round
that ends it. --out writes the files the data-parallel schedules write.

Threads and ownership: each worker thread owns its _Part (its users' ratings, residuals, U and its
copy of V); node 0's scheduler thread is pskv.schedule's.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol

import numpy as np

import pskv

from .. import schedule
from ..data.ratings import Ratings
from ..errors import ConfigError
from . import common

_SUMS = "mf-ccd-sums"
POLICIES = schedule.POLICIES


@dataclasses.dataclass(frozen=True)
class Plan:
    """Blocks, rounds and columns of a run."""

    n_items: int
    per_round: int  # blocks per round
    rounds_per_column: int
    size: int  # items per block (the last blocks may hold fewer, or none)
    columns: tuple[int, ...]  # the columns that take rounds, in epoch order
    epochs: int

    @staticmethod
    def of(args, n_items: int) -> Plan:
        per_round = max(1, min(args.ccd_per_round, args.ccd_blocks, n_items))
        rounds_per_column = -(-min(args.ccd_blocks, n_items) // per_round)
        blocks = per_round * rounds_per_column  # so that cyclic takes each block once per column
        columns = ((args.rank + 1,) if args.biases else ()) + tuple(range(args.rank))
        return Plan(n_items, per_round, rounds_per_column, -(-n_items // blocks), columns, args.epochs)

    @property
    def blocks(self) -> int:
        return self.per_round * self.rounds_per_column

    @property
    def per_epoch(self) -> int:
        return len(self.columns) * self.rounds_per_column

    @property
    def rounds(self) -> int:
        return self.epochs * self.per_epoch

    @property
    def width(self) -> int:
        """Sums per round: (sum R~ u, sum u^2, count) per item of its blocks, then train SSE, test SSE, test count."""
        return 3 * self.per_round * self.size + 3

    def column(self, t: int) -> int:
        return self.columns[(t // self.rounds_per_column) % len(self.columns)]

    def items(self, block: int) -> tuple[int, int]:
        return min(block * self.size, self.n_items), min((block + 1) * self.size, self.n_items)


class Problem(Protocol):
    """What this module reads of an apps.mf.Problem (mf imports this module: no import back)."""

    train: Ratings
    test: Ratings
    clip: tuple[float, float]


@dataclasses.dataclass
class State:
    """What every worker thread of a node shares (mf's summary reads session, problem, items, users)."""

    session: common.Session
    problem: Problem
    plan: Plan
    sched: schedule.Scheduler
    items: pskv.Table | None  # --out only
    users: pskv.Table | None


def check(args, *, backups: int | None = None) -> None:
    """The flags --schedule ccd cannot honour (mf.check, before any node starts): ConfigError naming them."""
    if backups or args.backups or args.checkpoint_dir:
        raise ConfigError(
            "--schedule ccd keeps its rounds in worker clocks and does not survive a dead node or "
            "resume from a checkpoint yet; use --schedule free for --backups / --checkpoint-dir"
        )
    if args.consistency != "async" or args.localize or args.replicate or args.storage == "disk":
        raise ConfigError(
            "--schedule ccd keeps a copy of the item factors in every worker and orders rounds by "
            "worker clocks; drop --consistency, --localize, --replicate and --storage disk"
        )
    if args.ccd_policy not in POLICIES:
        raise ConfigError(f"--ccd-policy {args.ccd_policy!r}: use one of {', '.join(POLICIES)}")


def setup(s: common.Session, problem, items_table: str, users_table: str) -> State:
    """Declare the tables and the scheduler (collective), start node 0's scheduler thread."""
    args, node = s.args, s.node
    if node.config.backups:  # (PSKV_BACKUPS; the flags were checked before the node started)
        check(args, backups=node.config.backups)
    plan = Plan.of(args, problem.train.n_items)
    sched = schedule.Scheduler(node, "mf-ccd", plan.blocks, plan.per_round, policy=args.ccd_policy, seed=args.seed)
    schedule.RoundSums.declare(node, _SUMS, plan.width)
    items = users = None
    if args.out:
        items = node.table(items_table, rows=problem.train.n_items, dim=args.rank + args.biases)
        users = node.table(users_table, rows=problem.train.n_users, dim=args.rank + 1)
    if node.rank == 0 and not s.report.json:
        print(
            f"mf: {problem.name}, {len(problem.train):,} train / {len(problem.test):,} test ratings, rank "
            f"{args.rank}, CCD++ on the scheduler ({args.ccd_policy}): {plan.blocks} item blocks of {plan.size}, "
            f"{plan.per_round} per round, {plan.rounds} rounds; {node.num_nodes} node(s) x {s.threads} thread(s), "
            f"{args.epochs} epochs",
            flush=True,
        )
    sched.start(plan.rounds + 1)  # (the last round updates nothing: it measures the last epoch)
    return State(s, problem, plan, sched, items, users)


class _Part:
    """One worker's users: their ratings sorted by item, the residuals R~, U; and its copy of V.
    Columns of U and V: the rank factors, then the users' biases (V = 1), then the items' (U = 1)."""

    def __init__(self, st: State, me: int, workers: int) -> None:
        args, train, test = st.session.args, st.problem.train, st.problem.test
        self.args, self.plan, self.clip = args, st.plan, st.problem.clip
        self.rank, n_items = args.rank, train.n_items
        self.mu = float(train.values.mean()) if args.global_mean else 0.0
        mine = np.flatnonzero(train.users % workers == me)
        mine = mine[np.argsort(train.items[mine], kind="stable")]
        self.items = train.items[mine].astype(np.int64)  # (nnz,) sorted
        self.users = (train.users[mine] // workers).astype(np.int64)  # (nnz,) local ids
        self.starts = np.searchsorted(self.items, np.arange(n_items + 1))  # item j's ratings: [starts[j], starts[j+1])
        n_local = len(range(me, train.n_users, workers))
        self.counts = np.bincount(self.users, minlength=n_local)  # (n_local,) ratings per user
        cols = self.rank + 2
        self.U = np.zeros((n_local, cols))
        self.U[:, self.rank + 1] = 1.0
        self.V = np.random.default_rng([args.seed, 13]).normal(0, args.init_std, (n_items, cols))  # the same everywhere
        self.V[:, self.rank], self.V[:, self.rank + 1] = 1.0, 0.0
        self.res = train.values[mine].astype(np.float64) - self.mu  # R~ with U = 0 (and item biases 0)
        sel = test.users % workers == me
        self.test = (test.users[sel] // workers, test.items[sel], test.values[sel].astype(np.float64))
        self.train_ratings = len(train)

    def _lam(self, c: int) -> float:
        return self.args.lam if c < self.rank else self.args.lambda_bias

    def add(self, c: int, sign: float) -> None:
        """Column c's share of the predictions back into the residuals (+1) or out of them (-1)."""
        self.res += sign * self.U[self.users, c] * self.V[self.items, c]

    def update_users(self, c: int) -> None:
        """u_ic for this worker's users, from its ratings alone (column c added back)."""
        v = self.V[self.items, c]
        num = np.bincount(self.users, weights=self.res * v, minlength=len(self.U))
        den = self._lam(c) * self.counts + np.bincount(self.users, weights=v * v, minlength=len(self.U))
        self.U[:, c] = np.divide(num, den, out=np.zeros(len(self.U)), where=self.counts > 0)

    def user_biases(self) -> None:
        c = self.rank
        self.add(c, 1.0)
        self.update_users(c)
        self.add(c, -1.0)

    def partial(self, chosen: np.ndarray, c: int) -> np.ndarray:
        """(width,) this worker's sums for the items of the blocks `chosen` in column c."""
        plan, out = self.plan, np.zeros(self.plan.width)
        span = plan.per_round * plan.size
        for k, block in enumerate(chosen):
            lo, hi = plan.items(int(block))
            a, b = self.starts[lo], self.starts[hi]
            at = self.items[a:b] - lo
            u = self.U[self.users[a:b], c]
            at0 = k * plan.size
            out[at0 : at0 + hi - lo] = np.bincount(at, weights=self.res[a:b] * u, minlength=hi - lo)
            out[span + at0 : span + at0 + hi - lo] = np.bincount(at, weights=u * u, minlength=hi - lo)
            out[2 * span + at0 : 2 * span + at0 + hi - lo] = np.bincount(at, minlength=hi - lo)
        return out

    def apply(self, chosen: np.ndarray, c: int, totals: np.ndarray) -> np.ndarray:
        """Set v_jc of the blocks `chosen` from the totals of every worker; the summed |change| per block."""
        plan, span = self.plan, self.plan.per_round * self.plan.size
        changes = np.zeros(len(chosen))
        for k, block in enumerate(chosen):
            lo, hi = plan.items(int(block))
            at = slice(k * plan.size, k * plan.size + hi - lo)
            num, uu = totals[at], totals[span:][at]
            n = totals[2 * span :][at]
            new = np.divide(num, self._lam(c) * n + uu, out=np.zeros(hi - lo), where=n > 0)
            changes[k] = float(np.abs(new - self.V[lo:hi, c]).sum())
            self.V[lo:hi, c] = new
        return changes

    def errors(self) -> tuple[float, float, float]:
        """(train SSE, test SSE, test ratings) of this worker's users, every column in place."""
        users, items, values = self.test
        pred = np.clip(self.mu + np.einsum("ij,ij->i", self.U[users], self.V[items]), *self.clip)
        return float(self.res @ self.res), float(((values - pred) ** 2).sum()), float(len(values))


def train(w: pskv.Worker, st: State) -> None:
    s, args, sched, plan = st.session, st.session.args, st.sched, st.plan
    me = _Part(st, s.index(w), s.workers)
    sums = schedule.RoundSums(w, _SUMS, plan.width)
    leader = common.is_leader(w)
    progress = common.Progress(
        w, total=plan.rounds, scale=1, unit="rounds", mode=args.progress, watchdog=s.report.watchdog
    )
    epoch_start = time.monotonic()

    def report(epoch: int, totals: np.ndarray) -> None:
        nonlocal epoch_start
        now = time.monotonic()
        s.report.epoch(
            w,
            epoch,
            progress,
            train_rmse=float(np.sqrt(totals[-3] / me.train_ratings)),
            test_rmse=float(np.sqrt(totals[-2] / max(totals[-1], 1.0))),
            seconds=now - epoch_start,
        )
        epoch_start = now

    sched.begin(w)
    previous = None
    for t in range(plan.rounds + 1):
        chosen = sched.take(w, t)  # round t - 1's sums are in everywhere, too
        if previous is not None:
            totals = sums.totals(t - 1)
            changes = me.apply(previous, plan.column(t - 1), totals)
            if leader:
                sched.report(w, t - 1, previous, changes)
            if t - 1 and (t - 1) % plan.per_epoch == 0:
                report((t - 1) // plan.per_epoch, totals)
        measured = None
        if t % plan.rounds_per_column == 0:  # a column ends (t > 0) and the next begins (t < rounds)
            if t:
                me.add(plan.column(t - 1), -1.0)
            if t and t % plan.per_epoch == 0:
                measured = me.errors()
            if t < plan.rounds:
                if t % plan.per_epoch == 0 and args.biases:
                    me.user_biases()
                c = plan.column(t)
                me.add(c, 1.0)
                if c < me.rank:
                    me.update_users(c)
        if t == plan.rounds:
            chosen = chosen[:0]
            _save(w, st, me)
        out = me.partial(chosen, plan.column(t)) if len(chosen) else np.zeros(plan.width)
        if measured is not None:
            out[-3:] = measured
        sums.push(t, out).wait()
        sched.end_round(w)
        previous = chosen
        if t:
            progress.update(1)
    w.wait_clock(plan.rounds + 2)  # every worker's last push (the last epoch's errors) is in
    report(plan.epochs, sums.totals(plan.rounds))
    progress.close()


def _save(w: pskv.Worker, st: State, me: _Part) -> None:
    """--out: this worker's users' factors and biases; the leader writes V (the same everywhere)."""
    if st.users is None or st.items is None:  # (--out makes both)
        return
    s, rank = st.session, me.rank
    first, workers = s.index(w), s.workers
    w.table(st.users.name).set(first + workers * np.arange(len(me.U)), me.U[:, : rank + 1].astype(np.float32)).wait()
    if common.is_leader(w):
        v = me.V[:, : rank + 1].copy()
        v[:, rank] = me.V[:, rank + 1]
        w.table(st.items.name).set(np.arange(len(me.V)), v[:, : rank + s.args.biases].astype(np.float32)).wait()


def summary(st: State, wall: float) -> list[str]:
    """Node 0: the scheduler's line (its share of the run)."""
    st.sched.close(timeout=60)
    info = st.sched.stats()
    rounds = max(st.plan.rounds, 1)
    return [
        f"mf ccd: {st.session.args.ccd_policy}, {st.plan.rounds} rounds in {wall:.2f} s "
        f"({1000 * wall / rounds:.2f} ms per round, {st.plan.per_round} blocks of {st.plan.size} items per "
        f"round); the scheduler chose for {info['choose_seconds']:.2f} s "
        f"({info['choose_seconds'] / max(wall, 1e-9):.0%} of the run, pipelined)"
    ]
