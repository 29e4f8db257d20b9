"""The numba kernels of the update rules (updaters.rules): generic over float32/float64, numba
specialises them per dtype. They release the GIL (`nogil=True`) and are cached on disk (`cache=True`);
the caller holds the stripe locks of every row they touch. `dedupe_sum` numbers the distinct keys of
a sorted batch and sums their updates; the `*_rows` kernels then step each distinct row once.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def scatter_add(data, idx, upd, scale):  # pragma: no cover - compiled
    """data[idx[i]] += scale * upd[i] for each i; duplicates accumulate in order."""
    dim = data.shape[1]
    if dim == 1:  # one value per row: a flat loop the compiler can unroll
        d, u = data[:, 0], upd[:, 0]
        for i in range(idx.shape[0]):
            d[idx[i]] += scale * u[i]
        return
    for i in range(idx.shape[0]):
        r = idx[i]
        for j in range(dim):
            data[r, j] += scale * upd[i, j]


@numba.njit(nogil=True, cache=True)
def scatter_sgd(data, idx, upd, scale):  # pragma: no cover - compiled
    """data[idx[i]] = fma(scale, upd[i], data[idx[i]]): plain SGD rounded as torch's p.add_(g, alpha=-lr)."""
    dim = data.shape[1]
    for i in range(idx.shape[0]):
        r = idx[i]
        for j in range(dim):
            data[r, j] = fma(scale, upd[i, j], data[r, j])


@numba.njit(nogil=True, cache=True)
def scatter_assign(data, idx, upd):  # pragma: no cover - compiled
    """data[r] = sum of upd rows with idx == r: zero every target row, then scatter-add."""
    dim = data.shape[1]
    for i in range(idx.shape[0]):
        for j in range(dim):
            data[idx[i], j] = 0.0
    for i in range(idx.shape[0]):
        r = idx[i]
        for j in range(dim):
            data[r, j] += upd[i, j]


@numba.njit(nogil=True, cache=True)
def dedupe_sum(idx, upd, order, rows, summed):  # pragma: no cover - compiled
    """Sum runs of equal keys in sorted order into rows[:m], summed[:m]; return m, the distinct count."""
    dim = upd.shape[1]
    m = -1
    prev = -1
    for k in range(order.shape[0]):
        i = order[k]
        r = idx[i]
        if m < 0 or r != prev:
            m += 1
            rows[m] = r
            prev = r
            for j in range(dim):
                summed[m, j] = upd[i, j]
        else:
            for j in range(dim):
                summed[m, j] += upd[i, j]
    return m + 1


@numba.njit(nogil=True, cache=True)
def adagrad_rows(data, state, rows, summed, lr, eps):  # pragma: no cover - compiled
    dim = data.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(dim):
            g = summed[k, j]
            acc = state[r, j] + g * g
            state[r, j] = acc
            data[r, j] -= lr * g / (np.sqrt(acc) + eps)


@numba.njit(nogil=True, cache=True)
def sgd_rows(data, state, rows, summed, lr, momentum, weight_decay, nesterov):  # pragma: no cover - compiled
    """torch.optim.SGD's step on each distinct row (dampening 0): d = g + wd * w; b = m * b + d;
    d = d + m * b (nesterov) or b; w -= lr * d. `state` is the momentum buffer b (unused if m == 0)."""
    dim = data.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(dim):
            d = summed[k, j]
            if weight_decay != 0.0:
                d = fma(weight_decay, data[r, j], d)
            if momentum != 0.0:
                b = momentum * state[r, j] + d  # torch: buf.mul_(m).add_(d): two roundings
                state[r, j] = b
                d = fma(momentum, b, d) if nesterov else b
            data[r, j] = fma(-lr, d, data[r, j])


@numba.njit(nogil=True, cache=True, inline="always")
def fma(a, b, c):  # pragma: no cover - compiled
    """a * b + c rounded once, as torch's CPU kernels compute `c.add(b, alpha=a)` (a fused multiply-add):
    for float32 the product is exact in float64, so one float64 add and the cast to float32 round it
    (a second rounding that differs from the fused one only in ties nobody meets)."""
    return type(c)(np.float64(a) * np.float64(b) + np.float64(c))


@numba.njit(nogil=True, cache=True)
def adam_rows(data, state, rows, summed, lr, b1, b2, eps):  # pragma: no cover - compiled
    dim = data.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        t = state[r, 2 * dim] + 1.0  # per-row step count, stored as a float beside m and v
        state[r, 2 * dim] = t
        step = lr / (1.0 - b1**t)  # lr * mhat / m
        vscale = 1.0 / np.sqrt(1.0 - b2**t)  # sqrt(vhat) / sqrt(v); hoisted, one sqrt and divide per element
        for j in range(dim):
            g = summed[k, j]
            m = b1 * state[r, j] + (1.0 - b1) * g
            v = b2 * state[r, dim + j] + (1.0 - b2) * g * g
            state[r, j] = m
            state[r, dim + j] = v
            data[r, j] -= step * m / (np.sqrt(v) * vscale + eps)
