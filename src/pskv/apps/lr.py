"""Sparse L1/L2 logistic regression on a parameter server, the Li et al. (OSDI 2014) way.

    pskv run lr --nodes 2 -- --data census --l1 1e-4
    pskv run lr -- --data train.libsvm --test test.libsvm --l1 1e-5 --algo ftrl --out model.npz

Minimizes mean log loss + l1 |w|_1 + l2/2 |w|^2 over hashed uint64 feature keys (scikit-learn's
C is l1 = 1 / (C n)); every example also has a bias feature, penalised like the others (as
liblinear does). Workers hold row shards of the examples (data.sparse, memory-mapped).

--key-space: dense (default): every node reads the training data's distinct feature keys (the
same on each) and gives each a row id, its rank in key order, so the weight tables are dense and
the processes of one host share them in memory (a pull or push of a key the process next door
owns is no message); uint64: a sparse table over the hashed keys, rows created as features
appear (no pass over the data first). The model (--out) and the results are the same.

--algo:
  dbpg   delayed block proximal gradient (the paper's): features are cut into --blocks key ranges;
         in round t every worker pushes its examples' gradient and diagonal curvature bound for
         block t mod B to `lr-grad` (sums), then the node managing each key applies the server
         step (pskv.updaters.BlockProx, a proximal Newton step per coordinate) and every worker
         pulls the block's new weights. Rounds are ordered by worker clocks (worker.clock,
         worker.wait_clock); --delay tau lets a worker start round t + 1 .. t + tau before it has
         the weights of round t (bounded delay; its margins are then that much behind).
  prox   proximal SGD: minibatch gradients pushed with push_pull to pskv.updaters.Prox, which
         soft-thresholds; the fresh weights of the batch's keys come back in the same exchange.
  ftrl   FTRL-proximal (pskv.updaters.FTRL) the same way (l1 weighs the sum of a pass's batch gradients).

--filters (comma-separated, composable; see pskv.filters): kkt (skip features whose weight is 0
and whose gradient sits inside [-l1, l1]: the step leaves them at 0), sig:T (significantly
modified: send only entries of at least T, keep the rest for later), keycache, zstd or lz4,
fp16 or bf16. Each epoch reports test AUC and log loss, the objective, non-zero weights and bytes
sent; the last line is `test AUC ...`. --out writes the non-zero weights (lr_model.load_model,
predict: no cluster needed).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import deque
from pathlib import Path

import numpy as np

import pskv

from .. import filters as pskv_filters
from ..data import DataError, cache_dir, census
from ..data.sparse import SparseData, load
from ..errors import ConfigError
from . import common
from .lr_model import (
    AUC_BINS,
    Dense,
    Hashed,
    KeySpace,
    Local,
    add_margins,
    auc_of_histogram,
    batch_gradient,
    block_gradient,
    loss_sum,
    margins,
    save_model,
    score_histogram,
)

_W, _G = "lr-w", "lr-grad"
_SCALARS = 8  # loss sum, train rows, |w|_1, |w|^2, non-zeros, bytes sent, test loss sum, messages sent


def _parser() -> argparse.ArgumentParser:
    p = common.parser("lr", "sparse L1/L2 logistic regression (Li et al.'s parameter server)", epochs=10)
    g = p.add_argument_group("lr")
    g.add_argument(
        "--data",
        default="census",
        help="census (built in: pskv data fetch census-income) or a libsvm / .pskvsp file of training examples",
    )
    g.add_argument(
        "--test",
        help="a libsvm / .pskvsp file of test examples (census: its test split; else "
        "--test-fraction of --data held out)",
    )
    g.add_argument("--test-fraction", type=float, default=0.2, help="held-out share without --test")
    g.add_argument("--rows", type=int, default=0, help="train on the first N examples only (0: all)")
    g.add_argument("--l1", type=float, default=1e-4, help="L1 weight (mean-loss scale: sklearn C = 1/(l1 n))")
    g.add_argument("--l2", type=float, default=0.0, help="L2 weight")
    g.add_argument(
        "--algo",
        choices=["dbpg", "prox", "ftrl"],
        default="dbpg",
        help="dbpg: delayed block proximal gradient over feature blocks (Li et al.); prox: proximal SGD "
        "per minibatch; ftrl: FTRL-proximal per minibatch",
    )
    g.add_argument(
        "--key-space",
        choices=["dense", "uint64"],
        default="dense",
        help="dense: a row id per distinct training feature (tables shared in memory on a host); "
        "uint64: a sparse table over the hashed keys",
    )
    g.add_argument("--blocks", type=int, default=32, help="dbpg: feature blocks (key ranges)")
    g.add_argument("--delay", type=int, default=0, help="dbpg: bounded delay tau, in rounds")
    g.add_argument("--lr", type=float, default=0.5, help="prox: step size; ftrl: alpha")
    g.add_argument("--ftrl-beta", type=float, default=1.0, help="ftrl: beta")
    g.add_argument("--batch", type=int, default=500, help="prox/ftrl: examples per push")
    g.add_argument(
        "--filters",
        type=pskv_filters.parse,
        default=pskv_filters.parse(""),
        metavar="LIST",
        help="kkt, sig:T, keycache, zstd|lz4, fp16|bf16, comma-separated",
    )
    g.add_argument("--out", type=Path, metavar="MODEL.npz", help="write the non-zero weights here")
    return p


@dataclasses.dataclass
class State:
    s: common.Session
    train: SparseData
    test: SparseData
    rows: int  # training examples in all
    space: KeySpace  # the weight tables' keys (lr_model.Dense or Hashed)
    names: dict | None = None  # key -> feature name (census)
    evaluation: tuple = (0, 0)  # bytes and messages this node sent for test evaluation and metrics (thread 0)


def _load(args: argparse.Namespace, rank: int) -> tuple[SparseData, SparseData, dict | None]:
    """Train and test data (node 0 prepares what needs preparing; the others call after a collective)."""
    if args.data == "census":
        directory = census.prepare(quiet=rank != 0)
        train, test = SparseData.open(directory / "train.pskvsp"), SparseData.open(directory / "test.pskvsp")
        names = census.feature_names(directory) if args.out else None
    else:
        train = load(args.data, cache_dir=cache_dir() / "lr")
        names = None
        if args.test:
            test = load(args.test, cache_dir=cache_dir() / "lr")
        else:
            cut = round(train.rows * (1 - args.test_fraction))
            if not 0 < cut < train.rows:
                raise DataError(
                    f"--test-fraction {args.test_fraction} leaves no train or test examples of {train.rows}"
                )
            train, test = train.slice(0, cut), train.slice(cut, train.rows)
    if args.rows:
        train = train.slice(0, min(args.rows, train.rows))
    return train, test, names


def setup(s: common.Session) -> State:
    args, node = s.args, s.node
    if node.rank == 0:
        _load(args, 0)  # fetch, featurize or convert once, before the others read
    node.table("lr-ready", rows=1)  # (a collective: the other nodes wait here until node 0 has the data ready)
    train, test, names = _load(args, node.rank)
    space = Dense.of(train) if args.key_space == "dense" else Hashed()
    if args.algo == "dbpg":
        node.table(_W, dim=2, updater=pskv.updaters.BlockProx(args.l1, args.l2), **space.declare)
        node.table(_G, dim=2, **space.declare)
    else:
        batches = -(-train.rows // args.batch)  # per pass, over every worker
        node.table(_W, dim=1, updater=_updater(args, batches), **space.declare)
    if node.rank == 0:
        print(
            f"lr: {args.algo} on {train.rows:,} train / {test.rows:,} test examples, {train.nnz:,} non-zeros; "
            f"l1={args.l1:g} l2={args.l2:g}; {s.workers} worker(s); filters: {args.filters or 'none'}; "
            f"{f'{space.rows:,} dense keys' if space.rows else 'uint64 keys'}",
            flush=True,
        )
        if args.data == "census":
            c = census.stats(census.prepare(quiet=True))
            print(
                f"lr: census-income: {c['features']:,} hashed features ({c['fields']} fields, {c['crosses']} "
                f"crosses), {c['collisions']} hash collisions ({c['collision_rate']:.2e})",
                flush=True,
            )
    return State(s, train, test, train.rows, space, names)


def _updater(args: argparse.Namespace, batches: int):
    """prox: the mean-loss l1, l2 per step; ftrl: they weigh the sum of a pass's `batches` mean gradients."""
    if args.algo == "prox":
        return pskv.updaters.Prox(lr=args.lr, l1=args.l1, l2=args.l2)
    return pskv.updaters.FTRL(alpha=args.lr, beta=args.ftrl_beta, l1=args.l1 * batches, l2=args.l2 * batches)


def train(w: pskv.Worker, st: State) -> None:
    s, args = st.s, st.s.args
    me = s.index(w)
    local = Local(st.train.shard(me, s.workers))
    test = Local(st.test.shard(me, s.workers))
    progress = common.Progress(
        w, total=args.epochs * st.rows, scale=s.workers, mode=args.progress, watchdog=s.report.watchdog
    )
    run = _Dbpg(w, st, local) if args.algo == "dbpg" else _Sgd(w, st, local)
    for epoch in range(1, args.epochs + 1):
        loss = run.epoch(epoch, progress)
        _report(w, st, run, test, epoch, loss, progress)
    progress.close()


class _Sgd:
    """prox / ftrl: minibatches, one push_pull per batch; the batch's fresh weights come back in it."""

    def __init__(self, w: pskv.Worker, st: State, local: Local) -> None:
        self.w, self.st, self.local = w, st, local
        self.table = w.table(_W)
        self.ids = st.space.ids(local.keys)[0]  # (m,) the table keys of local.keys (every one has one)
        self.weights = self.table.pull(self.ids)[:, 0].astype(np.float64)  # (m,) this worker's copy
        m = len(local.keys)
        self.g, self.mark, self.touched = np.zeros(m), np.zeros(m, np.int64), np.empty(m, np.int64)
        self.stamp = 0
        self.rng = np.random.default_rng([st.s.args.seed, st.s.index(w)])
        kkt_exact = st.s.args.algo == "prox"  # (for ftrl a skipped gradient changes z: the filter is off)
        self.chain = pskv_filters.Chain(st.s.args.filters, l1=st.s.args.l1 if kkt_exact else 0.0)

    def epoch(self, epoch: int, progress) -> float:
        loc, batch = self.local, self.st.s.args.batch
        order = self.rng.permutation(loc.rows)
        total, pending = 0.0, None
        for start in range(0, loc.rows, batch):
            rows = order[start : start + batch]
            self.stamp += 1
            n, loss = batch_gradient(
                rows,
                loc.indptr,
                loc.col,
                loc.values,
                loc.has_values,
                loc.labels,
                self.weights,
                loc.bias,
                self.g,
                self.mark,
                self.stamp,
                self.touched,
            )
            total += loss
            cols = self.touched[:n].copy()
            grads = self.g[cols] / len(rows)
            self.g[cols] = 0.0
            cols, grads = self.chain.select(loc.keys, cols, grads, self.weights)
            if pending is not None:
                self._land(*pending)
            if len(cols):
                pending = (
                    cols,
                    self.table.push_pull(self.ids[cols], grads[:, None].astype(np.float32), filters=self.chain.wire),
                )
            else:
                pending = None
            progress.update(len(rows))
        if pending is not None:
            self._land(*pending)
        return total

    def _land(self, cols: np.ndarray, fut) -> None:
        self.weights[cols] = fut.wait()[:, 0]

    def weights_of(self, keys: np.ndarray) -> np.ndarray:
        return _weights(self.st.space, self.table, keys)


def _weights(space: KeySpace, table: pskv.Table, keys: np.ndarray) -> np.ndarray:
    """The weights of feature keys `keys` (0 for those that have no row: not in the training data)."""
    ids, found = space.ids(keys)
    if found is None:
        return table.pull(ids)[:, 0]
    out = np.zeros(len(keys), table.dtype)
    out[found] = table.pull(ids[found])[:, 0]
    return out


class _Dbpg:
    """Delayed block proximal gradient: per round one block, two worker clocks (see the module doc)."""

    def __init__(self, w: pskv.Worker, st: State, local: Local) -> None:
        self.w, self.st, self.local = w, st, local
        args = st.s.args
        self.blocks, self.delay = args.blocks, args.delay
        self.block_of = local.block_of(self.blocks)
        self.cols = [np.flatnonzero(self.block_of == b) for b in range(self.blocks)]
        self.parts = local.split(self.block_of, self.blocks)  # each block's nonzeros alone
        self.table, self.grad_t = w.table(_W), w.table(_G)
        self.ids = st.space.ids(local.keys)[0]  # (m,) the table keys of local.keys
        node = st.s.node
        lo, hi = st.space.local(self.grad_t, node.rank, node.num_nodes)  # the server steps' keys per block
        self.steps = [(max(lo, a), min(hi, z)) for a, z in (st.space.block(self.blocks, b) for b in range(self.blocks))]
        m = len(local.keys)
        self.g, self.h, self.delta = np.zeros(m), np.zeros(m), np.zeros(m)  # (zero again after each round's block)
        self.weights = np.zeros(len(local.keys))  # (m,) this worker's copy of its features' weights
        self.last_d = np.full(len(local.keys), np.inf)  # the server's last gradient per feature (KKT filter)
        self.m = np.zeros(local.rows)  # margins of the weights, all 0 at first
        self.round = 0
        self.pending: deque = deque()  # rounds whose weights are not pulled yet: (round, block)
        self.chain = pskv_filters.Chain(args.filters, l1=args.l1)
        self.scale = 1.0 / st.rows

    def epoch(self, epoch: int, progress) -> float:
        loc = self.local
        for b in range(self.blocks):
            t = self.round
            while self.pending and self.pending[0][0] < t - self.delay:
                self._land(*self.pending.popleft())
            g, h, block = self.g, self.h, self.cols[b]
            indptr, col, values = self.parts[b]
            block_gradient(
                indptr,
                col,
                values,
                loc.has_values,
                loc.labels,
                self.m,
                loc.bias,
                self.block_of[loc.bias] == b,
                g,
                h,
                self.scale,
            )  # (into block b's columns only)
            refresh = epoch % 5 == 1  # the first pass, and every 5th, sends every gradient (fresh KKT data)
            cols, gb = self.chain.select(loc.keys, block, g[block], self.weights, self.last_d, kkt=not refresh)
            gh = np.empty((len(cols), 2), np.float32)
            gh[:, 0], gh[:, 1] = gb, h[cols]
            g[block], h[block] = 0.0, 0.0
            push = self.grad_t.push(self.ids[cols], gh, filters=self.chain.wire)
            push.wait()  # (applied before the clock: a clock waits for a sparse table's pushes, not for an
            # asynchronous dense one's; a co-located owner's rows, in shared memory, are added to in the call)
            self.w.clock()
            self.w.wait_clock(2 * t + 1)  # every worker's sums of round t are in
            if self.w.thread == 0:
                self._server_step(b)
            self.w.clock()
            self.pending.append((t, b, cols))  # (a key filtered out here is filtered on every worker: same
            # weights and server gradients; its weight stays 0, so only the keys sent are pulled)
            self.round += 1
            progress.update(loc.rows // self.blocks + (b < loc.rows % self.blocks))
        while self.pending:
            self._land(*self.pending.popleft())
        return float(loss_sum(self.m, loc.labels))

    def _server_step(self, b: int) -> None:
        """This node's keys of block b: the summed (g, h) become a BlockProx step, then start again at 0."""
        lo, hi = self.steps[b]
        if lo >= hi:
            return
        keys, gh = self.grad_t.pull_range(lo, hi)
        if len(keys):
            self.table.push(keys, gh).wait()
            self.grad_t.set(keys, np.zeros_like(gh)).wait()

    def _land(self, t: int, b: int, cols: np.ndarray) -> None:
        """Round t's new weights of the columns it pushed: pulled, and the margins moved by the change."""
        self.w.wait_clock(2 * t + 2)
        if not len(cols):
            return
        rows = self.table.pull(self.ids[cols], filters=self.chain.wire)
        change = rows[:, 0] - self.weights[cols]
        self.weights[cols] = rows[:, 0]
        self.last_d[cols] = rows[:, 1]
        if change.any():
            self.delta[cols] = change  # (zero elsewhere: add_margins reads block b's columns only)
            indptr, col, values = self.parts[b]
            add_margins(indptr, col, values, self.local.has_values, self.delta, self.local.bias, self.m)
            self.delta[cols] = 0.0

    def weights_of(self, keys: np.ndarray) -> np.ndarray:
        return _weights(self.st.space, self.table, keys)


def _report(w: pskv.Worker, st: State, run, test: Local, epoch: int, loss: float, progress) -> None:
    """Test AUC and log loss, objective, non-zeros and bytes over every worker (one Reducer round)."""
    s, args = st.s, st.s.args
    w.barrier()  # every update of the epoch is applied
    before = _sent(s.node) if w.thread == 0 else (0, 0)
    wt = run.weights_of(test.keys)
    m = np.empty(test.rows)
    margins(test.indptr, test.col, test.values, test.has_values, wt.astype(np.float64), test.bias, m)
    prob = 1.0 / (1.0 + np.exp(-m))
    l1 = sq = nnz = sent = messages = 0.0
    if w.thread == 0:  # this node's range of the weights: read from its memory
        _, rows = run.table.pull_range(*st.space.local(run.table, s.node.rank, s.node.num_nodes))
        weights = rows[:, 0].astype(np.float64)
        l1, sq, nnz = np.abs(weights).sum(), (weights**2).sum(), float(np.count_nonzero(weights))
        sent, messages = before[0] - st.evaluation[0], before[1] - st.evaluation[1]  # training traffic only
    scalars = [loss, run.local.rows, l1, sq, nnz, sent, loss_sum(m, test.labels), messages]
    assert s.reducer is not None  # (run_app made it before training)
    totals = s.reducer.sum(w, np.concatenate([scalars, score_histogram(prob, test.labels)]))
    if w.thread == 0:
        w.barrier()  # (every node's evaluation traffic is sent: none of it counts as training's)
        after = _sent(s.node)
        st.evaluation = (st.evaluation[0] + after[0] - before[0], st.evaluation[1] + after[1] - before[1])
    else:
        w.barrier()
    loss_mean = totals[0] / max(totals[1], 1)
    objective = loss_mean + args.l1 * totals[2] + 0.5 * args.l2 * totals[3]
    s.report.epoch(
        w,
        epoch,
        progress,
        test_auc=auc_of_histogram(totals[_SCALARS:]),
        objective=objective,
        test_logloss=totals[6] / max(st.test.rows, 1),
        nonzeros=int(totals[4]),
        mb_sent=totals[5] / 2**20,
        messages=int(totals[7]),
    )


def _sent(node: pskv.Node) -> tuple[int, int]:
    stats = node.stats()
    return stats["bytes_sent"], stats["messages_sent"]


def finish(st: State, wall: float) -> list[str]:
    s, args = st.s, st.s.args
    row = s.report.rows[-1] if s.report.rows else {}
    nan = float("nan")
    lines = [
        f"lr: {args.algo}, {args.epochs} epochs in {wall:.1f} s; objective {row.get('objective', nan):.6f}, "
        f"{int(row.get('nonzeros', 0)):,} non-zero weights, {row.get('mb_sent', 0):.2f} MiB sent in training "
        f"({int(row.get('messages', 0)):,} messages)"
    ]
    if args.out:
        table = s.node.worker().table(_W)
        ids, rows = table.pull_range(*st.space.whole())
        keys = st.space.features(ids)
        save_model(args.out, keys, rows[:, 0], st.names, algo=args.algo, l1=args.l1, l2=args.l2)
        lines.append(f"lr: wrote {int(np.count_nonzero(rows[:, 0])):,} non-zero weights to {args.out}")
    lines.append(f"test AUC {row.get('test_auc', nan):.4f} test logloss {row.get('test_logloss', nan):.4f}")
    return lines


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check lr's arguments (`pskv run lr` calls it before any node starts): a mistake in a
    flag or a --data / --test that is no file ends the run in one line with status 2 (common.arguments)."""
    return common.arguments("lr", _parser(), argv, _check)


def _check(args: argparse.Namespace) -> None:
    common.at_least(args, 1, "--epochs", "--blocks", "--batch")
    common.at_least(args, 0, "--delay", "--rows")
    if args.l1 < 0 or args.l2 < 0:
        raise ConfigError(f"--l1 {args.l1:g} and --l2 {args.l2:g} must be >= 0")
    if not args.test and not 0 < args.test_fraction < 1:
        raise ConfigError(f"--test-fraction {args.test_fraction} must be in (0, 1) without --test")
    for flag, path in (("--data", args.data), ("--test", args.test)):
        if path is not None and path != "census" and not Path(path).is_file():
            raise DataError(f"{flag} {path!r}: no such file; give census or a libsvm / .pskvsp file")


def main(argv: list[str] | None = None) -> int:
    """Run lr on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    try:
        return common.run_app("lr", args, metrics=_SCALARS + 2 * AUC_BINS, setup=setup, train=train, finish=finish)
    except DataError as exc:  # (raised in setup, on every node alike: each reads the same file)
        print(f"pskv run lr: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
