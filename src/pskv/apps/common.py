"""What every pskv app shares: flags, the skeleton of a run, progress, metrics across workers, report.

    python -m pskv.apps.mf --help        # the flags below, plus the app's own

API (stable; the apps import it, pskv demo uses Reducer, Report and Progress):

    p = common.parser("mf", "matrix factorization", epochs=10, techniques=True, resumable=True)  # + the app's flags
    args = common.arguments("mf", p, argv, check)  # one-line errors, exit 2; `pskv run` calls it before any node
    def setup(s: common.Session): ...      # collective: declare the tables; return what the workers share
    def train(w, state):                   # every worker thread of every node
        progress = common.Progress(w, total=..., scale=s.workers, mode=args.progress, watchdog=s.report.watchdog)
        for epoch in range(1, args.epochs + 1):
            ...; progress.update(len(batch))      # each update() tells the watchdog
            totals = s.reducer.sum(w, [sse, n])   # every worker calls it; every worker gets the sums
            s.report.epoch(w, epoch, progress, train_rmse=..., seconds=...)  # node 0 thread 0 prints, keeps it
    def finish(state, wall): ...           # node 0, the tables still up: returns the summary lines
    return common.run_app("mf", args, metrics=2, setup=setup, train=train, finish=finish)

Common flags (apps.arguments): --epochs, --seed, --plot FILE.png, --log FILE.jsonl, --progress
{auto,bar,log,lines,json,none}, --stall-timeout SECONDS (the Watchdog, which run_app turns on around
training; pass `watchdog=s.report.watchdog` to Progress; a node whose workers finish no batch for that
long exits 3), --stats; for the apps that use them (parser(techniques=True)) the Lapse/NuPS/Petuum
techniques --localize, --replicate N, --sampling {naive,preloc,pool,onlylocal}, --consistency
{async,bsp,ssp:S}, and (resumable=True) --checkpoint-dir, --checkpoint-every, --keep, --resume,
--backups. `--nodes`/`--threads` belong to `pskv run`, not to the app.

Progress: tqdm on stderr when it is a terminal, else one line every ~2 s with samples/s (`pskv launch`
forwards output line by line); `json` prints machine-readable lines tagged TAG on stdout (pskv demo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

import pskv

from ..errors import ConfigError
from .arguments import SCHEMES, arguments, at_least, check_resume, dims, newest_checkpoint, parser  # noqa: F401 - the API
from .metrics import STALL_STATUS, STALL_TIMEOUT, TAG, Progress, Reducer, Report, Watchdog, is_leader, say  # noqa: F401 - the API


class Clock:
    """Worker.clock() once per batch under --consistency bsp/ssp (Petuum's per-batch clock); under async
    it only counts. Workers of unequal shares run unequal numbers of batches, and a worker that stops
    clocking early would hold every other one at the staleness bound while it waits in a barrier for
    them: so each worker pad()s to the largest count of any worker before such a barrier."""

    def __init__(self, w: pskv.Worker, args: argparse.Namespace) -> None:
        self._tick = w.clock if getattr(args, "consistency", "async") != "async" else None
        self.count = 0  # clocks so far

    def tick(self) -> None:
        if self._tick is not None:
            self._tick()
        self.count += 1

    def pad(self, total: int) -> None:
        """Tick until `total` clocks (the same total on every worker) have been made."""
        while self.count < total:
            self.tick()


def add_prefetch(group, *, default: bool = True) -> None:
    """The --prefetch/--no-prefetch flag of the apps that pull the next batch's rows ahead (prefetches)."""
    group.add_argument(
        "--prefetch",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="pull the next batch's rows while this one trains (one batch stale at most; "
        "async consistency without --localize only, else the rows come when the batch starts)",
    )


def prefetches(args: argparse.Namespace) -> bool:
    """Whether a worker pulls the next batch's rows before training on this one. Not under BSP/SSP (the
    pull of the next batch would read before this batch's clock), nor with --localize or --intent (the
    next batch's keys are on their way here then, and its pulls become local once they land)."""
    return args.prefetch and args.consistency == "async" and not args.localize and not getattr(args, "intent", False)


def add_exchange(group) -> None:
    """The --exchange/--no-exchange flag of the apps that push a batch and pull a coming one together (exchanges)."""
    group.add_argument(
        "--exchange",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="push a batch's updates and pull a coming batch's rows in one exchange per node "
        "(table.exchange: half the messages of a push and a pull; async consistency without "
        "--localize, --intent or backups only, else a push and a pull)",
    )


def exchanges(args: argparse.Namespace, backups: bool) -> bool:
    """Whether a worker sends its batch's push with a coming batch's pull (table.exchange) instead of the two
    apart: asynchronous consistency, no --localize or --intent (the keys come here then), no backups (an
    exchange there waits for the push's ACK before it pulls, which a push alone does not)."""
    return (
        getattr(args, "exchange", False)
        and args.consistency == "async"
        and not args.localize
        and not getattr(args, "intent", False)
        and not backups
    )


def relocation_note(app: str, p: np.ndarray, draws: int) -> str | None:
    """A warning when relocating a batch's keys will thrash. `p`: the probability that one draw hits
    each row relocation may move (replicated rows left out, so `p` may sum to less than 1); `draws`:
    rows drawn per batch and worker. When they are expected to hit most of those rows, every worker
    moves most rows to its node once per batch and the others take them back (measured: 7-35x slower
    than without; benchmarks/RESULTS.md). None when they hit under half."""
    p = np.minimum(np.asarray(p, np.float64), 1 - 1e-12)
    if not len(p) or draws < 1:
        return None
    hit = float(np.sum(-np.expm1(draws * np.log1p(-p)))) / len(p)  # expected share of rows hit at least once
    if hit < 0.5:
        return None
    return (
        f"{app}: note: each batch of each worker touches about {100 * hit:.0f}% of the {len(p):,} rows "
        "that relocation may move, so they will move back and forth between the nodes every batch (slow; "
        "relocation pays when a batch touches a small part of a table); replication is the cheap technique here"
    )


def placement(args: argparse.Namespace) -> pskv.Relocate:
    """The tables' pskv.Relocate from --lease and --location-caches: pskv's lease unless given; location
    caches on when keys move (--localize, --sampling preloc/pool): once keys left their managers, a pull
    without one goes through the manager, which forwards it (measured, KGE 4 nodes: 3-4x the messages)."""
    kw = {}
    if args.lease is not None:
        kw["lease"] = args.lease
    moves = (
        getattr(args, "localize", False)
        or getattr(args, "intent", False)
        or getattr(args, "sampling", None) in ("preloc", "pool")
    )
    kw["location_caches"] = moves if args.location_caches is None else args.location_caches == "on"
    return pskv.Relocate(**kw)


# ---- the skeleton of every app on one node -------------------------------------------------------------------
@dataclasses.dataclass
class Session:
    """One app run on this node, made by run_app: what the node's worker threads share besides the
    app's own state (they only read it)."""

    args: argparse.Namespace
    node: pskv.Node
    report: Report
    reducer: Reducer | None = None  # sums of run_app's `metrics` numbers over every worker; made after setup()
    start_epoch: int = 0  # epochs done before (--resume: those of the checkpoint)

    @property
    def threads(self) -> int:
        """Worker threads per node."""
        return self.node.config.threads

    @property
    def workers(self) -> int:
        """Worker threads in the cluster."""
        return self.node.num_nodes * self.threads

    def index(self, w: pskv.Worker) -> int:
        """Worker `w`'s number among every worker, 0 .. workers - 1, node by node."""
        return w.rank * self.threads + w.thread

    @property
    def resumed(self) -> bool:
        return self.start_epoch > 0

    def checkpoint(self, w: pskv.Worker, epoch: int, save: Callable[[], None] | None = None) -> None:
        """After epoch `epoch` (1-based) every worker calls it: with --checkpoint-dir, every
        --checkpoint-every epochs and after the last, each worker runs `save()` (what it keeps
        outside the tables goes into one), then thread 0 of each node writes a checkpoint between
        two barriers (so it holds exactly the epochs done), recording the epoch to resume after."""
        args = self.args
        directory = getattr(args, "checkpoint_dir", None)  # (an app that is not resumable has none)
        if directory is None or not (epoch % max(args.checkpoint_every, 1) == 0 or epoch == args.epochs):
            return
        if save is not None:
            save()
        w.barrier()  # every worker's writes of this epoch are in
        if w.thread == 0:
            info = self.node.checkpoint(args.checkpoint_dir, keep=args.keep, extra={"epoch": epoch})
            if is_leader(w):
                print(f"checkpoint {info.path} (epoch {epoch})", file=sys.stderr, flush=True)
        w.barrier()  # no worker writes before every node's checkpoint is complete


class Shares:
    """Which parts of the training data a worker trains on. There are W parts (one per worker at
    start, by Session.index); each worker trains on its own. With backups, when a node dies its
    workers' parts are split among the live workers: live worker j of L takes piece j of L of
    every dead part, so every epoch still covers all the data (as the Li et al. scheduler hands a
    dead worker's data to others). Per epoch:

        pieces = shares.pieces()          # (part, j, L) of dead parts this worker takes now
        ... train on its own part and each piece ...
        for piece in shares.late(w, pieces): ... train on it too ...   # nodes that died meanwhile
        totals = s.reducer.sum(w, ...)

    `late` waits in a barrier first (only with backups): a death before every live worker arrived
    is known to all when it returns (the coordinator's MEMBERSHIP precedes the barrier's release);
    one after it took no data from this epoch with it."""

    def __init__(self, s: Session, w: pskv.Worker) -> None:
        self.me, self.parts, self.threads = s.index(w), s.workers, s.threads
        self.backups = bool(s.node.config.backups)
        self._w = w

    def pieces(self) -> list[tuple[int, int, int]]:
        """(part, j, L): piece j of L of each dead worker's part that this worker takes now."""
        members = self._w.members
        live = [r * self.threads + t for r in members for t in range(self.threads)]
        if len(live) == self.parts or self.me not in live:
            return []
        j = live.index(self.me)
        return [(p, j, len(live)) for p in range(self.parts) if p // self.threads not in members]

    def among_live(self) -> tuple[int, int]:
        """(j, L): this worker's place among the L live workers, for work split anew each time (evaluation)."""
        live = [r * self.threads + t for r in self._w.members for t in range(self.threads)]
        return (live.index(self.me), len(live)) if self.me in live else (self.me, self.parts)

    def late(self, w: pskv.Worker, done: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """After a barrier (with backups): the pieces of parts whose node died during this epoch."""
        if not self.backups:
            return []
        w.barrier()
        return [piece for piece in self.pieces() if piece not in done]


def piece(lo: int, hi: int, j: int, pieces: int) -> tuple[int, int]:
    """Positions [a, b) of piece j of `pieces` about equal runs of [lo, hi)."""
    return lo + (hi - lo) * j // pieces, lo + (hi - lo) * (j + 1) // pieces


State = TypeVar("State")  # what an app's setup() makes and its train/finish/then take


def run_app(
    app: str,
    args: argparse.Namespace,
    *,
    metrics: int,
    setup: Callable[[Session], State],
    train: Callable[[pskv.Worker, State], None],
    finish: Callable[[State, float], list[str] | None],
    then: Callable[[State, list[str]], list[str]] | None = None,
) -> int:
    """Run `app` on this node; returns the exit status (0). What the apps share:

    1. join the cluster (pskv.init, with --consistency) and make the Report;
    2. state = setup(session): declare the tables (collective: every node alike), print node 0's header;
       then the session's Reducer of `metrics` numbers;
    3. train(w, state) on every worker thread of the node, under the --stall-timeout watchdog;
    4. on node 0: lines = finish(state, wall seconds of step 3), the tables still up (final pulls, --out);
    5. leave the cluster; then on node 0 lines = then(state, lines) if given (work that must not hold the
       other nodes: word2vec's gensim comparison), and print the summary `lines` (None: none), write --log, --plot.
    An exception (a worker's included) stops the node, which tells the others, and propagates."""
    report, lines = Report(app, args), None
    consistency = getattr(args, "consistency", "async")
    model = {} if consistency == "async" else {"consistency": consistency}  # async: PSKV_CONSISTENCY's
    if getattr(args, "backups", None) is not None:
        model["backups"] = args.backups
    fresh = False  # --resume with no complete checkpoint yet: start at epoch 1 (every node finds the same)
    if getattr(args, "resume", False):
        if args.checkpoint_dir is None:
            raise ConfigError(f"{app}: --resume needs --checkpoint-dir DIR (where the run saves its checkpoints)")
        fresh = newest_checkpoint(args.checkpoint_dir) is None
        if not fresh:
            model["restore"] = str(args.checkpoint_dir)
    with pskv.init(**model) as node:  # pskv parses 'bsp' and 'ssp:S'
        if fresh and node.rank == 0:
            print(f"{app}: --resume: no checkpoint in {args.checkpoint_dir} yet; starting at epoch 1", flush=True)
        if node.config.backups and consistency != "async":
            raise ConfigError(
                f"{app}: --backups works with --consistency async only for now: the workers that take "
                "over a dead node's data would run more clocks than the others wait for"
            )
        session = Session(args, node, report, start_epoch=int(node.restored.get("epoch", 0)))
        if session.resumed and node.rank == 0:
            print(f"{app}: resumed from {node.config.restore} after epoch {session.start_epoch}", flush=True)
        state = setup(session)
        session.reducer = Reducer(node, size=metrics)  # after the app's tables, whose ids seed pskv's sampling
        start = time.monotonic()
        with report.watchdog:  # a worker blocked for --stall-timeout stops the node, never a hang
            node.run(lambda w: train(w, state))
        if args.stats:  # one line per node: its counters after training
            print("@@stats " + json.dumps(node.stats()), flush=True)
        if node.rank == min(node.members):  # node 0, unless it died (backups)
            lines = finish(state, time.monotonic() - start)
    if lines is not None:
        report.summary(then(state, lines) if then is not None else lines)
    return 0
