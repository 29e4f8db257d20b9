"""word2vec's data (apps.word2vec): the corpus of --data, the word-vector tests, and vectors written by --out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.fetch import DataError, cache_dir, fetch, lapse_toy_dir
from ..data.text import (
    Corpus,
    Score,
    Vocab,
    analogy_accuracy,
    read_analogies,
    read_corpus_path,
    read_vectors,
    read_wordsim,
    wordsim_spearman,
)

GENSIM_FILES = {"head500": "head500.noblanks.cor", "lee": "lee_background.cor"}


def load_text(args) -> tuple[Vocab, Corpus]:
    """The vocabulary and the encoded corpus of --data (every node builds the same)."""
    if args.data in GENSIM_FILES:
        path, clean = fetch("gensim-text", quiet=True) / GENSIM_FILES[args.data], args.clean or args.data == "lee"
    elif args.data == "lapse-toy":
        path, clean = lapse_toy_dir() / "lm" / "small.txt", args.clean
    else:
        path, clean = Path(args.data), args.clean
        if not path.exists():
            raise DataError(f"--data {args.data!r} is neither head500, lee, lapse-toy nor a file or directory")
    sentences = read_corpus_path(path, clean=clean)
    vocab = Vocab.build(sentences, min_count=args.min_count)
    return vocab, vocab.encode(sentences)


@dataclass(frozen=True)
class EvalSets:
    """The word-vector tests of a run: word pairs and analogy questions (None: not to be had) and
    node 0's notes on what is missing."""

    pairs: list | None
    questions: list | None
    wordsim_name: str  # how the summary names the pairs' test
    notes: tuple[str, ...] = ()


def load_tests(wordsim: Path | None, analogies: Path | None) -> EvalSets:
    """The files given, else those `pskv data fetch gensim-text` cached; never downloads (a missing
    cached file makes a note that names the command). Raises DataError for a given file that is
    missing or malformed."""
    cached = cache_dir() / "gensim-text"
    found: list[list | None] = []
    notes: list[str] = []
    for given, name, read in (
        (wordsim, "wordsim353.tsv", read_wordsim),
        (analogies, "questions-words.txt", read_analogies),
    ):
        path = given or cached / name
        if given is None and not path.is_file():
            notes.append(
                f"word2vec: no {'WordSim-353' if read is read_wordsim else 'analogy'} score: {path} is not "
                "there; `pskv data fetch gensim-text` installs it (or give your own file with "
                f"--{'wordsim' if read is read_wordsim else 'analogies'} FILE)"
            )
            found.append(None)
            continue
        found.append(read(path))  # DataError for a given file that is missing or malformed
    return EvalSets(found[0], found[1], f"word similarity ({wordsim.name})" if wordsim else "WordSim-353", tuple(notes))


def evaluate(
    vectors: np.ndarray, vocab: Vocab, tests: EvalSets | None = None, *, analogies: bool = True
) -> dict[str, Score]:
    """Spearman on the word pairs and (unless `analogies` is False) 3CosAdd analogy accuracy of
    `vectors`, for those of `tests` that are there (default: the cached WordSim-353 and analogies)."""
    tests = tests or load_tests(None, None)
    scores = {}
    if tests.pairs is not None:
        scores["wordsim"] = wordsim_spearman(vectors, vocab, tests.pairs)
    if analogies and tests.questions is not None:
        scores["analogy"] = analogy_accuracy(vectors, vocab, tests.questions)
    return scores


def load_vectors(path: Path) -> tuple[Vocab, np.ndarray]:
    """What `word2vec --out FILE` wrote, in any process: (the words as a Vocab, most frequent first,
    counts unknown: all 1) and their (V, dim) float32 vectors. Raises DataError naming file and line."""
    words, vectors = read_vectors(path)
    return Vocab(words, np.ones(len(words), np.int64)), vectors
