"""kge's command line (apps.kge): its flags and the checks `pskv run kge` makes before any node starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pskv

from ..data.fetch import DataError
from . import common

LOSSES = ("ce", "softplus")
REGS = {"none": 0, "l2": 1, "n3": 2}


def parser() -> argparse.ArgumentParser:
    p = common.parser(
        "kge",
        "knowledge-graph embeddings (ComplEx, DistMult) with negative sampling",
        epochs=30,
        techniques=True,
        resumable=True,
    )
    g = p.add_argument_group(
        "kge",
        "Negatives: with no --sampling, a run of more than one node draws each worker's among the entities its "
        "node holds (onlylocal: no negative's row crosses the network; auto_sampling), one node, fewer than 500 "
        "entities per node, --localize or --intent among all of them (naive); --sampling naive draws among all "
        "on any number of nodes.",
    )
    g.add_argument(
        "--data",
        default="nations",
        help="nations, umls, ml-100k-kg, lapse-toy, random:E,R,T, or a path: a directory of train/valid/"
        "test triples (pykeen's train.txt..., LibKGE's train.del... with entity_ids.del and "
        "relation_ids.del) or one file of head<TAB>relation<TAB>tail lines, split by --seed",
    )
    g.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the trained embeddings with their names here (entities.npy/.tsv, relations.npy/.tsv, meta.json)",
    )
    g.add_argument(
        "--model",
        choices=["complex", "distmult"],
        default="complex",
        help="score of a triple: ComplEx (Re<h, r, conj t>, complex rows) or DistMult (<h, r, t>, real rows)",
    )
    g.add_argument("--dim", type=int, default=200, help="floats per row (ComplEx: dim/2 complex numbers)")
    g.add_argument("--lr", type=float, default=0.1, help="Adagrad step size")
    g.add_argument("--neg", type=int, default=32, help="negative samples per positive, for each side")
    g.add_argument("--batch", type=int, default=100, help="positive triples per batch and worker")
    g.add_argument(
        "--loss",
        choices=LOSSES,
        default="ce",
        help="ce: cross-entropy over 1 positive + negatives; softplus: logistic loss",
    )
    g.add_argument("--reg", choices=list(REGS), default="n3", help="regulariser of each positive's h, r, t")
    g.add_argument("--reg-weight", type=float, default=0.01, help="weight of --reg")
    g.add_argument("--init-std", type=float, default=0.1, help="std of the normal initial values")
    g.add_argument("--eval-every", type=int, default=5, metavar="K", help="valid MRR every K epochs (0: never)")
    g.add_argument(
        "--eval-triples",
        type=int,
        default=5000,
        metavar="N",
        help="evaluate on at most N triples of a split (a seeded sample of larger ones)",
    )
    g.add_argument("--reuse", type=int, default=1, help="--sampling pool: each drawn negative is used this often")
    # off by default: its Adagrad rows cannot take this worker's last push back in (mf's and word2vec's
    # `add` rows can), and one batch of staleness cost 1.5% training loss (random:20000,20,40000, 3 epochs,
    # 0.760 vs 0.749) for no speed on one host
    common.add_prefetch(g, default=False)
    common.add_exchange(g)
    g.add_argument("--train-file", default="train.del", help="lapse-toy only: e.g. train.partitioned.2x2.del")
    return p


NAMED = ("nations", "umls", "ml-100k-kg", "lapse-toy")  # --data sets by name; else random:E,R,T or a path


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check kge's arguments (`pskv run kge` calls it before any node starts): a mistake in a
    flag, a --data that names no data set or path, or a --resume checkpoint of another --dim ends the run
    in one line with status 2 (common.arguments); a resumed run already at --epochs exits 0."""
    return common.arguments("kge", parser(), argv, _check)


def _check(args: argparse.Namespace) -> str | None:
    if args.dim < 1 or (args.model == "complex" and args.dim % 2):
        raise pskv.ConfigError(f"--dim {args.dim}: ComplEx needs an even dim >= 2 (real | imaginary)")
    common.at_least(
        args, 1, "--epochs", "--neg", "--batch", "--eval-triples", "--reuse", "--checkpoint-every", "--keep"
    )
    if args.data not in NAMED and not args.data.startswith("random:") and not Path(args.data).exists():
        raise DataError(
            f"--data {args.data!r}: no such file or directory; --data takes nations, umls, ml-100k-kg, "
            "lapse-toy, random:E,R,T, a directory of train/valid/test triples or one file of triples"
        )
    dims = {"entities": (args.dim, f"--dim {args.dim}"), "relations": (args.dim, f"--dim {args.dim}")}
    return common.check_resume(args, lambda tables: common.dims(tables, dims))
