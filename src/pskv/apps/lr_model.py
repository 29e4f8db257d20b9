"""Sparse logistic regression's pieces that need no cluster: a worker's local view of its examples,
the numba kernels (margins, minibatch and block gradients), AUC and log loss, and the model file.

A worker keeps its examples' distinct feature keys `keys` (uint64, sorted, the bias key last) and
each nonzero's local column `col`, so weights live in a dense local array `w` (len(keys),) between
pulls. Every example also has the bias feature (BIAS_KEY, value 1), L1-penalised like the other
weights, as liblinear does.

The weight tables' keys (`KeySpace`): `Dense` gives every distinct training feature a row id, its
rank among them sorted as uint64 (every node computes the same from the same data), so the tables
are dense, hence shared in memory between the processes of a host; `Hashed` keeps the uint64 keys
(a sparse table). Either way a block (a range of the uint64 space) is a range of table keys.

The model file (`--out model.npz`, `save_model`/`load_model`) holds the non-zero weights by key
(uint64) and, for the built-in census data, their feature names; `predict(model, data)` gives
probabilities in a plain process, no cluster needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba
import numpy as np

from ..data import DataError
from ..data.sparse import SparseData

BIAS_KEY = 0xB1A5_B1A5_B1A5_B1A5  # the bias feature's key (a key no libsvm file or hash is likely to use)
_SPACE = 1 << 64


def block_width(blocks: int) -> int:
    """Block b is the uint64 keys [b * width, (b + 1) * width) (the last one ends at 2**64)."""
    return -(-_SPACE // blocks)


def block_bounds(blocks: int, b: int) -> tuple[int, int]:
    width = block_width(blocks)
    return min(b * width, _SPACE), min((b + 1) * width, _SPACE)


class Hashed:
    """key_space "uint64": the table's keys are the feature keys (a sparse table, rows made on first write)."""

    rows = None

    def __init__(self) -> None:
        self.declare = {"rows": None, "key_space": "uint64"}  # node.table's keywords

    def ids(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(table keys, which of `keys` have one: None for all)."""
        return keys, None

    def block(self, blocks: int, b: int) -> tuple[int, int]:
        """[lo, hi) of the table keys of block b."""
        return block_bounds(blocks, b)

    def local(self, table, rank: int, nodes: int) -> tuple[int, int]:
        """[lo, hi) of the table keys node `rank` manages (read from its memory)."""
        return table.local_range()

    def whole(self) -> tuple[int, int]:
        return 0, _SPACE

    def features(self, ids: np.ndarray) -> np.ndarray:
        """The feature keys of table keys `ids`."""
        return np.asarray(ids, np.uint64)


class Dense:
    """Every distinct training feature (and the bias) a row id: its rank in `keys`, sorted as uint64."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys  # (rows,) uint64, sorted
        self.rows = len(keys)
        self.declare = {"rows": self.rows}  # node.table's keywords

    @classmethod
    def of(cls, data: SparseData) -> Dense:
        return cls(np.union1d(distinct(np.asarray(data.keys, np.uint64)), np.array([BIAS_KEY], np.uint64)))

    def ids(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        at = np.minimum(np.searchsorted(self.keys, keys), self.rows - 1)
        found = self.keys[at] == keys
        return at.astype(np.int64), None if found.all() else found

    def block(self, blocks: int, b: int) -> tuple[int, int]:
        lo, hi = block_bounds(blocks, b)
        end = self.rows if hi == _SPACE else int(np.searchsorted(self.keys, np.uint64(hi)))
        return int(np.searchsorted(self.keys, np.uint64(lo))), end

    def local(self, table, rank: int, nodes: int) -> tuple[int, int]:
        return rank * self.rows // nodes, (rank + 1) * self.rows // nodes  # (placement.KeyRanges' cut)

    def whole(self) -> tuple[int, int]:
        return 0, self.rows

    def features(self, ids: np.ndarray) -> np.ndarray:
        return self.keys[np.asarray(ids, np.int64)]


KeySpace = Hashed | Dense


def distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct values of uint64 `keys`, sorted (one pass through a hash set: np.unique sorts all
    of them, 10x slower when few are distinct)."""
    if not len(keys):
        return np.empty(0, np.uint64)
    return np.sort(_distinct(keys))


@numba.njit(nogil=True, cache=True)
def _distinct(keys):  # pragma: no cover - compiled
    """Linear probing on a table kept at most half full (doubled, every key placed again, when it is)."""
    bits = 10
    table = np.empty(1 << bits, np.uint64)
    used = np.zeros(1 << bits, np.bool_)
    n = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        at = _slot(k, bits)
        while used[at] and table[at] != k:
            at = (at + 1) & ((1 << bits) - 1)
        if used[at]:
            continue
        used[at], table[at] = True, k
        n += 1
        if 2 * n > (1 << bits):
            old, was = table, used
            bits += 1
            table = np.empty(1 << bits, np.uint64)
            used = np.zeros(1 << bits, np.bool_)
            for j in range(old.shape[0]):
                if was[j]:
                    a = _slot(old[j], bits)
                    while used[a]:
                        a = (a + 1) & ((1 << bits) - 1)
                    used[a], table[a] = True, old[j]
    return table[used]


@numba.njit(nogil=True, cache=True, inline="always")
def _slot(k, bits):  # pragma: no cover - compiled
    """Fibonacci hashing: the top `bits` bits of k * 2**64 / phi."""
    return np.int64((k * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))


class Local:
    """A worker's examples with local columns: `keys` (m,) uint64 sorted + bias last, `col` (nnz,) int64."""

    def __init__(self, data: SparseData) -> None:
        raw = np.asarray(data.keys, np.uint64)
        known = distinct(raw)
        known = known[known != np.uint64(BIAS_KEY)]
        self.keys = np.append(known, np.uint64(BIAS_KEY))  # (m,) uint64
        self.bias = len(self.keys) - 1
        self.col = np.searchsorted(known, raw).astype(np.int64)  # (nnz,)
        self.indptr = np.asarray(data.indptr, np.int64)
        self.values = np.ones(1, np.float32) if data.values is None else np.asarray(data.values, np.float32)
        self.has_values = data.values is not None
        self.labels = np.asarray(data.labels, np.float32)
        self.rows = len(self.labels)

    def split(self, block_of: np.ndarray, blocks: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each block's part of the examples, (indptr, col, values) with the rows of all examples: a
        round of block b then touches only block b's nonzeros."""
        rows = np.repeat(np.arange(self.rows), np.diff(self.indptr))
        which = block_of[self.col]
        order = np.argsort(which, kind="stable")  # by block, rows in order within each
        bounds = np.searchsorted(which[order], np.arange(blocks + 1))
        parts = []
        for b in range(blocks):
            take = order[bounds[b] : bounds[b + 1]]
            indptr = np.zeros(self.rows + 1, np.int64)
            np.cumsum(np.bincount(rows[take], minlength=self.rows), out=indptr[1:])
            parts.append((indptr, self.col[take], self.values[take] if self.has_values else self.values))
        return parts

    def block_of(self, blocks: int) -> np.ndarray:
        """(m,) int64: the key-range block of each local feature (block_bounds)."""
        if blocks == 1:
            return np.zeros(len(self.keys), np.int64)
        return (self.keys // np.uint64(block_width(blocks))).astype(np.int64)


@numba.njit(nogil=True, cache=True, inline="always")
def _sigmoid(z):  # pragma: no cover - compiled
    if z >= 0:
        return 1.0 / (1.0 + np.exp(-z))
    e = np.exp(z)
    return e / (1.0 + e)


def margins(indptr, col, values, has_values, w, bias, out) -> None:
    """out[i] = w[bias] + sum of w[col[p]] * x_p over row i."""
    out[:] = 0.0
    add_margins(indptr, col, values, has_values, w, bias, out)


@numba.njit(nogil=True, cache=True)
def batch_gradient(rows, indptr, col, values, has_values, labels, w, bias, g, mark, stamp, touched):  # pragma: no cover
    """g[j] += sum over the batch `rows` of (sigmoid(margin) - y) x_j (bias included); columns not yet
    marked with `stamp` are marked and appended to `touched`; returns (their count, sum of log losses)."""
    n = 0
    loss = 0.0
    for k in range(rows.shape[0]):
        i = rows[k]
        s = w[bias]
        for p in range(indptr[i], indptr[i + 1]):
            s += w[col[p]] * (values[p] if has_values else 1.0)
        y = labels[i]
        loss += _logloss(s, y)
        r = _sigmoid(s) - y
        if mark[bias] != stamp:
            mark[bias] = stamp
            touched[n] = bias
            n += 1
        g[bias] += r
        for p in range(indptr[i], indptr[i + 1]):
            j = col[p]
            if mark[j] != stamp:
                mark[j] = stamp
                touched[n] = j
                n += 1
            g[j] += r * (values[p] if has_values else 1.0)
    return n, loss


@numba.njit(nogil=True, cache=True)
def block_gradient(indptr, col, values, has_values, labels, m, bias, bias_here, g, h, scale):  # pragma: no cover
    """For one block's part of the examples (every nonzero of `col` is the block's; `bias_here`: the
    bias is one of its features too): g[j] += scale * sum_i (sigmoid(m_i) - y_i) x_ij, and the
    diagonal curvature bound h[j] += scale * sum_i k_i sigmoid'(m_i) x_ij^2, where k_i counts row i's
    features in the block: since (sum_j x_ij d_j)^2 <= k_i sum_j x_ij^2 d_j^2, a step by these h
    never overshoots what the block's features do together."""
    for i in range(indptr.shape[0] - 1):
        k = indptr[i + 1] - indptr[i] + (1 if bias_here else 0)
        if k == 0:
            continue
        pr = _sigmoid(m[i])
        r = (pr - labels[i]) * scale
        c = pr * (1.0 - pr) * scale * k
        if bias_here:
            g[bias] += r
            h[bias] += c
        for p in range(indptr[i], indptr[i + 1]):
            j = col[p]
            x = values[p] if has_values else 1.0
            g[j] += r * x
            h[j] += c * x * x


@numba.njit(nogil=True, cache=True)
def add_margins(indptr, col, values, has_values, delta, bias, m):  # pragma: no cover - compiled
    """m_i += delta[bias] + sum of delta[col[p]] x_p (after a block's weights changed by delta)."""
    for i in range(indptr.shape[0] - 1):
        s = delta[bias]
        for p in range(indptr[i], indptr[i + 1]):
            s += delta[col[p]] * (values[p] if has_values else 1.0)
        m[i] += s


@numba.njit(nogil=True, cache=True, inline="always")
def _logloss(z, y):  # pragma: no cover - compiled
    """log(1 + exp(-z)) for y = 1, log(1 + exp(z)) for y = 0, without overflow."""
    t = z if y < 0.5 else -z
    return max(t, 0.0) + np.log1p(np.exp(-abs(t)))


@numba.njit(nogil=True, cache=True)
def loss_sum(m, labels):  # pragma: no cover - compiled
    s = 0.0
    for i in range(m.shape[0]):
        s += _logloss(m[i], labels[i])
    return s


# ---- AUC from score histograms (summed over workers) ---------------------------------------------------------------
AUC_BINS = 4096


def score_histogram(prob: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(2 * AUC_BINS,) counts of negatives then positives per probability bin (fine bins: ties within a
    bin count half, an AUC within about 1e-4 of the exact one)."""
    bins = np.minimum((prob * AUC_BINS).astype(np.int64), AUC_BINS - 1)
    pos = labels > 0.5
    return np.concatenate([np.bincount(bins[~pos], minlength=AUC_BINS), np.bincount(bins[pos], minlength=AUC_BINS)])


def auc_of_histogram(hist: np.ndarray) -> float:
    neg, pos = hist[:AUC_BINS].astype(np.float64), hist[AUC_BINS:].astype(np.float64)
    if neg.sum() == 0 or pos.sum() == 0:
        return float("nan")
    below = np.cumsum(neg) - neg  # negatives in lower bins
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


def auc(prob: np.ndarray, labels: np.ndarray) -> float:
    """Exact ROC AUC (ties count half), for one process."""
    order = np.argsort(prob, kind="mergesort")
    p, y = prob[order], labels[order] > 0.5
    _, first, counts = np.unique(p, return_index=True, return_counts=True)
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)  # average 1-based ranks of ties
    npos, nneg = int(y.sum()), int((~y).sum())
    if not npos or not nneg:
        return float("nan")
    return float((ranks[y].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))


# ---- the model file --------------------------------------------------------------------------------------------------
def save_model(path, keys: np.ndarray, weights: np.ndarray, names: dict[int, str] | None = None, **meta) -> Path:
    """Non-zero weights by key (uint64) to an .npz file (with feature names when known)."""
    path = Path(path)
    nz = weights != 0
    keys, weights = np.asarray(keys, np.uint64)[nz], np.asarray(weights, np.float64)[nz]
    arrays: dict[str, Any] = {"keys": keys, "weights": weights, "meta": np.array(repr(meta))}
    if names:
        arrays["names"] = np.array([names.get(int(k), "bias" if int(k) == BIAS_KEY else "") for k in keys.tolist()])
    np.savez(path, **arrays)
    return path


def load_model(path) -> dict:
    """{'keys': uint64 sorted, 'weights': float64, 'names': str or absent} from save_model's file."""
    try:
        with np.load(Path(path)) as f:
            model = {k: f[k] for k in f.files if k != "meta"}
    except (OSError, ValueError) as exc:
        raise DataError(
            f"{path} is not an lr model file ({exc}); write one with `pskv run lr -- --out FILE.npz`"
        ) from None
    order = np.argsort(model["keys"])
    return {k: v[order] for k, v in model.items()}


def predict(model: dict, data: SparseData) -> np.ndarray:
    """Probabilities of label 1 for every row of `data` (features missing from the model weigh 0)."""
    keys, weights = model["keys"], model["weights"]
    raw = np.asarray(data.keys)
    at = np.minimum(np.searchsorted(keys, raw), max(len(keys) - 1, 0))
    w = np.where((keys[at] == raw) if len(keys) else np.zeros(len(raw), bool), weights[at] if len(keys) else 0.0, 0.0)
    x = w if data.values is None else w * np.asarray(data.values)
    bias_at = np.searchsorted(keys, np.uint64(BIAS_KEY))
    bias = weights[bias_at] if bias_at < len(keys) and keys[bias_at] == np.uint64(BIAS_KEY) else 0.0
    m = np.add.reduceat(x, np.asarray(data.indptr[:-1])) if len(x) else np.zeros(data.rows)
    m[np.diff(np.asarray(data.indptr)) == 0] = 0.0  # (reduceat gives x[i] for empty rows)
    return 1.0 / (1.0 + np.exp(-(m + bias)))
