"""WordNet's glosses as a sparse, high-dimensional regression data set (tf-idf text, y planted).

Source: WordNet 3.0's data files (data.noun, .verb, .adj, .adv) in Debian's `wordnet-base`
(`pskv data fetch wordnet-glosses`: fetch.py downloads and checks them, then calls `build`).
Each of the 117,659 synsets is a document: its words and its gloss ("breathe respire | draw air
into, and expel out of, the lungs; ..."), lower-cased and cut into tokens of letters and digits.
Features: tf-idf as scikit-learn's TfidfVectorizer makes them by default (raw counts x smooth idf
ln((1 + n) / (1 + df)) + 1, each row scaled to unit length), one per token seen in at least two
documents, keys 1.. in alphabetical order (`glosses.vocab`, one token a line).

The target is planted, as lasso's `all`: y = X beta* + noise, beta* = +-1 on `PLANTED` tokens drawn
(seed 0) among those in at least 100 documents, noise 0.1 x std(X beta*) (the design is real,
the target made up; a known support lets a benchmark check what the Lasso found). Written once,
atomically, as libsvm text (`glosses.libsvm`, the target in the label column) and .pskvsp.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from .fetch import DataError, fetch
from .sparse import SparseData, write_libsvm

NAME = "wordnet-glosses"
PARTS = ("data.noun", "data.verb", "data.adj", "data.adv")
FILES = ("glosses.libsvm", "glosses.pskvsp", "glosses.vocab")
PLANTED = 20
_TOKEN = re.compile(rb"[a-z0-9]+")


def prepare(*, quiet: bool = False) -> Path:
    """The directory holding glosses.libsvm / .pskvsp (fetching and building them first if needed)."""
    return fetch(NAME, quiet=quiet)


def build(target: Path) -> None:
    """fetch.py's hook, under its lock: write FILES into `target` from the fetched WordNet files."""
    if all((target / f).is_file() for f in FILES):
        return
    docs = []
    for part in PARTS:
        with open(target / part, "rb") as f:
            for line in f:
                if line.startswith(b"  "):  # the licence at the top of each file
                    continue
                head, _, gloss = line.partition(b"|")
                fields = head.split()
                try:
                    words = fields[4 : 4 + 2 * int(fields[3], 16) : 2]
                except (IndexError, ValueError):
                    raise DataError(f"{target / part}: {line[:60]!r} is not a WordNet data line; fetch again") from None
                docs.append(_TOKEN.findall(b" ".join(words).replace(b"_", b" ").lower() + b" " + gloss.lower()))
    data, vocab = tfidf(docs)
    data.labels = planted(data, seed=0)
    data.meta.update(source=f"{NAME}: WordNet 3.0 glosses (Debian wordnet-base), tf-idf, y planted on {PLANTED} tokens")
    write_libsvm(data, target / "glosses.libsvm", real_labels=True)
    data.write(target / "glosses.pskvsp")
    tmp = target / f".glosses.vocab.{os.getpid()}.tmp"
    tmp.write_bytes(b"\n".join(vocab) + b"\n")
    os.replace(tmp, target / "glosses.vocab")


def tfidf(docs: list[list[bytes]]) -> tuple[SparseData, list[bytes]]:
    """Documents (token lists) -> (SparseData of tf-idf rows, keys 1.. of the tokens in >= 2 documents)."""
    seen: dict[bytes, int] = {}
    ids = [np.array([seen.setdefault(t, len(seen)) for t in doc], np.int64) for doc in docs]
    rows = np.repeat(np.arange(len(docs)), [len(d) for d in ids])
    cols = np.concatenate(ids)
    pair, counts = np.unique(rows * len(seen) + cols, return_counts=True)  # (row, token), sorted by row
    rows, cols = pair // len(seen), pair % len(seen)
    df = np.bincount(cols, minlength=len(seen))
    names = np.array(list(seen), dtype=object)
    kept = np.flatnonzero(df >= 2)
    order = kept[np.argsort(names[kept])]  # alphabetical keys
    key = np.zeros(len(seen), np.int64)
    key[order] = np.arange(1, len(order) + 1)
    keep = key[cols] > 0
    rows, cols, counts = rows[keep], cols[keep], counts[keep]
    n = len(docs)
    values = counts * (np.log((1 + n) / (1 + df[cols])) + 1)
    norms = np.sqrt(np.bincount(rows, weights=values * values, minlength=n))
    values = values / np.where(norms > 0, norms, 1.0)[rows]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    order_in_row = np.lexsort((key[cols], rows))  # keys ascending within each row, as libsvm writes them
    data = SparseData(
        np.zeros(n),
        indptr,
        key[cols][order_in_row].astype(np.uint64),
        values[order_in_row].astype(np.float32),
        {"dataset": NAME},
    )
    return data, [names[j] for j in order]


def planted(data: SparseData, *, seed: int, noise: float = 0.1) -> np.ndarray:
    """y = X beta* + noise: beta* = +-1 on PLANTED keys among those in >= 100 rows."""
    rng = np.random.default_rng(seed)
    keys = np.asarray(data.keys)
    df = np.bincount(keys.astype(np.int64))
    support = rng.choice(np.flatnonzero(df >= 100), PLANTED, replace=False)
    beta = np.zeros(len(df))
    beta[support] = rng.choice([-1.0, 1.0], PLANTED)
    rows = np.repeat(np.arange(data.rows), np.diff(data.indptr))
    y = np.bincount(
        rows, weights=beta[keys.astype(np.int64)] * np.asarray(data.values, np.float64), minlength=data.rows
    )
    return y + noise * y.std() * rng.standard_normal(data.rows)
