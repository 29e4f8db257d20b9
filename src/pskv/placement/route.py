"""Routing: keys -> the node each must go to next, and per-destination parts. Pure functions.

Every path that sends keys somewhere routes here: a worker's pull/push/set (`next_hops`, `parts`),
a server forwarding keys it does not own (`forward_hops`), a localize asking the keys' managers,
and an aggregated push going to the keys' owners (`KeyRanges.manager_of`). Nothing here sends,
locks or keeps state; the shard's arrays (`slot`, `owner`) are read as they are now.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..store.shard import INCOMING, Shard
from .ranges import KeyRanges


def next_hops(keys: np.ndarray, shard: Shard, ranges: KeyRanges, me: int, loc_cache: np.ndarray) -> np.ndarray:
    """(n,) int64 next hop of each key: `me` (owned here), `ranges.nodes` (on its way here),
    the location cache's guess, the owner (keys this node manages), or the manager."""
    dest = np.empty(len(keys), np.int64)
    kernels.route(keys, shard.slot, ranges.bounds, ranges.managers, shard.owner, me, ranges.nodes, loc_cache, dest)
    return dest


def forward_hops(keys: np.ndarray, shard: Shard, ranges: KeyRanges, me: int) -> np.ndarray:
    """(n,) int64 next hop of keys a server does not own: -1 (on their way here), their owner (keys
    it manages; the new manager of a range it handed on), or their manager. Raises ProtocolError if
    the manager map names this node."""
    owner = shard.owner[keys].astype(np.int64)
    handed = owner <= -2
    owner[handed] = -2 - owner[handed]
    targets = owner if (owner >= 0).all() else np.where(owner >= 0, owner, ranges.manager_of(keys))
    targets[shard.slot[keys] == INCOMING] = -1
    stale = targets == me  # the manager map says here, yet it is not here: only while in flight
    if stale.any():
        raise ProtocolError(
            f"node {me} manages keys {keys[stale][:5].tolist()} of table {shard.spec.name!r} "
            "and records itself as owner, but does not hold them"
        )
    return targets


def parts(
    keys: np.ndarray, values: np.ndarray | None, dest: np.ndarray, buckets: int
) -> Iterator[tuple[int, np.ndarray | None, np.ndarray, np.ndarray | None]]:
    """(destination, positions, keys, values) per destination in [0, buckets), in key order within each.

    One destination: positions None and the arrays themselves (no copy); else fresh arrays."""
    first = dest[0]
    if (dest == first).all():
        yield int(first), None, keys, values
        return
    order = np.empty(len(keys), np.int64)  # (n,) positions grouped by destination
    counts = np.empty(buckets, np.int64)
    kernels.partition(dest, buckets, order, counts)
    start = 0
    for d in range(buckets):
        stop = start + int(counts[d])
        if stop > start:
            yield d, order[start:stop], *_take(keys, values, order, start, stop)
        start = stop


def _take(keys, values, order, s, e):
    pk = np.empty(e - s, np.int64)  # (m,) this part's keys, in request order
    kernels.take_keys(keys, order, s, e, 0, pk)
    pv = None
    if values is not None:
        pv = np.empty((e - s, values.shape[1]), values.dtype)  # (m, dim) this part's rows
        kernels.take_rows(values, order, s, e, pv)
    return pk, pv
