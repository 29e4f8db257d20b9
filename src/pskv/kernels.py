"""Numba kernels of the data path: key checks, partitioning, gather/scatter of rows, row init.

All kernels are `nogil`, so worker threads and the server thread run them in parallel, and
`cache=True`, so every node process after the first loads them from disk instead of compiling.
They never allocate per key and never call back into Python. The update rules (add, sgd,
adagrad, ...) live in updaters.py.

Threads and ownership: pure functions over the arrays they are given; the caller holds the
stripe locks that protect a shard's rows.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True)


NONE = np.empty(0, np.int64)  # "no positions": an empty int64 array (also "nothing missing")


_SMALL = 16  # arrays up to this long: plain Python beats the call into numba (a few µs per call)


def key_range(keys):
    """(min, max) of a non-empty int array in one pass."""
    if keys.shape[0] <= _SMALL:
        values = keys.tolist()
        return min(values), max(values)
    return _key_range(keys)


@_jit
def _key_range(keys):
    lo = keys[0]
    hi = keys[0]
    for i in range(1, keys.shape[0]):  # branch-free min/max: vectorises, ~10x the if/elif form
        lo = min(lo, keys[i])
        hi = max(hi, keys[i])
    return lo, hi


@_jit
def route(keys, slot, bounds, managers, owner, me, here, cache, dest):
    """dest[i]: where key i goes. me: owned here (slot >= 0); `here`: in transfer to this node (slot
    -2: goes through our own server, which queues it); else the location cache's guess, the owner
    for keys this node manages (owner[k] >= 0), the node it handed their range to (owner[k] <= -2:
    node -2 - owner[k]), or the key's manager (managers[range])."""
    nodes = bounds.shape[0] - 1
    use_cache = cache.shape[0] > 0
    for i in range(keys.shape[0]):
        k = keys[i]
        s = slot[k]
        if s >= 0:
            dest[i] = me
        elif s == -2:
            dest[i] = here
        elif use_cache and cache[k] >= 0:
            dest[i] = cache[k]
        elif owner[k] >= 0:
            dest[i] = owner[k]
        elif owner[k] <= -2:
            dest[i] = -2 - owner[k]
        else:
            lo = 0
            hi = nodes - 1
            while lo < hi:  # last range whose start <= k
                mid = (lo + hi + 1) >> 1
                if bounds[mid] <= k:
                    lo = mid
                else:
                    hi = mid - 1
            dest[i] = managers[lo]


@_jit
def partition(dest, buckets, order, counts):
    """Stable counting sort of positions by dest[i] in [0, buckets): order (n,) out, counts (buckets,) out."""
    counts[:] = 0
    for i in range(dest.shape[0]):
        counts[dest[i]] += 1
    starts = np.empty(buckets, np.int64)
    acc = 0
    for d in range(buckets):
        starts[d] = acc
        acc += counts[d]
    for i in range(dest.shape[0]):
        d = dest[i]
        order[starts[d]] = i
        starts[d] += 1


@_jit
def resolve(slot, keys, slots):
    """slots[i] = slot[keys[i]] (the row in the shard's data, or < 0); returns how many are missing."""
    miss = 0
    for i in range(keys.shape[0]):
        s = slot[keys[i]]
        slots[i] = s
        if s < 0:
            miss += 1
    return miss


@_jit
def gather_slots(data, slots, out, pos, use_pos):
    """out[i] (or out[pos[i]]) = data[slots[i]] for slots[i] >= 0."""
    dim = data.shape[1]
    if dim == 1:
        d, o = data[:, 0], out[:, 0]
        for i in range(slots.shape[0]):
            s = slots[i]
            if s >= 0:
                o[pos[i] if use_pos else i] = d[s]
        return
    for i in range(slots.shape[0]):
        s = slots[i]
        if s < 0:
            continue
        p = pos[i] if use_pos else i
        for c in range(dim):
            out[p, c] = data[s, c]


@_jit
def assign_slots(data, slots, rows):
    """data[slots[i]] = rows[i] for slots[i] >= 0; with duplicate keys the last one wins."""
    dim = data.shape[1]
    for i in range(slots.shape[0]):
        s = slots[i]
        if s < 0:
            continue
        for c in range(dim):
            data[s, c] = rows[i, c]


@_jit
def take_keys(keys, order, start, stop, offset, out):
    """out[j] = keys[order[start + j]] - offset."""
    for j in range(stop - start):
        out[j] = keys[order[start + j]] - offset


@_jit
def take_rows(src, order, start, stop, out):
    """out[j, :] = src[order[start + j], :]."""
    dim = src.shape[1]
    for j in range(stop - start):
        i = order[start + j]
        for c in range(dim):
            out[j, c] = src[i, c]


@_jit
def gather(data, keys, offset, out):
    """out[i, :] = data[keys[i] - offset, :]."""
    dim = data.shape[1]
    if dim == 1:  # one value per row: a flat loop the compiler can unroll
        d, o = data[:, 0], out[:, 0]
        for i in range(keys.shape[0]):
            o[i] = d[keys[i] - offset]
        return
    for i in range(keys.shape[0]):
        r = keys[i] - offset
        for c in range(dim):
            out[i, c] = data[r, c]


@_jit
def gather_to(data, keys, offset, out, pos):
    """out[pos[i], :] = data[keys[i] - offset, :]  (local part of a partitioned pull)."""
    dim = data.shape[1]
    if dim == 1:
        d, o = data[:, 0], out[:, 0]
        for i in range(keys.shape[0]):
            o[pos[i]] = d[keys[i] - offset]
        return
    for i in range(keys.shape[0]):
        r = keys[i] - offset
        p = pos[i]
        for c in range(dim):
            out[p, c] = data[r, c]


@_jit
def put_rows(out, pos, rows):
    """out[pos[i], :] = rows[i, :]  (a reply part lands in the caller's order)."""
    dim = out.shape[1]
    if dim == 1:
        o, r = out[:, 0], rows[:, 0]
        for i in range(pos.shape[0]):
            o[pos[i]] = r[i]
        return
    for i in range(pos.shape[0]):
        p = pos[i]
        for c in range(dim):
            out[p, c] = rows[i, c]


@_jit
def assign(data, keys, offset, rows):
    """data[keys[i] - offset, :] = rows[i, :]; with duplicate keys the last one wins."""
    dim = data.shape[1]
    for i in range(keys.shape[0]):
        r = keys[i] - offset
        for c in range(dim):
            data[r, c] = rows[i, c]


@_jit
def touched_stripes(keys, stripes):
    """A bitmask with bit s set for every stripe s = key % stripes (<= 63) that `keys` touch."""
    bits = 0
    for i in range(keys.shape[0]):
        bits |= 1 << (keys[i] % stripes)
    return bits


@_jit
def _mix(z):
    # splitmix64 finaliser: a counter-based hash, so a row's value never depends on who computes it
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@_jit
def _unit(seed, index):
    """A float64 in (0, 1) from (seed, index)."""
    z = _mix(seed + np.uint64(index) * np.uint64(0x9E3779B97F4A7C15))
    return ((z >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@_jit
def init_rows(out, first_row, seed, kind, a, b):
    """Fill out (n, dim) with the initial values of rows first_row.. of a table.

    kind 0: constant a; 1: normal(mean=a, std=b); 2: uniform [a, b). Value (row, col) is a pure
    function of (seed, row * dim + col): the same on any number of nodes."""
    n, dim = out.shape
    s = np.uint64(seed)
    for i in range(n):
        base = (first_row + i) * dim
        for c in range(dim):
            idx = base + c
            if kind == 0:
                out[i, c] = a
            elif kind == 1:
                u1 = _unit(s, 2 * idx)
                u2 = _unit(s, 2 * idx + 1)
                out[i, c] = a + b * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
            else:
                out[i, c] = a + (b - a) * _unit(s, idx)
