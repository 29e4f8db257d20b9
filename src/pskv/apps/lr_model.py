"""Sparse logistic regression's pieces that need no cluster: a worker's local view of its examples,
the numba kernels (margins, minibatch and block gradients), AUC and log loss, and the model file.

A worker keeps its examples' distinct feature keys `keys` (uint64, sorted, the bias key last) and
each nonzero's local column `col`, so weights live in a dense local array `w` (len(keys),) between
pulls. Every example also has the bias feature (BIAS_KEY, value 1), L1-penalised like the other
weights, as liblinear does.

The model file (`--out model.npz`, `save_model`/`load_model`) holds the non-zero weights by key
(uint64) and, for the built-in census data, their feature names; `predict(model, data)` gives
probabilities in a plain process, no cluster needed.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from ..data import DataError
from ..data.sparse import SparseData

BIAS_KEY = 0xB1A5_B1A5_B1A5_B1A5  # the bias feature's key (a key no libsvm file or hash is likely to use)


class Local:
    """A worker's examples with local columns: `keys` (m,) uint64 sorted + bias last, `col` (nnz,) int64."""

    def __init__(self, data: SparseData) -> None:
        raw = np.asarray(data.keys)
        distinct = np.unique(raw)
        distinct = distinct[distinct != np.uint64(BIAS_KEY)]
        self.keys = np.append(distinct, np.uint64(BIAS_KEY))  # (m,) uint64
        self.bias = len(self.keys) - 1
        self.col = np.searchsorted(distinct, raw).astype(np.int64)  # (nnz,)
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
            take = order[bounds[b]:bounds[b + 1]]
            indptr = np.zeros(self.rows + 1, np.int64)
            np.cumsum(np.bincount(rows[take], minlength=self.rows), out=indptr[1:])
            parts.append((indptr, self.col[take], self.values[take] if self.has_values else self.values))
        return parts

    def block_of(self, blocks: int) -> np.ndarray:
        """(m,) int64: the key-range block of each local feature (block b = [b, b + 1) * 2**64 / blocks)."""
        if blocks == 1:
            return np.zeros(len(self.keys), np.int64)
        return (self.keys // np.uint64(-(-(1 << 64) // blocks))).astype(np.int64)


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
    extra = {}
    if names:
        extra["names"] = np.array([names.get(int(k), "bias" if int(k) == BIAS_KEY else "") for k in keys.tolist()])
    np.savez(path, keys=keys, weights=weights, meta=np.array(repr(meta)), **extra)
    return path


def load_model(path) -> dict:
    """{'keys': uint64 sorted, 'weights': float64, 'names': str or absent} from save_model's file."""
    try:
        with np.load(Path(path)) as f:
            model = {k: f[k] for k in f.files if k != "meta"}
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not an lr model file ({exc}); write one with `pskv run lr -- --out FILE.npz`") from None
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
