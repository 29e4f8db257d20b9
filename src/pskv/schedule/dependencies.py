"""`dependencies` functions for a Scheduler (pskv.schedule): which candidate coordinates may be updated
in one round. `correlation_check` from standardized dense columns, `sparse_correlation_check` from the
nonzeros of sparse ones (a numba greedy pass); both keep the same sets, up to rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np


def correlation_check(columns: Callable[[np.ndarray], np.ndarray], rho: float) -> Callable[[np.ndarray], np.ndarray]:
    """A `dependencies` function: keeps candidates (in the order given) whose absolute correlation
    with every coordinate kept before is below `rho`, and while every kept coordinate's summed
    absolute correlation with the others stays below 1. The second rule bounds the largest
    eigenvalue of the kept columns' correlation matrix below 2 (Gershgorin), under which the
    simultaneous exact coordinate steps of a quadratic still descend; pairs alone do not: 16
    coordinates at 0.3 each can overshoot together. `columns(idx)` gives the candidates'
    standardized columns (n, len(idx)): zero mean, unit norm, so their Gram matrix is the correlations."""

    def safe(candidates: np.ndarray) -> np.ndarray:
        cols = columns(candidates)
        corr = np.abs(cols.T @ cols)
        np.fill_diagonal(corr, 0.0)
        kept: list[int] = []
        load = np.zeros(len(candidates))  # summed |correlation| of each kept one with the others kept
        for i in range(len(candidates)):
            row = corr[i, kept]
            if (row < rho).all() and row.sum() < 1.0 and (load[kept] + row < 1.0).all():
                load[kept] += row
                load[i] = row.sum()
                kept.append(i)
        return candidates[kept]

    return safe


def sparse_correlation_check(
    ptr: np.ndarray, rows: np.ndarray, vals: np.ndarray, n_rows: int, rho: float
) -> Callable[[np.ndarray], np.ndarray]:
    """correlation_check's rule for sparse columns, without a dense column or a Gram matrix: X by
    columns (CSC: column j's nonzeros are rows[ptr[j]:ptr[j + 1]], values vals[...]) over all
    `n_rows` rows. The centered correlation of columns i and j is (x_i . x_j - n m_i m_j) /
    (|x~_i| |x~_j|): the dot products come from the candidates' nonzeros only (each kept column's
    nonzeros go on per-row lists; a candidate walks the lists of its rows), the rest from the
    columns' means and centered norms, computed once here. Per call: O(nonzeros of the candidates +
    their overlaps + candidates x kept). Keeps the same sets as correlation_check, up to rounding."""
    ptr, rows = np.asarray(ptr, np.int64), np.asarray(rows, np.int64)
    vals = np.asarray(vals, np.float64)
    p = len(ptr) - 1
    col = np.repeat(np.arange(p), np.diff(ptr))
    sums = np.bincount(col, weights=vals, minlength=p)
    squares = np.bincount(col, weights=vals * vals, minlength=p)
    mean = sums / n_rows
    centered = squares - n_rows * mean * mean  # |x~_j|^2; a constant column correlates with nothing
    inv = np.where(centered > 1e-12 * np.maximum(squares, 1e-300), 1.0 / np.sqrt(np.maximum(centered, 1e-300)), 0.0)
    head = np.full(n_rows, -1, np.int64)  # per row: the last list entry of a kept column (scratch, reset per call)

    def safe(candidates: np.ndarray) -> np.ndarray:
        cand = np.asarray(candidates, np.int64)
        return cand[_sparse_greedy(ptr, rows, vals, mean, inv, float(n_rows), cand, float(rho), head)]

    return safe


@numba.njit(cache=True, nogil=True)
def _sparse_greedy(ptr, rows, vals, mean, inv, n, cand, rho, head):  # pragma: no cover - compiled
    c_count = len(cand)
    cap = 0
    for i in range(c_count):
        cap += ptr[cand[i] + 1] - ptr[cand[i]]
    nxt, kid, kval = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap)
    kept, load = np.empty(c_count, np.int64), np.zeros(c_count)
    dot, corr = np.zeros(c_count), np.empty(c_count)
    used, nk = 0, 0
    for i in range(c_count):
        ci = cand[i]
        for e in range(ptr[ci], ptr[ci + 1]):  # x_i . x_j for the kept j sharing a row with i
            q = head[rows[e]]
            while q >= 0:
                dot[kid[q]] += vals[e] * kval[q]
                q = nxt[q]
        ok, total = True, 0.0
        for k in range(nk):
            cj = cand[kept[k]]
            c = abs((dot[k] - n * mean[ci] * mean[cj]) * inv[ci] * inv[cj])
            dot[k] = 0.0
            corr[k] = c
            total += c
            if not c < rho:
                ok = False
        if ok and total < 1.0:
            for k in range(nk):
                if not load[k] + corr[k] < 1.0:
                    ok = False
                    break
        else:
            ok = False
        if ok:
            for k in range(nk):
                load[k] += corr[k]
            load[nk] = total
            for e in range(ptr[ci], ptr[ci + 1]):
                nxt[used], kid[used], kval[used] = head[rows[e]], nk, vals[e]
                head[rows[e]] = used
                used += 1
            kept[nk] = i
            nk += 1
    for k in range(nk):  # (the scratch back to empty for the next call)
        ci = cand[kept[k]]
        for e in range(ptr[ci], ptr[ci + 1]):
            head[rows[e]] = -1
    return kept[:nk]
