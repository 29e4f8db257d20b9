"""mf's command line (apps.mf): its flags and the checks `pskv run mf` makes before any node starts."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data import DataError
from ..errors import ConfigError
from . import common, mf_ccd

ITEMS = "mf-items"
USERS_OUT = "mf-users-out"


def parser() -> argparse.ArgumentParser:
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
        "batch: about the same test RMSE at a fraction of the CPU), unless --backups, --intent, "
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


NAMED = ("ml-100k", "lapse-toy")  # --data sets by name; else zipf:... or a file


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check mf's arguments (`pskv run mf` calls it before any node starts): a mistake in a
    flag, a --data that names no data set or file, or a --resume checkpoint of another --rank ends the
    run in one line with status 2 (common.arguments); a resumed run already at --epochs exits 0."""
    return common.arguments("mf", parser(), argv, _check)


def _check(args: argparse.Namespace) -> str | None:
    common.at_least(args, 1, "--epochs", "--rank", "--batch", "--checkpoint-every", "--keep")
    if args.sampling not in (None, "naive"):
        raise ConfigError("--sampling: mf draws no negative samples; drop the flag")
    if args.step_size_pow > 0 and args.step_size_offset <= 0:
        raise ConfigError("--step-size-pow > 0 needs --step-size-offset > 0")
    if not 0 <= args.test_fraction < 1:
        raise ConfigError(f"--test-fraction {args.test_fraction} must be in [0, 1)")
    if args.data not in NAMED and not args.data.startswith("zipf:") and not Path(args.data).is_file():
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
    users = tables.get(USERS_OUT)  # its rows: the rank's factors and a bias, whatever --biases said
    if ITEMS not in tables or users is None:
        return f"--checkpoint-dir does not match mf: no mf tables but {', '.join(sorted(tables)) or 'none'}"
    rank = int(users["dim"]) - 1
    if rank != args.rank:
        return f"--rank {args.rank} does not match {rank}"
    if int(tables[ITEMS]["dim"]) != args.rank + args.biases:
        return "--biases does not match --no-biases" if args.biases else "--no-biases does not match --biases"
    theirs = (tables[ITEMS].get("updater") or {}).get("name", "add")
    if theirs != updater:  # (--item-updater sgd makes an `add` table)
        flag = {"add": "sgd"}
        return f"--item-updater {flag.get(updater, updater)} does not match {flag.get(theirs, theirs)}"
    return None
