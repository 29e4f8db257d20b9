"""Knowledge-graph embeddings: ComplEx and DistMult with negative sampling, trained through pskv.

    pskv run kge -- --data nations                                   # 1 node x 1 thread
    pskv run kge --nodes 2 --threads 2 -- --data umls --epochs 40    # 2 local nodes x 2 threads
    pskv launch -n 2 --threads 2 -- python -m pskv.apps.kge --data lapse-toy --dim 200 --neg 6

Entities and relations are two pskv tables (`entities`, `relations`) with the server-side
updater pskv.Adagrad. Each worker thread of each node trains on its share of the training
triples (a contiguous slice of a seeded shuffle; Lapse's toy data keeps its file order): per batch
it draws `--neg` negative entities per positive for each side (tail and head corruption), uniform
over entities: by default the app draws them (the naive scheme) and pulls the batch's distinct
entities in one pull when the batch starts (`--prefetch`: while the batch before trains, its
rows one batch stale); `--intent` signals each batch's entities (negatives drawn then) and relations
`--ahead` batches early (pskv.data.Lookahead), and the keys' managers move those one node intends;
`--sampling` takes them from pskv's sampling API (each handle prepared one
batch ahead so that preloc and pool localize meanwhile); with no --sampling a run of more than one node
draws them among the entities its node holds (onlylocal: auto_sampling). It runs a numba kernel for scores, loss
and gradients, and pushes the gradients. `--localize` moves the next
batch's entities and relations to the worker's node ahead of use (Lapse), `--replicate N` keeps the
N hottest rows of both tables on every node (NuPS): the relations first (each triple uses one, and
there are few), then the most frequent entities. Evaluation (filtered MRR, Hits@1/3/10, the other
true answers of train+valid+test removed) is split over every worker and summed: valid every
`--eval-every` epochs, test at the end.

Models: `--dim` is the number of floats per row. DistMult scores sum(h*r*t); ComplEx keeps dim/2
complex numbers as [real | imaginary] and scores Re(sum(h*r*conj(t))).

`--data` also takes a path (pskv.data.kg.load_path): a directory of train/valid/test triples (pykeen's
.txt, LibKGE's .del with entity_ids.del) or one file of `head<TAB>relation<TAB>tail` lines, split by
--seed. `--out DIR` writes the trained rows with their names (entities.npy + entities.tsv, relations.npy +
relations.tsv, meta.json: pskv.data.trained); `load_embeddings(DIR)` reads them back in a plain process:

    pskv run kge -- --data my-kg/ --epochs 20 --out emb/
    python -c "from pskv.apps.kge import load_embeddings; print(load_embeddings('emb'))"
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pskv

from ..data.fetch import DataError
from ..data.kg import KG, Filter, load
from ..data.trained import Embeddings, load_embeddings, write_json, write_labelled  # noqa: F401 - the app's loader
from . import common, kge_args, kge_train
from .kge_args import check
from .kge_model import batch_grads, compose, evaluate  # noqa: F401 - compose: the app's model, for users
from .kge_train import Rows, train_epoch
from .negatives import Negatives

_parser, _REGS, _epoch = kge_args.parser, kge_args.REGS, kge_train.train_epoch  # (tests and benchmarks use them)

# ---- distributed training ------------------------------------------------------------------------------------


@dataclass
class _Run:
    """What every worker thread of a node shares; `final` is written by node 0's thread 0 only."""

    session: common.Session
    kg: KG
    train: np.ndarray  # (n, 3) int64 in the order the workers split it
    filt: Filter
    tables: tuple  # node 0's main-thread handles of (entities, relations), for --out
    final: dict = field(default_factory=dict)


ONLYLOCAL_MIN = 500  # entities per node at least for the onlylocal default: among fewer the negatives are too few
# (Nations, 14 entities, 2 nodes: test MRR 0.60 against 0.38 random, below what naive reaches), and such a table is
# small enough that its traffic costs little


def auto_sampling(args: argparse.Namespace, nodes: int, entities: int) -> bool:
    """With no --sampling, a run of more than one node draws each worker's negatives among the entities its node
    holds (onlylocal; issue 31): uniform negatives touch a third of the entity rows per batch (6,400 draws of
    20,000), so with naive sampling about half of them cross the network each batch, pull and push, which
    costs 2-3x one process's CPU across hosts; among the node's own entities none does. Measured: the same
    training loss on random:20000,20,40000; on umls (135 entities) test MRR 0.930 against naive's 0.944, 3 seeds
    (benchmarks/RESULTS.md, "Efficiency across 2 emulated hosts"). One node, fewer than ONLYLOCAL_MIN entities per
    node, or --localize or --intent (they bring the rows a batch uses, negatives too, to the node): naive. True
    when it chose onlylocal."""
    if args.sampling is not None or nodes < 2 or args.localize or args.intent or entities < ONLYLOCAL_MIN * nodes:
        return False
    args.sampling = "onlylocal"
    return True


def _setup(s: common.Session, kg: KG) -> _Run:
    """Declare the tables (collective); node 0 prints what runs."""
    args, node = s.args, s.node
    auto = auto_sampling(args, node.num_nodes, kg.num_entities)
    init = pskv.Normal(std=args.init_std, seed=args.seed)
    hot_ent, hot_rel = _hottest(kg, args.replicate)
    extra: dict[str, Any] = {"replicate": pskv.Replicate(keys=hot_ent)} if len(hot_ent) else {}
    extra["placement"] = common.placement(args)
    sampling = pskv.Sampling(
        np.ones(kg.num_entities), scheme=args.sampling or "naive", reuse=args.reuse, seed=args.seed
    )  # uniform negatives
    ent = node.table(
        "entities",
        rows=kg.num_entities,
        dim=args.dim,
        updater=pskv.Adagrad(lr=args.lr),
        init=init,
        sampling=sampling,
        **extra,
    )
    rel = node.table(
        "relations",
        rows=kg.num_relations,
        dim=args.dim,
        updater=pskv.Adagrad(lr=args.lr),
        init=init,
        placement=extra["placement"],
        replicate=pskv.Replicate(keys=hot_rel) if len(hot_rel) else None,
    )
    keep_order = args.data == "lapse-toy"  # Lapse's partitioned files are ordered for the workers
    train = kg.train if keep_order else kg.train[np.random.default_rng(args.seed).permutation(len(kg.train))]
    if node.rank == 0:
        print(
            f"kge: {args.model} on {kg!r}, dim {args.dim}, {args.neg} negatives per side, "
            f"{node.num_nodes} node(s) x {s.threads} thread(s), negatives {args.sampling or 'naive'}"
            f"{' (auto; --sampling naive draws among all entities)' if auto else ''}",
            flush=True,
        )
        draws = args.batch * 2 * args.neg if args.sampling in ("preloc", "pool") else 0  # uniform negatives
        movable = np.setdiff1d(np.arange(kg.num_entities), hot_ent)
        note = node.num_nodes > 1 and common.relocation_note("kge", np.full(len(movable), 1 / kg.num_entities), draws)
        if note:
            print(note, flush=True)
    return _Run(s, kg, train, Filter(kg.all_triples(), kg.num_entities, kg.num_relations), (ent, rel))


def _lapse(args) -> KG:
    """Lapse's toy data, with --train-file (e.g. the partitioned order) as the train split."""
    from ..data.fetch import lapse_toy_dir
    from ..data.kg import load_lapse

    return load_lapse(lapse_toy_dir() / "kge", train_file=args.train_file, name="lapse-toy")


def _hottest(kg: KG, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n hottest keys over both tables, as (entities, relations), each ascending: the keys that
    `--replicate n` replicates (NuPS). A relation row is used once per triple, an entity row twice per
    triple it occurs in (plus uniform negatives, the same for every entity), so the relations, far
    fewer than the entities, are usually the hottest rows by far."""
    if n <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ent = np.bincount(kg.train[:, [0, 2]].ravel(), minlength=kg.num_entities)
    rel = np.bincount(kg.train[:, 1], minlength=kg.num_relations)
    counts = np.concatenate([rel, ent])  # relations first: they win ties
    top = np.sort(np.argsort(-counts, kind="stable")[:n])
    return top[top >= kg.num_relations] - kg.num_relations, top[top < kg.num_relations]


def _train(w: pskv.Worker, run: _Run) -> None:
    """A worker thread: its share of the triples for every epoch, then its share of each evaluation."""
    s, kg = run.session, run.kg
    args, me = s.args, s.index(w)
    bounds = np.linspace(0, len(run.train), s.workers + 1).astype(np.int64)
    mine = run.train[bounds[me] : bounds[me + 1]]  # (n, 3) int64
    ent, rel = w.table("entities"), w.table("relations")
    uniform = lambda draw_rng, k: draw_rng.integers(0, kg.num_entities, k)  # noqa: E731 - the naive scheme's draw
    negatives = Negatives(ent, scheme=args.sampling, draw=uniform, rng=np.random.default_rng([args.seed, me, 2, 0]))
    if len(mine):
        negatives.ahead(min(args.batch, len(mine)) * 2 * args.neg)  # the first batch's
    progress = common.Progress(
        w,
        total=len(run.train) * (args.epochs - s.start_epoch),
        scale=s.workers,
        unit="triples",
        mode=args.progress,
        watchdog=s.report.watchdog,
    )
    clock = common.Clock(w, args)
    most = -(-int(np.diff(bounds).max()) // args.batch)  # batches per epoch of the largest share
    shares = common.Shares(s, w)  # with backups: the triples of a dead node's workers are trained here too
    exchange = common.exchanges(args, bool(s.node.config.backups)) and not Rows.prefetch(args, negatives)

    def of(piece: tuple[int, int, int]) -> np.ndarray:
        p, j, pieces = piece
        return run.train[slice(*common.piece(bounds[p], bounds[p + 1], j, pieces))]

    for epoch in range(s.start_epoch + 1, args.epochs + 1):
        t0 = time.monotonic()
        rng = np.random.default_rng([args.seed, me, epoch])  # the epoch's order: a resumed run is the same run
        negatives.rng = np.random.default_rng([args.seed, me, 2, epoch])  # and its negatives (drawn by the app)
        pieces = shares.pieces()
        done = [mine] + [of(piece) for piece in pieces]
        loss = sum(
            train_epoch(
                args, tri, ent, rel, negatives, rng, progress, clock, more=epoch < args.epochs, exchange=exchange
            )
            for tri in done
        )
        for piece in shares.late(w, pieces):  # a node died during this epoch
            done.append(of(piece))
            loss += train_epoch(
                args, done[-1], ent, rel, negatives, rng, progress, clock, more=epoch < args.epochs, exchange=exchange
            )
        clock.pad(epoch * most)  # every worker clocks as often before the barriers below
        seconds = time.monotonic() - t0
        last = epoch == args.epochs
        split = kg.test if last else kg.valid
        sums = np.zeros(5)
        if last or (args.eval_every and epoch % args.eval_every == 0):
            w.barrier()  # every push of every worker is in place
            j, live = shares.among_live()  # the live workers split the evaluation (all of them, barring deaths)
            share = np.linspace(0, min(len(split), args.eval_triples), live + 1).astype(np.int64)
            E, R = ent.pull(np.arange(kg.num_entities)), rel.pull(np.arange(kg.num_relations))
            sums = evaluate(E, R, _sample(split, args)[share[j] : share[j + 1]], run.filt, args.model)
        assert s.reducer is not None  # (run_app made it before training)
        total = s.reducer.sum(w, [loss, sum(map(len, done)), *sums])
        metrics = {"loss": total[0] / max(total[1], 1)}
        if shares.backups:
            metrics["triples"] = int(total[1])  # all of them, also when a node died
        if total[6]:
            name = "test" if last else "valid"
            metrics[f"{name}_mrr"] = total[2] / total[6]
            if last:
                run.final.update(
                    {f"hits@{k}": total[3 + i] / total[6] for i, k in enumerate((1, 3, 10))}, mrr=total[2] / total[6]
                )
        s.report.epoch(w, epoch, progress, seconds=seconds, **metrics)
        if w.thread == 0:  # every node: the one that leads at the end (node 0 unless it died) has them all
            run.final["train_seconds"] = run.final.get("train_seconds", 0.0) + seconds
        s.checkpoint(w, epoch)
    negatives.close()
    progress.close()


def _sample(split: np.ndarray, args) -> np.ndarray:
    """The split, or a seeded sample of args.eval_triples of its triples (the same on every node)."""
    if len(split) <= args.eval_triples:
        return split
    return split[np.sort(np.random.default_rng(args.seed).choice(len(split), args.eval_triples, replace=False))]


def _summary(run: _Run, wall: float) -> list[str] | None:
    """Node 0's summary lines (the last one is the headline)."""
    f, args = run.final, run.session.args
    if "mrr" not in f:
        return None
    epochs = args.epochs - run.session.start_epoch
    rate = len(run.train) * epochs / max(f["train_seconds"], 1e-9)
    return [
        f"{args.model} on {args.data}: {epochs} epochs in {wall:.1f} s "
        f"(training {f['train_seconds']:.1f} s, {rate:,.0f} triples/s, "
        f"{f['train_seconds'] / max(epochs, 1):.3f} s/epoch)",
        f"filtered test Hits@1 {f['hits@1']:.4f}  Hits@3 {f['hits@3']:.4f}  Hits@10 {f['hits@10']:.4f}",
        f"test MRR {f['mrr']:.4f}",
    ]


def _finish(run: _Run, wall: float) -> list[str] | None:
    """Node 0, the tables still up: write --out, then the summary lines."""
    lines, args, kg = _summary(run, wall), run.session.args, run.kg
    if args.out:
        ent, rel = run.tables
        write_labelled(args.out, "entities", ent.pull(np.arange(kg.num_entities)), kg.entities)  # (E, dim) float32
        write_labelled(args.out, "relations", rel.pull(np.arange(kg.num_relations)), kg.relations)
        write_json(
            args.out / "meta.json",
            {
                "model": args.model,
                "dim": args.dim,
                "data": args.data,
                "seed": args.seed,
                "epochs": args.epochs,
                "test": run.final,
            },
        )
        lines = [f"embeddings: {args.out}/ (pskv.apps.kge.load_embeddings)"] + (lines or [])
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the KGE app on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    try:  # every node reads the data before it joins: a malformed file stops them all alike, nothing written
        kg = _lapse(args) if args.data == "lapse-toy" else load(args.data, seed=args.seed)
    except DataError as exc:
        print(f"pskv run kge: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return common.run_app("kge", args, metrics=7, setup=lambda s: _setup(s, kg), train=_train, finish=_finish)


if __name__ == "__main__":
    sys.exit(main())
