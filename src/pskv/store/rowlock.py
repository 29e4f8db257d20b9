"""A shared shard's data path one row at a time (issue 31): numba kernels that hold a key's stripe
spinlock (store.spin) only while they read or update that key's row, so two processes working on
the same table interleave row by row instead of taking turns for whole batches.

    miss = rows_pull(shard, keys, out, pos)        # Shard.pull of a shared shard; None: take its stripes whole
    miss = rows_push(shard, keys, updates)         # Shard.push, for the rules below; else None
    miss = rows_push_distinct(shard, distinct, summed)   # the same, keys summed once already (summed_by_key)

Batches of WHOLE_FROM keys or more take their stripes whole instead (None from both): per row, a
lock word and a slot read cost about as much as the row copy itself (100k-key pulls ran at about
half the speed, and served across hosts 25-35% slower), and a batch that size holds the stripes
long enough anyway; the apps' batches (hundreds to a few thousand keys) go row by row.

Under each row's lock a kernel reads the key's slot (so it never touches a row that is moving:
relocation changes slots under every stripe) and checks that the shard's files are still the ones
it was given (the generation; a retired shard). A kernel returns where it stopped: done, a stripe
busy for too long (the caller yields or naps, frees a dead holder's lock, and resumes at that
key), or the files changed (the caller maps the new ones and resumes). Rows already done stay
done: a push is never applied twice. Rules with a row kernel here: `add` and `adagrad` (their
arithmetic is the same as updaters.rules', bit for bit); others take the batch's stripes whole.

Threads and ownership: any thread; the arrays are the shard's (or its peer view's).
"""

from __future__ import annotations

import os
import time

import numba
import numpy as np

from .. import kernels, updaters
from ..updaters import rules
from . import shm
from .spin import DEAD_AFTER, NAP, SPINS, STRIDE, YIELDS, cas, free_if_dead, still_waiting, store_release

DONE, BUSY, MOVED = 0, 1, 2
WHOLE_FROM = 8192


@numba.njit(nogil=True, cache=True, inline="always")
def _lock(words, s, me, spins):
    n = 0
    while cas(words, s * STRIDE, np.int32(0), me) != 0:
        n += 1
        if n >= spins:
            return False
    return True


@numba.njit(nogil=True, cache=True, inline="always")
def _current(meta, gen):
    return meta[2] == gen and meta[4] == 0  # (shm.GEN, shm.RETIRED)


@numba.njit(nogil=True, cache=True)
def _pull(data, slot, keys, out, pos, has_pos, miss, words, stripes, meta, gen, me, spins, k0):
    dim = data.shape[1]
    for k in range(k0, keys.shape[0]):
        key = keys[k]
        s = key % stripes
        if not _lock(words, s, me, spins):
            return k, BUSY
        if not _current(meta, gen):
            store_release(words, s * STRIDE, np.int32(0))
            return k, MOVED
        r = slot[key]
        if r < 0:
            miss[k] = True
        else:
            o = pos[k] if has_pos else k
            for j in range(dim):
                out[o, j] = data[r, j]
        store_release(words, s * STRIDE, np.int32(0))
    return keys.shape[0], DONE


@numba.njit(nogil=True, cache=True)
def _add(data, slot, keys, upd, miss, words, stripes, meta, gen, me, spins, k0):
    dim = data.shape[1]
    for k in range(k0, keys.shape[0]):
        key = keys[k]
        s = key % stripes
        if not _lock(words, s, me, spins):
            return k, BUSY
        if not _current(meta, gen):
            store_release(words, s * STRIDE, np.int32(0))
            return k, MOVED
        r = slot[key]
        if r < 0:
            miss[k] = True
        else:
            for j in range(dim):
                data[r, j] += upd[k, j]
        store_release(words, s * STRIDE, np.int32(0))
    return keys.shape[0], DONE


@numba.njit(nogil=True, cache=True)
def _adagrad(data, state, slot, keys, summed, lr, eps, miss, words, stripes, meta, gen, me, spins, k0):
    dim = data.shape[1]
    for k in range(k0, keys.shape[0]):
        key = keys[k]
        s = key % stripes
        if not _lock(words, s, me, spins):
            return k, BUSY
        if not _current(meta, gen):
            store_release(words, s * STRIDE, np.int32(0))
            return k, MOVED
        r = slot[key]
        if r < 0:
            miss[k] = True
        else:
            for j in range(dim):
                g = summed[k, j]
                acc = state[r, j] + g * g
                state[r, j] = acc
                data[r, j] -= lr * g / (np.sqrt(acc) + eps)
        store_release(words, s * STRIDE, np.int32(0))
    return keys.shape[0], DONE


@numba.njit(nogil=True, cache=True)
def _missed(keys, order, miss, out):
    """out[i] = True where keys[i]'s distinct key missed: the distinct keys are `keys` in the sorted
    `order`, numbered as rules.dedupe_sum numbers them; returns how many."""
    m, n = -1, 0
    for i in range(order.shape[0]):
        k = order[i]
        if i == 0 or keys[k] != keys[order[i - 1]]:
            m += 1
        if miss[m]:
            out[k] = True
            n += 1
    return n


def _run(shard, kernel, keys: np.ndarray, miss: np.ndarray, args) -> None:
    """Call `kernel(shard arrays..., *args)` until every key is done (see the module docstring)."""
    me = np.int32(os.getpid())
    words = shard.lock_words
    stripes = len(words) // STRIDE
    k, rounds, since = 0, 0, None
    while True:
        gen = shard.generation  # (before the arrays: _grow sets the arrays first, then the generation)
        k, why = kernel(*args(), miss, words, stripes, shard.meta, gen, me, SPINS, k)
        if why == DONE:
            return
        if why == MOVED:
            if not shard.follow():  # a view of a retired shard, or of a dead owner: the rest misses
                miss[k:] = True
                return
            continue
        rounds += 1
        if rounds <= YIELDS:
            os.sched_yield()
        else:
            time.sleep(NAP)
        now = time.monotonic()
        since = now if since is None else since
        if now - since > DEAD_AFTER:
            free_if_dead(words, int(keys[k]) % stripes, me)
            since = now
            still_waiting()  # (the node failed: a stopped holder may hold the stripe for good)


def rows_pull(shard, keys: np.ndarray, out: np.ndarray, pos) -> np.ndarray | None:
    if len(keys) >= WHOLE_FROM:
        return None
    miss = np.zeros(len(keys), np.bool_)
    has_pos = pos is not None
    p = pos if has_pos else kernels.NONE
    _run(shard, _pull, keys, miss, lambda: (shard.data, shard.slot, keys, out, p, has_pos))
    return np.flatnonzero(miss) if miss.any() else kernels.NONE


def rows_push(shard, keys: np.ndarray, updates: np.ndarray) -> np.ndarray | None:
    """Shard.push one row at a time for the rules that have a row kernel; None for the others."""
    rule = shard.spec.updater
    if len(keys) >= WHOLE_FROM:
        return None
    if type(rule) is updaters.Add:
        upd = np.ascontiguousarray(updates)
        miss = np.zeros(len(keys), np.bool_)
        _run(shard, _add, keys, miss, lambda: (shard.data, shard.slot, keys, upd))
        return np.flatnonzero(miss) if miss.any() else kernels.NONE
    if type(rule) is updaters.Adagrad:
        order = rules.stable_order(keys, shard.spec.rows)  # duplicates summed first, as Adagrad._apply does
        distinct, summed = summed_by_key(keys, updates, order, shard.spec)
        miss = np.zeros(len(distinct), np.bool_)
        _run(
            shard,
            _adagrad,
            distinct,
            miss,
            lambda: (shard.data, shard.state, shard.slot, distinct, summed, rule.lr, rule.eps),
        )
        if not miss.any():
            return kernels.NONE
        every = np.zeros(len(keys), np.bool_)  # every position of a key not held here
        _missed(keys, order, miss, every)
        return np.flatnonzero(every)
    return None


def summed_by_key(keys: np.ndarray, updates: np.ndarray, order: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys in ascending order and each one's updates summed in arrival order (as
    Adagrad._apply sums them): `order` is rules.stable_order(keys, spec.rows)."""
    acc = np.result_type(spec.dtype, updates.dtype)
    distinct = np.empty(len(keys), np.int64)
    summed = np.empty((len(keys), spec.dim), acc)
    m = rules.dedupe_sum(keys, np.ascontiguousarray(updates), order, distinct, summed)
    return distinct[:m], summed[:m]


def rows_push_distinct(shard, distinct: np.ndarray, summed: np.ndarray) -> np.ndarray | None:
    """rows_push of keys without duplicates (summed_by_key's): the same rows, without summing again.
    Returns the indices of `distinct` not held here, or None where rows_push would be None."""
    rule = shard.spec.updater
    if len(distinct) >= WHOLE_FROM or type(rule) not in (updaters.Adagrad, updaters.Add):
        return None
    miss = np.zeros(len(distinct), np.bool_)
    if type(rule) is updaters.Add:
        _run(shard, _add, distinct, miss, lambda: (shard.data, shard.slot, distinct, summed))
    else:
        _run(
            shard,
            _adagrad,
            distinct,
            miss,
            lambda: (shard.data, shard.state, shard.slot, distinct, summed, rule.lr, rule.eps),
        )
    return np.flatnonzero(miss) if miss.any() else kernels.NONE


assert (shm.GEN, shm.RETIRED) == (2, 4)  # (the meta words _current reads)
