"""mf's training (apps.mf): a worker's users and their ratings, an epoch of the free or the DSGD schedule,
and the batches of SGD with their pulls and pushes of the item table."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

import pskv

from ..data import Lookahead, ratings
from . import common
from .mf_data import Problem
from .mf_model import catch_up, gradient_batch, sgd_batch, squared_error


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
        self.most = most_batches(problem.train, workers, args.batch)  # (W + 1,) see most_batches
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


def most_batches(train: ratings.Ratings, workers: int, batch: int) -> np.ndarray:
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
        sse = train_batches(part, items, part.rng.permutation(len(part.train)), args, mu, lr, progress)
        clock.pad(start + part.most[0])  # as many clocks as the worker with the most batches
        return sse
    sse = 0.0
    for sub in range(part.workers):
        block = (part.me + sub) % part.workers
        if args.localize:  # Lapse: the block's items move here, so every access below is local
            items.localize(np.arange(*part.block_range(block))).wait()
        mine = np.flatnonzero(part.blocks == block)
        start = clock.count
        sse += train_batches(part, items, mine[part.rng.permutation(len(mine))], args, mu, lr, progress)
        clock.pad(start + part.most[1 + sub])  # every worker clocks as often before the barrier
        w.barrier()
    return sse


def train_batches(
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
