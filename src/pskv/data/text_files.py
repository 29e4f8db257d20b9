"""Text files of word2vec's data (data/text.py re-exports what is public here): corpora, word-similarity
and analogy test sets, and word vectors in word2vec's text format, written and read. Each is checked
line by line: a malformed line raises DataError naming the file and the line number (data/text.py's
docstring lists the formats).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError
from .fetch import DataError

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")  # letters/digits, inner apostrophes and hyphens
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # control characters other than \t \n \r


def _lines(path: Path, what: str) -> Iterable[tuple[int, str]]:
    """(line number, text without the newline) of a UTF-8 file; DataError on bytes that are not text."""
    path = Path(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 - apart from the with: an open error is told from a read error
    except OSError as exc:
        raise DataError(f"cannot open {what} {str(path)!r}: {exc.strerror}") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}:{number}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                    f"{exc.start + 1}); a {what} must be UTF-8"
                ) from None
            bad = _CONTROL.search(line)
            if bad:
                raise DataError(
                    f"{path}:{number}: control character {bad.group()!r} at column {bad.start() + 1}; "
                    f"is this a binary file rather than a {what}?"
                )
            yield number, line.rstrip("\r\n")


def read_corpus(path: Path, *, clean: bool = False) -> list[list[str]]:
    """The sentences of a corpus file, one per non-blank line, as lists of tokens.

    `clean`: lower-case and keep only runs of word characters (punctuation dropped). Raises
    DataError (with file and line) for a missing file, bytes that are not UTF-8, control characters."""
    sentences = []
    for _, line in _lines(path, "corpus"):
        tokens = _WORD.findall(line.lower()) if clean else line.split()
        if tokens:
            sentences.append(tokens)
    return sentences


def read_corpus_path(path: Path, *, clean: bool = False) -> list[list[str]]:
    """The sentences of a corpus file, or of every file under a directory (recursively, hidden names
    skipped, in path order), as read_corpus reads each. Raises DataError for a missing path or a
    file without a sentence (naming it), or as read_corpus does."""
    path = Path(path)
    if path.is_dir():
        files = sorted(
            f
            for f in path.rglob("*")
            if f.is_file() and not any(part.startswith(".") for part in f.relative_to(path).parts)
        )
        if not files:
            raise DataError(f"{path}: the directory holds no text file; expected files of sentences, one per line")
    elif path.is_file():
        files = [path]
    else:
        raise DataError(
            f"{path}: no such file or directory; expected a text file (one sentence per line) or a directory of them"
        )
    sentences = []
    for f in files:
        mine = read_corpus(f, clean=clean)
        if not mine:
            raise DataError(
                f"{f}:1: no words in the file; expected UTF-8 text, one sentence of space-separated words per line"
            )
        sentences += mine
    return sentences


def read_wordsim(path: Path, *, lowercase: bool = True) -> list[tuple[str, str, float]]:
    """WordSim-353 pairs `(word1, word2, human score)`; `#` comments and a header line are skipped."""
    pairs: list[tuple[str, str, float]] = []
    for number, line in _lines(path, "word-similarity file"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != 3:
            raise DataError(
                f"{path}:{number}: expected 3 tab-separated fields (word1, word2, score), "
                f"found {len(fields)}: {line[:80]!r}"
            )
        try:
            score = float(fields[2])
        except ValueError:
            if not pairs and number <= 3:  # the original combined.tab starts with `Word 1  Word 2  Human (mean)`
                continue
            raise DataError(f"{path}:{number}: score {fields[2]!r} is not a number") from None
        if not np.isfinite(score):
            raise DataError(f"{path}:{number}: score {fields[2]!r} is not finite")
        a, b = fields[0].strip(), fields[1].strip()
        pairs.append((a.lower(), b.lower(), score) if lowercase else (a, b, score))
    return pairs


class Analogy(NamedTuple):
    """One question of `questions-words.txt`: a is to b as c is to d."""

    section: str
    a: str
    b: str
    c: str
    d: str


def read_analogies(path: Path, *, lowercase: bool = True) -> list[Analogy]:
    """The analogy questions of a `questions-words.txt` file, each tagged with its `: section`."""
    questions = []
    section = None
    for number, line in _lines(path, "analogy file"):
        if not line.strip():
            continue
        if line.startswith(":"):
            section = line[1:].strip()
            if not section:
                raise DataError(f"{path}:{number}: a section line needs a name after ':'")
            continue
        words = line.split()
        if len(words) != 4:
            raise DataError(f"{path}:{number}: an analogy has 4 words (a b c d), found {len(words)}: {line[:80]!r}")
        if section is None:
            raise DataError(f"{path}:{number}: analogy before the first ': section' line")
        if lowercase:
            words = [w.lower() for w in words]
        questions.append(Analogy(section, *words))
    return questions


def write_vectors(path: Path, words: list[str], vectors: np.ndarray) -> None:
    """Write word vectors in word2vec's text format: a `V dim` line, then `word v1 ... vdim` per word
    (what gensim's KeyedVectors.load_word2vec_format(path) reads). 9 significant digits: float32
    values read back exactly. Written to a temporary file and renamed: a reader never sees half of it."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ConfigError(f"write_vectors: {len(words)} words but vectors of shape {vectors.shape}")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{vectors.shape[0]} {vectors.shape[1]}\n")
            for word, row in zip(words, vectors, strict=True):
                f.write(word + " " + " ".join(f"{x:.9g}" for x in row) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """Words and (V, dim) float32 vectors of a word2vec text file (see write_vectors)."""
    words, rows, shape = [], [], None
    for number, line in _lines(path, "word-vector file"):
        fields = line.split()
        if shape is None:
            if len(fields) != 2 or not all(x.isdigit() for x in fields):
                raise DataError(f"{path}:{number}: expected the header `V dim`, found {line[:80]!r}")
            shape = (int(fields[0]), int(fields[1]))
            continue
        if len(fields) != shape[1] + 1:
            raise DataError(f"{path}:{number}: expected a word and {shape[1]} numbers, found {len(fields)} fields")
        try:
            rows.append([float(x) for x in fields[1:]])
        except ValueError:
            raise DataError(f"{path}:{number}: a vector value of {fields[0]!r} is not a number") from None
        words.append(fields[0])
    if shape is None or len(words) != shape[0]:
        raise DataError(f"{path}: the header announces {shape and shape[0]} words, the file has {len(words)}")
    return words, np.array(rows, dtype=np.float32).reshape(shape)
