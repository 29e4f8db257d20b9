"""word2vec's command line (apps.word2vec): its flags and the checks `pskv run word2vec` makes before any node
starts."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data.fetch import DataError
from ..errors import ConfigError
from . import common
from .word2vec_data import GENSIM_FILES
from .word2vec_gensim import gensim_available


def parser() -> argparse.ArgumentParser:
    p = common.parser(
        "word2vec", "word2vec: skip-gram with negative sampling", epochs=5, techniques=True, resumable=True
    )
    g = p.add_argument_group("word2vec")
    g.add_argument(
        "--data",
        default="head500",
        help="head500, lee (gensim's test corpora), lapse-toy, or a "
        "text file with one sentence of space-separated tokens per line, "
        "or a directory of such files",
    )
    g.add_argument("--clean", action="store_true", help="lower-case and drop punctuation (always on for lee)")
    g.add_argument("--dim", type=int, default=100, help="vector size")
    g.add_argument("--window", type=int, default=5, help="max distance between centre and context word")
    g.add_argument("--neg", type=int, default=5, help="negative samples per (centre, context) pair")
    g.add_argument("--min-count", type=int, default=5, help="drop words seen fewer times")
    g.add_argument("--alpha", type=float, default=0.025, help="initial step size, decays linearly")
    g.add_argument("--min-alpha", type=float, default=0.0001, help="step size at the end of training")
    g.add_argument("--sample", type=float, default=1e-3, help="subsampling threshold for frequent words (0: off)")
    g.add_argument("--batch-words", type=int, default=2000, help="corpus words per minibatch and worker")
    g.add_argument(
        "--data-words",
        type=int,
        default=None,
        metavar="N",
        help="train on about N corpus words per epoch in all (Lapse's --data_words)",
    )
    g.add_argument("--reuse", type=int, default=1, help="--sampling pool: times each drawn negative is used")
    # off by default: on one host it was no faster (2 nodes, head500), and the other workers' pushes
    # reach a batch's rows a batch later (epoch 1 loss 2.83 vs 2.77; epoch 3 2.521 vs 2.517)
    common.add_prefetch(g, default=False)
    g.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="write the input vectors in word2vec's text format (pskv.apps.word2vec.load_vectors reads it)",
    )
    g.add_argument(
        "--wordsim",
        type=Path,
        metavar="FILE",
        help="word pairs with a human score (word1<TAB>word2<TAB>"
        "score) to report Spearman on (default: WordSim-353, "
        "if `pskv data fetch gensim-text` cached it)",
    )
    g.add_argument(
        "--analogies",
        type=Path,
        metavar="FILE",
        help="analogy questions (': section' lines, then "
        "'a b c d' lines) (default: gensim's "
        "questions-words.txt, if cached)",
    )
    g.add_argument(
        "--compare-gensim",
        action="store_true",
        help="then train gensim's Word2Vec alike and print both (needs gensim: pip install 'pskv[compare]')",
    )
    return p


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check word2vec's arguments (`pskv run word2vec` calls it before any node starts): a mistake
    in a flag, a --data that names no corpus or path, or a --resume checkpoint of another --dim ends the run
    in one line with status 2 (common.arguments); a resumed run already at --epochs exits 0."""
    return common.arguments("word2vec", parser(), argv, _check)


def _check(args: argparse.Namespace) -> str | None:
    common.at_least(
        args,
        1,
        "--dim",
        "--neg",
        "--batch-words",
        "--epochs",
        "--reuse",
        "--data-words",
        "--checkpoint-every",
        "--keep",
    )
    common.at_least(args, 0, "--window")
    if args.compare_gensim and not gensim_available():
        raise ConfigError(
            "--compare-gensim needs gensim, which is not installed: pip install 'pskv[compare]' (or pip install gensim)"
        )
    if args.data not in (*GENSIM_FILES, "lapse-toy") and not Path(args.data).exists():
        raise DataError(f"--data {args.data!r} is neither head500, lee, lapse-toy nor a file or directory")
    for flag, path in (("--wordsim", args.wordsim), ("--analogies", args.analogies)):
        if path is not None and not path.is_file():
            raise DataError(f"{flag} {str(path)!r}: no such file")
    dim = (args.dim, f"--dim {args.dim}")
    return common.check_resume(args, lambda tables: common.dims(tables, {"syn0": dim, "syn1neg": dim}))
