"""A batch whose keys span several key ranges, cut into one slice per range (issue 31).

An app's batch is often np.unique's: sorted and distinct. Then each range's keys are one slice of it
(np.searchsorted on the range bounds), which is served or sent as it is: this node's slice and a
co-located node's from memory, every other slice as one message to its manager, the arrays views of
the caller's (no per-key partition, no copy), in one request (client.route.Route.slices). A push of
sorted distinct keys is applied without summing duplicates first (`Shard.push_distinct`). A push whose
updater sums a key's updates before it applies them (Adagrad) is summed here first when its keys are
not sorted: np.unique's order, one row per key, fewer bytes on the wire, nothing to sum at the owners.

Without this, a sorted batch half of whose keys another node manages went through a locked pass over
every key here (an Adagrad push summed them all), a copy of the other half, and on the node whose first
key is not its own, a per-key partition and a copy (client.stages.Owned, Shared): MF's pushes and pulls
across 2 emulated hosts spent a third of the worker's time there (benchmarks/RESULTS.md).

Only for tables whose keys never moved here (`Shard.static`) and that keep no location cache: each
range's keys are then at its manager, or the manager forwards them. `client.stages.Owned` calls
`request` first; None sends it on its usual way.
"""

from __future__ import annotations

import numpy as np

from .. import updaters
from ..net.future import Future
from ..net.wire import Kind
from ..store import rowlock
from ..updaters import rules


def increasing(keys: np.ndarray) -> bool:
    """The keys are sorted and distinct (np.unique's)."""
    return bool((keys[1:] > keys[:-1]).all())


def request(route, state, h, kind, keys, values, out, gpos, copy, fresh, direct, codec) -> Future | None:
    """Send a PULL or PUSH of several ranges' keys as slices through `route` (client.route.Route);
    None when it is not such a batch (one range, unsorted pulls, a table whose keys moved)."""
    ranges = state.ranges
    if ranges.num_ranges < 2 or not state.shard.static or state.loc_cache.size or ranges.one_range(keys) >= 0:
        return None
    if not increasing(keys):
        if kind != Kind.PUSH or type(state.spec.updater) is not updaters.Adagrad:
            return None
        keys, values = rowlock.summed_by_key(keys, values, rules.stable_order(keys, state.spec.rows), state.spec)
        copy = False
    cuts = np.searchsorted(keys, ranges.bounds).tolist()
    parts = []
    for r in range(ranges.num_ranges):
        a, b = cuts[r], cuts[r + 1]
        if a < b:
            pos = None if kind != Kind.PULL else slice(a, b) if gpos is None else gpos[a:b]
            parts.append((int(ranges.managers[r]), keys[a:b], None if values is None else values[a:b], pos))
    return route.slices(h, kind, parts, out, copy, fresh, direct, codec)
