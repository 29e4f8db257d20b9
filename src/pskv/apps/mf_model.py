"""The matrix factorization model of the mf app: SGD over a batch of ratings, the summed item
gradients of a batch, squared error (numba, nogil: the worker threads of a node run them in
parallel), and the catch-up of prefetched rows. No cluster: the app (pskv.apps.mf) pulls item rows,
calls these, and pushes back."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def sgd_batch(U, bu, users, slots, values, V, mu, lr, lam, lam_b, biases):
    """Sequential SGD over one batch. U (n_users, k) and bu (n_users,) are this worker's; V is the
    batch's local copy of its distinct items, (n_slots, k + biases). Returns the squared error."""
    k = U.shape[1]
    sse = 0.0
    for j in range(users.shape[0]):
        u, s = users[j], slots[j]
        pred = mu
        for c in range(k):
            pred += U[u, c] * V[s, c]
        if biases:
            pred += bu[u] + V[s, k]
        e = values[j] - pred
        sse += e * e
        if biases:
            bu[u] += lr * (e - lam_b * bu[u])
            V[s, k] += lr * (e - lam_b * V[s, k])
        for c in range(k):
            uc, vc = U[u, c], V[s, c]
            U[u, c] = uc + lr * (e * vc - lam * uc)
            V[s, c] = vc + lr * (e * uc - lam * vc)
    return sse


@numba.njit(nogil=True, cache=True)
def gradient_batch(U, bu, users, slots, values, V, mu, lr, lam, lam_b, biases, G):
    """SGD on this worker's users, and the summed gradient of the batch's items into G (same shape as
    V, zeroed by the caller), taken at the pulled values V. Returns the squared error."""
    k = U.shape[1]
    sse = 0.0
    for j in range(users.shape[0]):
        u, s = users[j], slots[j]
        pred = mu
        for c in range(k):
            pred += U[u, c] * V[s, c]
        if biases:
            pred += bu[u] + V[s, k]
        e = values[j] - pred
        sse += e * e
        if biases:
            bu[u] += lr * (e - lam_b * bu[u])
            G[s, k] += -e + lam_b * V[s, k]
        for c in range(k):
            uc = U[u, c]
            U[u, c] = uc + lr * (e * V[s, c] - lam * uc)
            G[s, c] += -e * uc + lam * V[s, c]
    return sse


@numba.njit(nogil=True, cache=True)
def squared_error(U, bu, users, slots, values, V, mu, biases, lo, hi):
    """Sum of squared errors of the predictions (clipped to [lo, hi])."""
    k = U.shape[1]
    sse = 0.0
    for j in range(users.shape[0]):
        u, s = users[j], slots[j]
        pred = mu
        for c in range(k):
            pred += U[u, c] * V[s, c]
        if biases:
            pred += bu[u] + V[s, k]
        e = values[j] - min(max(pred, lo), hi)
        sse += e * e
    return sse


def catch_up(V: np.ndarray, keys: np.ndarray, pushed: np.ndarray, change: np.ndarray) -> None:
    """Rows V of `keys` (sorted, distinct) were read before this worker pushed `change` for `pushed`
    (sorted, distinct) with the `add` updater: add it to the rows of the keys in both. V then holds
    what a pull after that push reads (the same float32 sums; others' concurrent pushes aside)."""
    _, mine, theirs = np.intersect1d(keys, pushed, assume_unique=True, return_indices=True)
    V[mine] += change[theirs]
