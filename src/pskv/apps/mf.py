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
hosts an item row then crosses the network once per sub-epoch instead of once per batch, at the same
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

import pskv

from ..data import DataError, Lookahead, fetch, lapse_toy_dir, ratings
from ..data.trained import Factors, load_factors, write_json, write_labelled  # noqa: F401 - the app's loader
from ..errors import ConfigError
from . import common, mf_ccd
from .mf_model import catch_up, gradient_batch, sgd_batch, squared_error

_ITEMS = "mf-items"
_USERS_OUT = "mf-users-out"


def _parser() -> argparse.ArgumentParser:
    p = common.parser(
        "mf", "matrix factorization by SGD on a parameter server", epochs=30, techniques=True, resumable=True
    )
    g = p.add_argument_group("mf")
    g.add_argument(
        "--data",
        default="ml-100k",
        help="ml-100k, lapse-toy, zipf:ROWSxCOLSxNNZ, or a ratings file: .inter (RecBole), .mmc, or a "
        "CSV/TSV/space-separated table of user, item, rating (a header line is detected; any ids)",
    )
    g.add_argument("--max-ratings", type=int, default=0, help="use only this many ratings (a seeded sample; 0: all)")
    g.add_argument("--test-fraction", type=float, default=0.1, help="held-out share (not lapse-toy)")
    g.add_argument("--rank", type=int, default=100, help="latent factors per user and item")
    g.add_argument(
        "--lambda",
        dest="lam",
        type=float,
        default=None,
        help="L2 on the factors (default 0.08 per SGD step; ccd: 0.15 x the ratings of a row)",
    )
    g.add_argument("--lambda-bias", type=float, default=0.02, help="L2 on the biases")
    g.add_argument("--init-step-size", type=float, default=0.01, help="x in x * (y + t)^-z")
    g.add_argument("--step-size-offset", type=float, default=1.0, help="y")
    g.add_argument("--step-size-pow", type=float, default=0.0, help="z (0: a constant step size)")
    g.add_argument("--init-std", type=float, default=0.1, help="std of the initial factors")
    g.add_argument(
        "--biases",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="learn a bias per user and per item (b_u, b_i)",
    )
    g.add_argument(
        "--global-mean",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="predict around the mean training rating (mu)",
    )
    g.add_argument("--batch", type=int, default=1000, help="ratings per pull/push round")
    g.add_argument(
        "--schedule",
        choices=["auto", "free", "dsgd", "ccd"],
        default="auto",
        help="free: each worker its ratings in random order (Hogwild-like); dsgd: item blocks "
        "rotate over the workers, one barrier per block (Lapse's MF; with --localize every "
        "item access is local); ccd: model-parallel CCD++ on the STRADS-style scheduler, one "
        "latent column at a time, item blocks per round (apps.mf_ccd); auto: dsgd with --localize "
        "on more than one node (an item row then crosses the network once per block, not once per "
        "batch: the same test RMSE at a fraction of the CPU), unless --backups, --intent, "
        "--replicate, --storage disk or --consistency bsp/ssp ask for free, which auto is on one node",
    )
    g.add_argument("--ccd-blocks", type=int, default=16, help="ccd: item blocks (the scheduler's coordinates)")
    g.add_argument("--ccd-per-round", type=int, default=8, help="ccd: item blocks updated in parallel per round")
    g.add_argument(
        "--ccd-policy",
        default="cyclic",
        help="ccd: cyclic (blocks rotate in order), strads (by the size of their last change) or shotgun (at random)",
    )
    g.add_argument(
        "--item-updater",
        choices=["auto", "sgd", "adagrad"],
        default="auto",
        help="sgd: push each item's change after sequential SGD on the batch; adagrad: push the "
        "batch's gradient to a server-side Adagrad (Lapse's MF; stable on very hot items); "
        "auto: adagrad on zipf data, else sgd",
    )
    g.add_argument("--adagrad-lr", type=float, default=0.1, help="step size of the item Adagrad")
    g.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the factors here: user_factors.npy/.tsv (the "
        "rows, the users' ids), item_factors.npy/.tsv, biases, "
        "meta.json (pskv.apps.mf.load_factors reads it)",
    )
    common.add_prefetch(g)
    common.add_exchange(g)
    g.add_argument(
        "--storage",
        choices=["memory", "disk"],
        default="memory",
        help="disk: the item table's rows in files under --storage-path, at most --cache-rows in memory",
    )
    g.add_argument("--storage-path", type=Path, metavar="DIR", help="directory of the item rows (--storage disk)")
    g.add_argument("--cache-rows", type=int, default=100_000, help="item rows kept in memory (--storage disk)")
    return p


@dataclasses.dataclass
class Problem:
    """What every node loads identically: the split, the rating scale and optional initial factors."""

    name: str
    train: ratings.Ratings
    test: ratings.Ratings
    clip: tuple[float, float]  # predictions are clipped to the rating scale (inf: none)
    user_init: np.ndarray | None = None  # (n_users, rank) Lapse's W.mma
    item_init: np.ndarray | None = None  # (n_items, rank) Lapse's H.mma, transposed


def load(args: argparse.Namespace) -> Problem:
    """The data set of --data, split as the flags say. Raises DataError."""
    if args.data == "ml-100k":
        r = ratings.load_inter(fetch("ml-100k", quiet=True) / "ml-100k.inter")
        return Problem(
            "MovieLens-100K",
            *ratings.split(_sample(r, args), test_fraction=args.test_fraction, seed=args.seed),
            clip=(1.0, 5.0),
        )
    if args.data == "lapse-toy":
        d = lapse_toy_dir() / "mf"
        train, test = ratings.load_mmc(d / "train.mmc"), ratings.load_mmc(d / "test.mmc")
        w, h = ratings.load_mma(d / "W.mma"), ratings.load_mma(d / "H.mma")
        fits = w.shape[1] == args.rank
        return Problem("Lapse toy", train, test, (-np.inf, np.inf), w if fits else None, h.T if fits else None)
    if args.data.startswith("zipf:"):
        try:
            rows, cols, nnz = (int(x) for x in args.data[5:].lower().split("x"))
        except ValueError:
            raise DataError(f"--data {args.data!r}: write zipf:ROWSxCOLSxNNZ, e.g. zipf:10000x5000x1000000") from None
        r = ratings.zipf_ratings(rows, cols, nnz, seed=args.seed)
        return Problem(
            f"zipf {rows:,} x {cols:,}",
            *ratings.split(r, test_fraction=args.test_fraction, seed=args.seed),
            clip=(-np.inf, np.inf),
        )
    path = Path(args.data)
    if not path.is_file():
        raise DataError(f"--data {args.data!r} is not ml-100k, lapse-toy, zipf:ROWSxCOLSxNNZ nor a file of ratings")
    r = _sample(ratings.load_file(path), args)  # predictions are clipped to the range of the ratings
    return Problem(
        path.name,
        *ratings.split(r, test_fraction=args.test_fraction, seed=args.seed),
        clip=(float(r.values.min()), float(r.values.max())),
    )


def _sample(r: ratings.Ratings, args) -> ratings.Ratings:
    if not 0 < args.max_ratings < len(r):
        return r
    keep = np.random.default_rng([args.seed, 1]).permutation(len(r))[: args.max_ratings]
    return r.take(np.sort(keep))


def step_size(args, t: int) -> float:
    """x * (y + t)^-z at epoch t (0-based)."""
    return args.init_step_size * (args.step_size_offset + t) ** -args.step_size_pow


# ---- one worker --------------------------------------------------------------------------------
class Part:
    """A worker's users: their ratings (with local user ids = u // W), factors and biases."""

    def __init__(self, problem: Problem, me: int, workers: int, args, piece: tuple[int, int] | None = None) -> None:
        """Worker `me`'s users; with `piece` (j, L) only those whose local id is j mod L (a dead
        worker's part, split among L live workers: common.Shares)."""
        self.me, self.workers, self.n_items = me, workers, problem.train.n_items
        j, pieces = piece or (0, 1)
        train, test = problem.train, problem.test
        self.train = train.take((train.users % workers == me) & (train.users // workers % pieces == j))
        self.test = test.take((test.users % workers == me) & (test.users // workers % pieces == j))
        self.train_users, self.test_users = self.train.users // workers, self.test.users // workers
        n_local = len(range(me, problem.train.n_users, workers))
        self.local = np.arange(j, n_local, pieces)  # local ids of the users this part trains
        if problem.user_init is not None:
            self.U = problem.user_init[me::workers].astype(np.float32)  # (n_local, rank)
        else:
            rng = np.random.default_rng([args.seed, 7, me])
            self.U = rng.normal(0, args.init_std, (n_local, args.rank)).astype(np.float32)
        self.bu = np.zeros(n_local, np.float32)
        self.clock: common.Clock | None = None  # ticks once per batch (Worker.clock under --consistency bsp/ssp)
        self.exchange = False  # push each batch with a coming batch's pull (common.exchanges; set by _work)
        self.most = _most_batches(problem.train, workers, args.batch)  # (W + 1,) see _most_batches
        self.piece = piece or ()
        self.rng = np.random.default_rng([args.seed, 11, me, *self.piece])  # reseeded each epoch (see _work)
        self.blocks = self.train.items * workers // self.n_items  # (nnz,) item block of each rating

    def save(self, users: pskv.Table):
        """Write this part's user factors and biases to the users table (a Future)."""
        return users.set(
            self.me + self.local * self.workers, np.column_stack([self.U[self.local], self.bu[self.local]])
        )

    def load(self, users: pskv.Table) -> Part:
        """Take this part's user factors and biases from the users table (what their last worker saved)."""
        rows = users.pull(self.me + self.local * self.workers)
        self.U[self.local], self.bu[self.local] = rows[:, :-1], rows[:, -1]
        return self

    def block_range(self, block: int) -> tuple[int, int]:
        """Items [lo, hi) of DSGD block `block`: contiguous, like the table's key ranges."""
        return -(-block * self.n_items // self.workers), -(-(block + 1) * self.n_items // self.workers)

    def test_error(self, items: pskv.Table, mu: float, args, clip) -> float:
        if len(self.test) == 0:
            return 0.0
        keys, slots = np.unique(self.test.items, return_inverse=True)
        V = items.pull(keys)  # (n_distinct, rank + biases) float32
        return squared_error(
            self.U, self.bu, self.test_users, slots.astype(np.int64), self.test.values, V, mu, args.biases, *clip
        )


def _most_batches(train: ratings.Ratings, workers: int, batch: int) -> np.ndarray:
    """(W + 1,) int64: the most batches any worker runs in a free-schedule epoch, then in each DSGD
    sub-epoch s (worker m takes users u % W == m and item block (m + s) mod W), so that every worker
    pads its clocks to the same count."""
    owner = train.users % workers
    block = train.items * workers // train.n_items
    per_block = np.bincount(owner * workers + block, minlength=workers * workers).reshape(workers, workers)
    per_sub = [per_block[np.arange(workers), (np.arange(workers) + s) % workers] for s in range(workers)]
    counts = [np.bincount(owner, minlength=workers), *per_sub]  # ratings per worker
    return np.array([-(-int(c.max()) // batch) for c in counts], np.int64)


def train_epoch(
    w: pskv.Worker, part: Part, items: pskv.Table, args, mu: float, lr: float, progress: common.Progress
) -> float:
    """One pass over this worker's ratings; returns the squared training error. `--schedule free`:
    all of them in random order. `dsgd`: W sub-epochs; in sub-epoch s worker `me` takes the ratings
    of item block (me + s) mod W, so no two workers share an item, with a barrier after each."""
    clock = part.clock
    assert clock is not None  # (_work gave the part its worker's clock)
    if args.schedule == "free":
        start = clock.count
        sse = _train(part, items, part.rng.permutation(len(part.train)), args, mu, lr, progress)
        clock.pad(start + part.most[0])  # as many clocks as the worker with the most batches
        return sse
    sse = 0.0
    for sub in range(part.workers):
        block = (part.me + sub) % part.workers
        if args.localize:  # Lapse: the block's items move here, so every access below is local
            items.localize(np.arange(*part.block_range(block))).wait()
        mine = np.flatnonzero(part.blocks == block)
        start = clock.count
        sse += _train(part, items, mine[part.rng.permutation(len(mine))], args, mu, lr, progress)
        clock.pad(start + part.most[1 + sub])  # every worker clocks as often before the barrier
        w.barrier()
    return sse


def _train(
    part: Part, items: pskv.Table, order: np.ndarray, args, mu: float, lr: float, progress: common.Progress
) -> float:
    """SGD over the ratings `order` (positions in part.train) in batches of --batch. With prefetch
    (common.prefetches) a batch's rows are pulled a batch ahead, so that their round trip passes during
    the kernel before it; they then miss that batch's push, which the `add` updater's rows get back
    exactly (mf_model.catch_up), the Adagrad ones a batch later (one batch stale, Hogwild-like). With
    exchange (common.exchanges, `Part.exchange`) a batch's push leaves with the pull of the batch two on
    (with prefetch; of the next one without), in one message per node (table.exchange): those rows hold
    that push, and miss the one of the batch between, as above."""
    sse = 0.0
    size = args.batch
    ahead = args.localize and args.schedule == "free"  # relocate the next batch's items while on this one
    prefetch, exchange, clock = common.prefetches(args), part.exchange, part.clock
    assert clock is not None  # (_work gave the part its worker's clock)
    pulled: dict[int, tuple] = {}  # batch start -> (keys, slots, Future of the rows, whether they miss the last push)
    last: tuple = ()  # (keys, change) pushed by the batch before

    def ask(lo: int, stale: bool, push: tuple = ()) -> None:
        keys, slots = np.unique(part.train.items[order[lo : lo + size]], return_inverse=True)
        rows = items.exchange(push[0], push[1], keys, copy=False) if push else items.pull_async(keys)
        pulled[lo] = (keys, slots, rows, stale)

    starts: Iterable[int] = range(0, len(order), size)
    if getattr(args, "intent", False):  # each batch's items signaled --ahead batches early (AdaPM's intents)
        starts = Lookahead(starts, lambda lo: {items: part.train.items[order[lo : lo + size]]}, ahead=args.ahead)
    if exchange and prefetch and size < len(order):  # the second batch's rows come while the first trains
        ask(size, True)
    for lo in starts:
        b = order[lo : lo + size]
        if ahead and lo + size < len(order):
            items.localize(np.unique(part.train.items[order[lo + size : lo + 2 * size]]))
        if lo in pulled:
            keys, slots, rows, stale = pulled.pop(lo)
            V = rows.wait()  # (n_distinct, rank + biases) float32, a copy
            if stale and args.item_updater == "sgd":  # the add updater: this worker's last change, exactly
                catch_up(V, keys, *last)
        else:
            keys, slots = np.unique(part.train.items[b], return_inverse=True)
            V = items.pull(keys)
        if prefetch and not exchange and lo + size < len(order):  # one batch ahead at most, never across _train's end
            ask(lo + size, True)
        batch = (
            part.train_users[b],
            slots.astype(np.int64),
            part.train.values[b],
            V,
            mu,
            lr,
            args.lam,
            args.lambda_bias,
            args.biases,
        )
        if args.item_updater == "sgd":
            before = V.copy()
            sse += sgd_batch(part.U, part.bu, *batch)
            update = V - before
        else:
            update = np.zeros_like(V)
            sse += gradient_batch(part.U, part.bu, *batch, update)
        coming = lo + (2 if prefetch else 1) * size
        if exchange and coming < len(order):
            ask(coming, prefetch, (keys, update))
        else:
            items.push(keys, update, copy=False)  # a fresh array: nobody writes it afterwards
        last = (keys, update)
        clock.tick()  # --consistency bsp/ssp: one clock per batch (Petuum's per-batch clock)
        progress.update(len(b))
    return sse


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


_NAMED = ("ml-100k", "lapse-toy")  # --data sets by name; else zipf:... or a file


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check mf's arguments (`pskv run mf` calls it before any node starts): a mistake in a
    flag, a --data that names no data set or file, or a --resume checkpoint of another --rank ends the
    run in one line with status 2 (common.arguments); a resumed run already at --epochs exits 0."""
    return common.arguments("mf", _parser(), argv, _check)


def _check(args: argparse.Namespace) -> str | None:
    common.at_least(args, 1, "--epochs", "--rank", "--batch", "--checkpoint-every", "--keep")
    if args.sampling not in (None, "naive"):
        raise ConfigError("--sampling: mf draws no negative samples; drop the flag")
    if args.step_size_pow > 0 and args.step_size_offset <= 0:
        raise ConfigError("--step-size-pow > 0 needs --step-size-offset > 0")
    if not 0 <= args.test_fraction < 1:
        raise ConfigError(f"--test-fraction {args.test_fraction} must be in [0, 1)")
    if args.data not in _NAMED and not args.data.startswith("zipf:") and not Path(args.data).is_file():
        raise DataError(f"--data {args.data!r} is not ml-100k, lapse-toy, zipf:ROWSxCOLSxNNZ nor a file of ratings")
    if args.storage == "disk" and args.storage_path is None:
        raise ConfigError("--storage disk needs --storage-path DIR (where each node keeps its item rows)")
    if args.schedule == "ccd":
        mf_ccd.check(args)
    updater = (
        "adagrad"
        if args.item_updater == "adagrad" or (args.item_updater == "auto" and args.data.startswith("zipf:"))
        else "add"
    )
    return common.check_resume(args, lambda tables: _compatible(args, tables, updater))


def _compatible(args: argparse.Namespace, tables: dict, updater: str) -> str | None:
    """What of --rank, --biases, --item-updater does not fit a checkpoint's tables (check_resume)."""
    users = tables.get(_USERS_OUT)  # its rows: the rank's factors and a bias, whatever --biases said
    if _ITEMS not in tables or users is None:
        return f"--checkpoint-dir does not match mf: no mf tables but {', '.join(sorted(tables)) or 'none'}"
    rank = int(users["dim"]) - 1
    if rank != args.rank:
        return f"--rank {args.rank} does not match {rank}"
    if int(tables[_ITEMS]["dim"]) != args.rank + args.biases:
        return "--biases does not match --no-biases" if args.biases else "--no-biases does not match --biases"
    theirs = (tables[_ITEMS].get("updater") or {}).get("name", "add")
    if theirs != updater:  # (--item-updater sgd makes an `add` table)
        flag = {"add": "sgd"}
        return f"--item-updater {flag.get(updater, updater)} does not match {flag.get(theirs, theirs)}"
    return None


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
