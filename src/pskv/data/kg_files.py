"""Triple files as text: lines decompressed by suffix, (head, relation, tail) label or id triples, and
LibKGE's `index<TAB>label` files (data/kg.py: the formats and the KG they make). A malformed line raises
DataError with the file name and line number.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .fetch import DataError

_OPENERS: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def lines(path: Path):
    """(line number, text without the newline) for each line of a text file, decompressing by suffix."""
    opener = _OPENERS.get(path.suffix, open)
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                yield number, line.rstrip("\r\n")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file (a built-in data set: `pskv data fetch NAME` first)") from None
    except (OSError, EOFError, UnicodeDecodeError, lzma.LZMAError) as exc:
        raise DataError(
            f"{path}: cannot read it as {'compressed ' if path.suffix in _OPENERS else ''}"
            f"UTF-8 text ({exc}); the file may be truncated, fetch it again"
        ) from exc


def empty(path: Path) -> DataError:
    return DataError(f"{path}:1: the file has no triples; expected head<TAB>relation<TAB>tail lines")


def fields(path: Path, number: int, line: str, width: int = 3) -> list[str]:
    fields = line.split("\t")
    if len(fields) != width or not all(f.strip() for f in fields):
        raise DataError(f"{path}:{number}: expected {width} non-empty tab-separated fields, got {line[:80]!r}")
    return [f.strip() for f in fields]


def read_label_triples(
    path: Path, *, columns: tuple[int, int, int] = (0, 1, 2), header: bool = False, width: int = 3
) -> list[tuple[str, str, str]]:
    """(head, relation, tail) labels of a TSV file; `columns` picks them out of `width` fields.

    Blank lines are skipped; `header` skips line 1. Raises DataError naming file and line, also for a
    file with no triple."""
    path = Path(path)
    triples = []
    h, r, t = columns
    for number, line in lines(path):
        if (header and number == 1) or not line.strip():
            continue
        f = fields(path, number, line, width)
        triples.append((f[h], f[r], f[t]))
    if not triples:
        raise empty(path)
    return triples


def read_id_triples(path: Path) -> np.ndarray:
    """(n, 3) int64 of a TSV file of non-negative integer ids (Lapse's `.del`). Raises DataError."""
    path = Path(path)
    rows = []
    for number, line in lines(path):
        if not line.strip():
            continue
        f = fields(path, number, line)
        if not all(x.isascii() and x.isdigit() for x in f):
            raise DataError(f"{path}:{number}: expected three non-negative integer ids, got {line[:80]!r}")
        rows.append([int(x) for x in f])
    if not rows:
        raise empty(path)
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def id_labels(path: Path) -> list[str]:
    """The labels of a LibKGE `index<TAB>label` file, by index; DataError unless the indices are 0..n-1."""
    labels = {}
    for number, line in lines(path):
        if not line.strip():
            continue
        f = fields(path, number, line, width=2)
        if not (f[0].isascii() and f[0].isdigit()) or int(f[0]) in labels:
            raise DataError(
                f"{path}:{number}: expected a new non-negative integer index, then a tab and a label, got {line[:80]!r}"
            )
        labels[int(f[0])] = f[1]
    if not labels:
        raise DataError(f"{path}:1: the file has no ids; expected index<TAB>label lines")
    if sorted(labels) != list(range(len(labels))):
        raise DataError(
            f"{path}: the indices are not 0..{len(labels) - 1} (missing: "
            f"{min(set(range(len(labels))) - set(labels))}); LibKGE's ids are dense"
        )
    return [labels[i] for i in range(len(labels))]


def line_of(path: Path, row: int) -> int:
    """The line number of the row-th (0-based) non-blank line of `path`."""
    seen = -1
    for number, line in lines(path):
        seen += bool(line.strip())
        if seen == row:
            return number
    return 0
