"""Matrix factorization by SGD on a parameter server (Petuum's and Lapse's MF).

    pskv run mf --nodes 2 --threads 2 -- --data ml-100k --epochs 30
    pskv launch -n 2 --threads 2 -- python -m pskv.apps.mf --data zipf:100000x20000x2000000
    python -m pskv.apps.mf --data lapse-toy --rank 2 --epochs 10      # one node, one thread

Model: r(u, i) ~ mu + b_u + b_i + U[u] . V[i] (`--no-biases`, `--no-global-mean` drop terms),
trained by plain SGD with L2 `--lambda` and step size x * (y + t)^-z at epoch t = 0, 1, ...
(Petuum's `init_step_size`, `step_size_offset`, `step_size_pow`). The defaults reach test RMSE
0.889-0.892 on MovieLens-100K's fixed 90/10 split (30 epochs; benchmarks/RESULTS-mf.md).

Layout (Lapse's MF, data-parallel with row-clustered data): the ratings are split by user over
the W = nodes x threads workers (user u goes to worker u mod W), so each worker keeps its users'
factors and biases in its own numpy arrays. The item factors (and item biases, as the last
column) live in the pskv table `mf-items` with the `add` updater. Per batch a worker pulls the
distinct items of the batch once, runs sequential SGD over the batch on that local copy (a
numba nogil kernel, so threads run in parallel), and pushes the change of each row (or, with
`--item-updater adagrad`, the batch's gradient to a server-side Adagrad: concurrent changes of a
very hot item otherwise add up and diverge). `--schedule dsgd` is Lapse's DSGD: item blocks
rotate over the workers, so with `--localize` every item access is local. The default, `--schedule
auto`, is dsgd with --localize (lease 0) on more than one node and free on one (auto_schedule): across
hosts an item row then crosses the network once per sub-epoch instead of once per batch, at about the same
test RMSE (benchmarks/RESULTS.md, "Efficiency across 2 emulated hosts"). `--intent` signals each
batch's items `--ahead` batches early (pskv.data.Lookahead): those one node intends move there. Train RMSE is
measured during the epoch, test RMSE after it; sums go through common.Reducer. `--schedule ccd`
is model-parallel instead: CCD++ on the STRADS-style scheduler (apps.mf_ccd).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from typing import Any

import numpy as np

import pskv

from ..data import DataError, ratings
from ..data.trained import Factors, load_factors, write_json, write_labelled  # noqa: F401 - the app's loader
from ..errors import ConfigError
from . import common, mf_args, mf_ccd, mf_train
from .mf_args import check
from .mf_data import Problem, load
from .mf_model import sgd_batch, squared_error  # noqa: F401 - benchmarks/bench_app_mf.py's kernels
from .mf_train import Part, step_size, train_epoch

_ITEMS, _USERS_OUT = mf_args.ITEMS, mf_args.USERS_OUT
_parser, _most_batches, _train = mf_args.parser, mf_train.most_batches, mf_train.train_batches  # (tests use them)


@dataclasses.dataclass
class _Run:
    """What every worker thread of a node shares, and node 0's main-thread table handles for --out."""

    session: common.Session
    problem: Problem
    items: pskv.Table
    users: pskv.Table | None  # --out only


def auto_schedule(args: argparse.Namespace, nodes: int, backups: int) -> None:
    """Resolve `--schedule auto` in `args` for a run of `nodes` nodes: dsgd with --localize on more than
    one node (each sub-epoch a worker's item block moves to its node once, and every access in it is
    local: no item row crosses the network per batch), free on one node or where dsgd does not go
    (backups: dsgd does not survive a dead node; --intent, --replicate and --storage disk place the rows
    their own way; bsp/ssp keep the per-batch clocks of the free order). --schedule dsgd --localize with no
    --lease gets lease 0 (Lapse's: every localize moves): a block that moved here in one sub-epoch is
    another worker's in the next, and a lease would keep it here, every access to it remote."""
    if args.schedule == "auto":
        free = (
            nodes < 2
            or backups
            or getattr(args, "intent", False)
            or args.replicate
            or args.storage != "memory"
            or args.consistency != "async"
        )
        args.schedule = "free" if free else "dsgd"
        args.localize = args.localize or args.schedule == "dsgd"
    if args.schedule == "dsgd" and args.localize and args.lease is None:
        args.lease = 0.0


def _setup(s: common.Session, problem: Problem) -> _Run:
    """Declare the tables (collective); node 0 prints what runs."""
    args, node = s.args, s.node
    auto = args.schedule == "auto"
    auto_schedule(args, node.num_nodes, node.config.backups)
    if node.config.backups and args.schedule == "dsgd":
        raise ConfigError(
            "mf: --schedule dsgd rotates item blocks over a fixed set of workers and does not "
            "survive a dead node yet; use --schedule free with --backups"
        )
    updater = "add" if args.item_updater == "sgd" else pskv.Adagrad(lr=args.adagrad_lr, initial_accumulator=0.1)
    extra: dict[str, Any] = {}
    if args.replicate:
        extra["replicate"] = pskv.Replicate(keys=_hottest(problem.train, args.replicate))
    extra["placement"] = common.placement(args)  # --lease, --location-caches
    if args.storage == "disk":  # Bösen's out-of-core table: the item factors in files, a bounded cache
        extra.update(storage="disk", cache_rows=args.cache_rows, path=args.storage_path)
    items = node.table(
        _ITEMS,
        rows=problem.train.n_items,
        dim=args.rank + args.biases,
        updater=updater,
        init=pskv.Normal(std=args.init_std, seed=args.seed),
        **extra,
    )
    # the users' factors live in the workers; a table keeps them for --out, for whoever takes them over
    # (backups) and in checkpoints
    saves = args.out or node.config.backups or args.checkpoint_dir
    users = node.table(_USERS_OUT, rows=problem.train.n_users, dim=args.rank + 1) if saves else None
    if node.rank == 0 and not s.report.json:
        print(
            f"mf: {problem.name}, {len(problem.train):,} train / {len(problem.test):,} test ratings, "
            f"rank {args.rank}, {node.num_nodes} node(s) x {s.threads} thread(s), {args.epochs} epochs, "
            f"schedule {args.schedule}{' with --localize' if args.localize else ''}"
            f"{' (auto; --schedule free for the Hogwild order)' if auto and args.schedule == 'dsgd' else ''}",
            flush=True,
        )
    return _Run(s, problem, items, users)


def _work(w: pskv.Worker, run: _Run) -> None:
    s, problem = run.session, run.problem
    args, workers, me = s.args, s.workers, s.index(w)
    part, items = Part(problem, me, workers, args), w.table(_ITEMS)
    clock = part.clock = common.Clock(w, args)
    part.exchange = common.exchanges(args, bool(s.node.config.backups))
    shares, adopted = common.Shares(s, w), {}  # (part, j, L) -> Part: dead workers' users this worker took
    users = w.table(_USERS_OUT) if run.users is not None else None

    def users_table() -> pskv.Table:
        """The users' table, made for --out, backups and checkpoints: the only ones that save or load users."""
        assert users is not None
        return users

    mu = float(problem.train.values.mean()) if args.global_mean else 0.0
    if problem.item_init is not None and common.is_leader(w):
        items.set(np.arange(problem.train.n_items), _with_bias(problem.item_init, args)).wait()
    if s.resumed:
        part.load(users_table())  # their factors as the checkpoint saved them (any worker count then)
    elif shares.backups:
        part.save(users_table()).wait()  # a node that dies in epoch 1 leaves its users' initial factors
    w.barrier()
    progress = common.Progress(
        w,
        total=(args.epochs - s.start_epoch) * len(problem.train),
        scale=workers,
        unit="ratings",
        mode=args.progress,
        watchdog=s.report.watchdog,
    )

    def adopt(piece: tuple[int, int, int]) -> Part:
        if piece not in adopted:
            p, j, pieces = piece
            adopted[piece] = Part(problem, p, workers, args, (j, pieces)).load(users_table())
            adopted[piece].clock = clock
        return adopted[piece]

    def save(parts: list[Part]) -> None:
        for saved in [p.save(users_table()) for p in parts]:
            saved.wait()

    for epoch in range(s.start_epoch, args.epochs):
        start = time.monotonic()
        pieces = shares.pieces()
        parts = [part] + [adopt(piece) for piece in pieces]
        for p in parts:  # an epoch's order depends on the epoch alone: a resumed run is the same run
            p.rng = np.random.default_rng([args.seed, 11, p.me, *p.piece, epoch])
        sse = sum(train_epoch(w, p, items, args, mu, step_size(args, epoch), progress) for p in parts)
        for piece in shares.late(w, pieces):  # a node died during this epoch: its users are trained here too
            parts.append(adopt(piece))
            parts[-1].rng = np.random.default_rng([args.seed, 11, parts[-1].me, *parts[-1].piece, epoch])
            sse += train_epoch(w, parts[-1], items, args, mu, step_size(args, epoch), progress)
        w.wait_all()
        if shares.backups:
            save(parts)
        test = [p.test_error(items, mu, args, problem.clip) for p in parts]
        assert s.reducer is not None  # (run_app made it before training)
        sums = s.reducer.sum(w, [sse, sum(len(p.train) for p in parts), sum(test), sum(len(p.test) for p in parts)])
        covered = {"ratings": int(sums[1])} if shares.backups else {}  # all of them, also when a node died
        s.report.epoch(
            w,
            epoch + 1,
            progress,
            train_rmse=np.sqrt(sums[0] / sums[1]),
            test_rmse=np.sqrt(sums[2] / max(sums[3], 1)),
            **covered,
            seconds=time.monotonic() - start,
        )
        s.checkpoint(w, epoch + 1, functools.partial(save, parts))
    progress.close()
    if args.out:
        for saved in [p.save(users_table()) for p in [part, *adopted.values()]]:
            saved.wait()
        w.barrier()


def _hottest(train: ratings.Ratings, n: int) -> np.ndarray:
    """The `n` items with the most training ratings (NuPS replicates these), sorted."""
    counts = np.bincount(train.items, minlength=train.n_items)
    return np.sort(np.argsort(-counts, kind="stable")[:n]).astype(np.int64)


def _with_bias(factors: np.ndarray, args) -> np.ndarray:
    return np.column_stack([factors, np.zeros(len(factors))]) if args.biases else factors


def main(argv: list[str] | None = None) -> int:
    """Run mf on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    try:
        problem = load(args)
    except DataError as exc:
        print(f"pskv run mf: error: {exc}", file=sys.stderr)
        return 2
    if args.lam is None:
        args.lam = 0.15 if args.schedule == "ccd" else 0.08
    if args.item_updater == "auto":
        args.item_updater = "adagrad" if args.data.startswith("zipf:") else "sgd"
    if args.schedule == "ccd":
        return common.run_app(
            "mf",
            args,
            metrics=1,
            setup=lambda s: mf_ccd.setup(s, problem, _ITEMS, _USERS_OUT),
            train=mf_ccd.train,
            finish=lambda st, wall: [*mf_ccd.summary(st, wall), *_finish(st, wall)],
        )
    return common.run_app("mf", args, metrics=4, setup=lambda s: _setup(s, problem), train=_work, finish=_finish)


def _finish(run: _Run | mf_ccd.State, wall: float) -> list[str]:
    """Node 0, after training: write --out; the summary lines (the last: the final test RMSE)."""
    s, problem = run.session, run.problem
    args, rows = s.args, s.report.rows
    if args.out:
        assert run.items is not None and run.users is not None  # (made for --out)
        _save(args, run.items, run.users, problem)
    baseline = float(np.sqrt(np.mean((problem.test.values - problem.train.values.mean()) ** 2)))
    last = rows[-1] if rows else {"train_rmse": float("nan"), "test_rmse": float("nan")}
    rate = (args.epochs - s.start_epoch) * len(problem.train) / max(wall, 1e-9)
    return [
        f"{s.node.num_nodes} node(s) x {s.threads} thread(s), {len(rows)} epochs in {wall:.1f} s "
        f"({rate:,.0f} ratings/s)",
        f"baseline (predict the mean rating): test RMSE {baseline:.4f}",
        f"train RMSE {last['train_rmse']:.4f}",
        f"test RMSE {last['test_rmse']:.4f}",
    ]


def _save(args, items: pskv.Table, users: pskv.Table, problem: mf_ccd.Problem) -> None:
    """Node 0's main thread, after training: the factors with the users' and items' ids of the input
    (pskv.data.trained: NAME.npy + NAME.tsv; the row index where the data had no ids), the biases as
    .npy, the rest in meta.json; pskv.apps.mf.load_factors reads them back."""
    train = problem.train
    mu = float(train.values.mean()) if args.global_mean else 0.0
    v = items.pull(np.arange(train.n_items))  # (n_items, rank + biases) float32
    u = users.pull(np.arange(train.n_users))  # (n_users, rank + 1) float32
    ids = [
        range(n) if tokens is None else tokens
        for tokens, n in ((train.user_tokens, train.n_users), (train.item_tokens, train.n_items))
    ]
    write_labelled(args.out, "user_factors", u[:, : args.rank], ids[0])
    write_labelled(args.out, "item_factors", v[:, : args.rank], ids[1])
    if args.biases:
        np.save(args.out / "user_bias.npy", u[:, args.rank])
        np.save(args.out / "item_bias.npy", v[:, args.rank])
    clip = [float(x) if np.isfinite(x) else None for x in problem.clip]  # JSON has no inf: None is unbounded
    write_json(
        args.out / "meta.json",
        {
            "global_mean": mu,
            "rank": args.rank,
            "biases": args.biases,
            "clip": clip,
            "data": args.data,
            "schedule": args.schedule,
        },
    )
    print(f"factors written to {args.out}/", flush=True)


if __name__ == "__main__":
    sys.exit(main())
