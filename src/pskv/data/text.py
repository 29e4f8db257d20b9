"""Text for word2vec: corpora, vocabulary, sampling distributions and word-vector evaluation.

    from pskv.data import fetch
    from pskv.data.text import Vocab, read_corpus
    sentences = read_corpus(fetch("gensim-text") / "head500.noblanks.cor")
    vocab = Vocab.build(sentences, min_count=5)
    corpus = vocab.encode(sentences)              # int32 word ids + sentence offsets

Formats read (by data/text_files.py; this module re-exports its readers), each checked line by
line (a malformed line raises DataError naming the file and the line number):
- a corpus: UTF-8, one sentence per line, tokens separated by spaces or tabs (gensim's `.cor`
  files; Lapse's `lm/small.txt` is a single line of 100,000 tokens). Blank lines are skipped.
  `clean=True` lower-cases and keeps only word characters (for raw text like `lee_background.cor`).
  `read_corpus_path` also takes a directory: every file under it (hidden ones skipped), in name order.
- WordSim-353 (`wordsim353.tsv`): `word1<TAB>word2<TAB>score`; `#` lines are comments, and a first
  line whose score is not a number is a header.
- analogies (`questions-words.txt`): `: section` lines, then `a b c d` lines (a:b = c:d).
- word vectors in word2vec's text format (`V dim`, then `word v1 ... vdim` lines), written and read;
  the values with 9 significant digits, so float32 vectors read back exactly.

The sampling distributions follow word2vec.c and gensim exactly: a word of count f among T
corpus words is kept with probability min(1, (sqrt(f / (s T)) + 1) s T / f) for `--sample` s,
and negatives are drawn with probability proportional to f^0.75.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Iterable
from typing import NamedTuple

import numba
import numpy as np

from ..errors import ConfigError
from .fetch import DataError
from .text_files import (
    Analogy,
    read_analogies,
    read_corpus,
    read_corpus_path,
    read_vectors,
    read_wordsim,
    write_vectors,
)

__all__ = [
    "Analogy",
    "Corpus",
    "Score",
    "Unigram",
    "Vocab",
    "analogy_accuracy",
    "keep_probabilities",
    "rankdata",
    "read_analogies",
    "read_corpus",
    "read_corpus_path",
    "read_vectors",
    "read_wordsim",
    "spearman",
    "wordsim_spearman",
    "write_vectors",
]


# ---- vocabulary and corpus ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Corpus:
    """Sentences as word ids: sentence i is tokens[offsets[i]:offsets[i + 1]]."""

    tokens: np.ndarray  # (n_words,) int32 word ids
    offsets: np.ndarray  # (n_sentences + 1,) int64, offsets[0] == 0

    @property
    def num_words(self) -> int:
        return int(self.offsets[-1])

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1

    def shard(self, part: int, parts: int, *, max_words: int | None = None) -> Corpus:
        """Part `part` of `parts` contiguous runs of whole sentences with about equal word counts.

        `max_words`: keep only the first `max_words` words of the part, the last sentence cut
        there (Lapse's `--data_words`, which the caller divides among the workers)."""
        cut = np.searchsorted(self.offsets, np.linspace(0, self.num_words, parts + 1)[1:-1])
        bounds = np.concatenate([[0], cut, [self.num_sentences]]).astype(np.int64)
        s0, s1 = int(bounds[part]), int(max(bounds[part], bounds[part + 1]))
        offsets = self.offsets[s0 : s1 + 1] - self.offsets[s0]  # (m + 1,) int64
        if max_words is not None and offsets[-1] > max_words:
            offsets = np.append(offsets[offsets < max_words], max_words)
        start = self.offsets[s0]
        return Corpus(self.tokens[start : start + offsets[-1]], offsets)


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Words with count >= min_count, most frequent first (id 0 is the most frequent word)."""

    words: list[str]
    counts: np.ndarray  # (V,) int64, non-increasing

    @classmethod
    def build(cls, sentences: Iterable[list[str]], *, min_count: int = 5) -> Vocab:
        """Count the tokens of `sentences` and keep those seen at least `min_count` times.

        Ties in count are ordered by the word itself, so every node builds the same ids."""
        counter: collections.Counter[str] = collections.Counter()
        for sentence in sentences:
            counter.update(sentence)
        kept = sorted(((w, c) for w, c in counter.items() if c >= min_count), key=lambda wc: (-wc[1], wc[0]))
        if not kept:
            raise DataError(
                f"no word occurs {min_count} times or more in the corpus ({sum(counter.values())} "
                "tokens); lower --min-count or give a larger corpus"
            )
        return cls([w for w, _ in kept], np.array([c for _, c in kept], dtype=np.int64))

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """word -> id."""
        return {w: i for i, w in enumerate(self.words)}

    @property
    def total(self) -> int:
        """Number of corpus tokens that are in the vocabulary (word2vec.c's `train_words`)."""
        return int(self.counts.sum())

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, sentences: Iterable[list[str]], *, max_sentence: int = 1000) -> Corpus:
        """Word ids of `sentences`, out-of-vocabulary tokens dropped, each sentence cut into pieces of
        at most `max_sentence` words (word2vec.c's MAX_SENTENCE_LENGTH); empty sentences vanish."""
        index = self.index
        ids: list[int] = []
        offsets = [0]
        for sentence in sentences:
            kept = [index[t] for t in sentence if t in index]
            for lo in range(0, len(kept), max_sentence):
                ids.extend(kept[lo : lo + max_sentence])
                offsets.append(len(ids))
        return Corpus(np.array(ids, dtype=np.int32), np.array(offsets, dtype=np.int64))


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """(V,) float64: the probability that frequent-word subsampling keeps one occurrence of each word.

    word2vec.c and gensim: min(1, (sqrt(f / (s T)) + 1) * s T / f); sample 0 keeps everything."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum()
    return np.minimum(1.0, (np.sqrt(counts / threshold) + 1.0) * threshold / counts)


class Unigram:
    """The negative-sampling distribution: P(w) proportional to count(w) ** power (0.75 in word2vec).

    Draws exactly from it with Walker's alias method, O(1) per draw (word2vec.c's 1e8-entry
    table approximates the same distribution; gensim bisects a cumulative table)."""

    def __init__(self, counts: np.ndarray, power: float = 0.75) -> None:
        weights = np.asarray(counts, dtype=np.float64) ** power
        if weights.ndim != 1 or len(weights) == 0 or not np.all(weights > 0):
            raise ConfigError("Unigram needs a non-empty 1-D array of positive counts")
        self.p = weights / weights.sum()  # (V,) float64, sums to 1
        self._accept, self._alias = _alias_table(self.p)

    def draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """(k,) int64 word ids drawn independently from the distribution."""
        keys = np.empty(k, np.int64)
        _alias_draw(rng.random(k), self._accept, self._alias, keys)
        return keys


@numba.njit(nogil=True, cache=True)
def _alias_draw(uniform, accept, alias, keys):
    """keys[i] from uniform[i] in [0, 1): the integer part of uniform[i] * n picks a column, the
    fraction (uniform again) picks the column's own word or its alias (numpy gathers: 10x slower)."""
    n = len(accept)
    for i in range(len(uniform)):
        x = uniform[i] * n
        column = min(int(x), n - 1)
        keys[i] = column if x - column < accept[column] else alias[column]


def _alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table of distribution p: column i yields i with probability accept[i], else alias[i]."""
    n = len(p)
    scaled = p * n  # (n,) float64, mean 1
    accept = np.ones(n, np.float64)
    alias = np.arange(n, dtype=np.int64)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        accept[s], alias[s] = scaled[s], g  # column s: s with scaled[s], else g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return accept, alias  # leftovers (rounding) keep accept 1


# ---- evaluation ---------------------------------------------------------------------------------
class Score(NamedTuple):
    """An evaluation result over the `used` of `total` items whose words are all in the vocabulary."""

    value: float
    used: int
    total: int

    def __str__(self) -> str:
        return f"{self.value:.4f} ({self.used}/{self.total} in vocabulary)"


def rankdata(x: np.ndarray) -> np.ndarray:
    """(n,) float64 ranks 1..n of `x`, ties given the average of their ranks (scipy's 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]]))  # first of each tie group
    ends = np.append(starts[1:], len(x))  # one past the last
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of x and y (Pearson's r of their average ranks); nan if undefined."""
    if len(x) != len(y):
        raise ConfigError(f"spearman needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return float("nan")
    rx, ry = rankdata(x) - (len(x) + 1) / 2.0, rankdata(y) - (len(y) + 1) / 2.0
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)  # (V, dim) float32; an all-zero row stays zero


def wordsim_spearman(vectors: np.ndarray, vocab: Vocab, pairs: list[tuple[str, str, float]]) -> Score:
    """Spearman correlation between the cosine similarity of each in-vocabulary pair and its human score."""
    index = vocab.index
    used = [(index[a], index[b], s) for a, b, s in pairs if a in index and b in index]
    if len(used) < 2:
        return Score(float("nan"), len(used), len(pairs))
    unit = _unit(vectors)
    a, b, human = (np.array(col) for col in zip(*used, strict=True))
    cosine = np.einsum("ij,ij->i", unit[a], unit[b])
    return Score(spearman(cosine, human), len(used), len(pairs))


def analogy_accuracy(vectors: np.ndarray, vocab: Vocab, questions: list[Analogy], *, batch: int = 512) -> Score:
    """Share of in-vocabulary questions a:b = c:d whose answer is d by 3CosAdd.

    3CosAdd (Mikolov et al., gensim's most_similar): the word w, other than a, b and c, with the
    largest cos(w, b - a + c) over unit-length vectors."""
    index = vocab.index
    ids = np.array(
        [[index[w] for w in q[1:]] for q in questions if all(w in index for w in q[1:])], dtype=np.int64
    ).reshape(-1, 4)  # (n, 4) a b c d
    if len(ids) == 0:
        return Score(float("nan"), 0, len(questions))
    unit = _unit(vectors)
    correct = 0
    for lo in range(0, len(ids), batch):
        a, b, c, d = ids[lo : lo + batch].T
        sims = (unit[b] - unit[a] + unit[c]) @ unit.T  # (batch, V) float32; the target's norm does not change argmax
        rows = np.arange(len(a))
        sims[rows, a] = sims[rows, b] = sims[rows, c] = -np.inf
        correct += int((sims.argmax(axis=1) == d).sum())
    return Score(correct / len(ids), len(ids), len(questions))
