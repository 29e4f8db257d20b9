"""mf's data (apps.mf): the ratings of --data, split into train and test as every node loads them."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from ..data import DataError, fetch, lapse_toy_dir, ratings


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
