"""The lasso app's design matrix X: dense (numpy) or sparse by columns (CSC, numba), one API.

A worker holds its block of rows as `Columns` (sparse: CSC over its rows) or `DenseColumns`; a
coordinate round needs x_j . r for the round's columns j and then r -= X[:, S] delta, so the
columns of a block are what is read: CSC reads exactly the round's nonzeros, where sparse rows
(CSR) would scan every nonzero of the block to find them (benchmarks/bench_lasso.py --kernels
measures both). The kernels loop over nonzeros in numba; nothing is densified: memory grows with
the nonzeros (12 bytes each: an int32 row, a float64 value) plus one offset per column.

`load(data)` reads --data: `all` and `synthetic:NxP:RHO` are dense; a libsvm/svmlight file or a
.pskvsp file (pskv.data.sparse, one reader for lr and lasso; the target in the label column) is
a `Csr`, its feature keys mapped to columns 0..p-1 in key order (`Csr.keys`), unless `dense`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numba
import numpy as np

from ..data import DataError, genes
from ..data.sparse import MAGIC, load as load_sparse

DENSE_LIMIT = 50_000_000  # values: --dense refuses a file larger than this


@dataclasses.dataclass
class Csr:
    """X by rows: `indptr` (n + 1,) int64, `cols` (nnz,) int32 in [0, p), `vals` (nnz,) float64;
    column j is feature key `keys[j]` of the file."""

    indptr: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    shape: tuple[int, int]
    keys: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def columns(self, lo: int = 0, hi: int | None = None) -> Columns:
        """Rows [lo, hi) by columns (CSC), row ids counted from lo."""
        hi = self.shape[0] if hi is None else hi
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        cols = self.cols[a:b]
        order = np.argsort(cols, kind="stable")  # (stable: rows ascending within a column)
        rows = np.repeat(np.arange(hi - lo, dtype=np.int32), np.diff(self.indptr[lo : hi + 1]))[order]
        ptr = np.zeros(self.shape[1] + 1, np.int64)
        np.cumsum(np.bincount(cols, minlength=self.shape[1]), out=ptr[1:])
        return Columns(ptr, rows, np.ascontiguousarray(self.vals[a:b][order]), hi - lo)

    def to_dense(self) -> np.ndarray:
        x = np.zeros(self.shape)
        x[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.cols] = self.vals
        return x


@dataclasses.dataclass
class Columns:
    """A block of rows of X by columns: column j's nonzeros are rows[ptr[j]:ptr[j + 1]] (ascending)
    with values vals[ptr[j]:ptr[j + 1]]."""

    ptr: np.ndarray
    rows: np.ndarray
    vals: np.ndarray
    n_rows: int

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(column sums, column sums of squares)."""
        return _col_sums(self.ptr, self.vals)

    def dots(self, chosen: np.ndarray, r: np.ndarray) -> np.ndarray:
        """x_j . r for j in chosen."""
        out = np.empty(len(chosen))
        _dots(self.ptr, self.rows, self.vals, chosen, r, out)
        return out

    def axpy(self, chosen: np.ndarray, delta: np.ndarray, r: np.ndarray) -> None:
        """r -= X[:, chosen] @ delta, in place, over the nonzeros of the chosen columns."""
        _axpy(self.ptr, self.rows, self.vals, chosen, np.asarray(delta, np.float64), r)


@dataclasses.dataclass
class DenseColumns:
    """A block of rows of a dense X, with Columns' methods."""

    x: np.ndarray

    @property
    def n_rows(self) -> int:
        return self.x.shape[0]

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x.sum(axis=0), (self.x**2).sum(axis=0)

    def dots(self, chosen: np.ndarray, r: np.ndarray) -> np.ndarray:
        return self.x[:, chosen].T @ r

    def axpy(self, chosen: np.ndarray, delta: np.ndarray, r: np.ndarray) -> None:
        r -= self.x[:, chosen] @ delta


def block(x, lo: int, hi: int):
    """Rows [lo, hi) of X (ndarray or Csr) by columns."""
    return DenseColumns(x[lo:hi]) if isinstance(x, np.ndarray) else x.columns(lo, hi)


@numba.njit(cache=True, nogil=True)
def _dots(ptr, rows, vals, chosen, r, out):  # pragma: no cover - compiled
    for k in range(len(chosen)):
        j = chosen[k]
        s = 0.0
        for e in range(ptr[j], ptr[j + 1]):
            s += vals[e] * r[rows[e]]
        out[k] = s


@numba.njit(cache=True, nogil=True)
def _axpy(ptr, rows, vals, chosen, delta, r):  # pragma: no cover - compiled
    for k in range(len(chosen)):
        d = delta[k]
        if d != 0.0:
            j = chosen[k]
            for e in range(ptr[j], ptr[j + 1]):
                r[rows[e]] -= vals[e] * d


@numba.njit(cache=True, nogil=True)
def _col_sums(ptr, vals):  # pragma: no cover - compiled
    p = len(ptr) - 1
    s, q = np.zeros(p), np.zeros(p)
    for j in range(p):
        for e in range(ptr[j], ptr[j + 1]):
            s[j] += vals[e]
            q[j] += vals[e] * vals[e]
    return s, q


def load(data: str, planted: int, seed: int, *, dense: bool = False) -> tuple[np.ndarray | Csr, np.ndarray]:
    """(X, y) of --data: X a float64 ndarray (all, synthetic, or a file with `dense`) or a Csr; y float64."""
    if data == "all":
        x = genes.all_expression()
        return x, genes.planted(x, planted, seed)[0]
    if data.startswith("synthetic:"):
        try:
            shape, corr = data.split(":")[1:]
            n, p = (int(v) for v in shape.split("x"))
            rho = float(corr)
        except ValueError:
            raise DataError(f"--data {data!r}: write synthetic:NxP:RHO, e.g. synthetic:400x2000:0.9") from None
        x = genes.correlated(n, p, rho, 10, seed)
        return x, genes.planted(x, planted, seed)[0]
    check(data)
    d = load_sparse(data, real_labels=True)
    keys, cols = _columns_of(np.asarray(d.keys))
    vals = np.ones(d.nnz) if d.values is None else np.asarray(d.values, np.float64)
    csr = Csr(np.asarray(d.indptr, np.int64), cols.astype(np.int32), vals, (d.rows, len(keys)), keys)
    y = np.asarray(d.labels, np.float64)
    if dense:
        if d.rows * len(keys) > DENSE_LIMIT:
            raise DataError(
                f"{data}: {d.rows} x {len(keys)} is too large to hold dense ({DENSE_LIMIT // 10**6}M "
                "values at most); leave out --dense: it is read sparse"
            )
        return csr.to_dense(), y
    return csr, y


def _columns_of(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys ascending, each entry's column among them): np.unique's, by a table where
    the keys are small integers (libsvm's indices), as they mostly are."""
    if len(keys) and int(keys.max()) < 4 * len(keys) + 1024:
        present = np.zeros(int(keys.max()) + 1, bool)
        present[keys] = True
        distinct = np.flatnonzero(present)
        return distinct.astype(np.uint64), (np.cumsum(present) - 1)[keys]
    return np.unique(keys, return_inverse=True)


def check(data: str) -> None:
    """Raise DataError unless file `data` exists and starts like what it claims: a .pskvsp file (its
    magic) or libsvm text (a first example line `label idx:value ...`). Cheap: reads the first
    lines only, so `pskv run` can refuse a wrong file before any node starts."""
    path = Path(data)
    if not path.is_file():
        raise DataError(
            f"--data {data}: no such file; give all, synthetic:NxP:RHO, a libsvm/svmlight file "
            "(the target in the label column) or a .pskvsp file"
        )
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.startswith(MAGIC):
        return
    if path.suffix == ".pskvsp":
        raise DataError(
            f"{data} is named .pskvsp but does not start with {MAGIC!r}: not a pskv sparse file; "
            "write one with `pskv data convert FILE.libsvm OUT.pskvsp`"
        )
    lines = [ln.split(b"#", 1)[0].split() for ln in head.split(b"\n")[: -1 if len(head) == 1 << 16 else None]]
    first = next((ln for ln in lines if ln), None)
    if first is None:
        raise DataError(
            f"{data}: no example line in its first {len(head)} bytes; expected libsvm/svmlight "
            "lines like `3.5 1:0.2 17:1` (target, then idx:value pairs)"
        )
    bad = next((t for t in first[1:] if not _pair(t)), None)
    try:
        target = float(first[0])
    except ValueError:
        target = None
    if target is None or bad is not None or b"\0" in head:
        what = f"{first[0][:20]!r} is not a number" if target is None else f"{(bad or b'')[:20]!r} is not idx:value"
        raise DataError(
            f"{data} is not a libsvm/svmlight file ({what} in its first example line); expected "
            "lines like `3.5 1:0.2 17:1` (target, then idx:value pairs) or a .pskvsp file"
        )


def _pair(token: bytes) -> bool:
    idx, _, value = token.partition(b":")
    try:
        return idx.isdigit() and np.isfinite(float(value))
    except ValueError:
        return False
