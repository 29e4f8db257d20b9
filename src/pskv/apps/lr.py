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
import sys
from pathlib import Path

import numpy as np

import pskv

from .. import filters as pskv_filters
from ..data import DataError, cache_dir, census
from ..data.sparse import SparseData, load
from ..errors import ConfigError
from . import common
from .lr_model import AUC_BINS, Dense, Hashed, Local, auc_of_histogram, loss_sum, margins, save_model, score_histogram
from .lr_train import Dbpg, G, Sgd, State, W

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
        node.table(W, dim=2, updater=pskv.updaters.BlockProx(args.l1, args.l2), **space.declare)
        node.table(G, dim=2, **space.declare)
    else:
        batches = -(-train.rows // args.batch)  # per pass, over every worker
        node.table(W, dim=1, updater=_updater(args, batches), **space.declare)
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
    run = Dbpg(w, st, local) if args.algo == "dbpg" else Sgd(w, st, local)
    for epoch in range(1, args.epochs + 1):
        loss = run.epoch(epoch, progress)
        _report(w, st, run, test, epoch, loss, progress)
    progress.close()


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
        table = s.node.worker().table(W)
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
