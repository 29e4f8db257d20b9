"""Sampling primitives (NuPS): draw keys from a table's distribution and pull them, mostly locally.

    t = node.table("ent", rows, dim, sampling=pskv.Sampling(weights, scheme="pool", reuse=4))
    h = t.prepare_sample(n)          # at most n keys will come out of this handle
    keys, vals = t.pull_sample(h, k)
    t.finish_sample(h)

Schemes:
- `naive`: draw k keys when asked and pull them. Exact.
- `preloc`: draw all n keys at prepare time and localize them ahead; hand them out in order. Exact.
- `pool`: draw ceil(n / reuse) keys, localize them all ahead (one LOCALIZE per manager), and use
  each exactly `reuse` times (in a shuffled order within groups of `group_size`); with
  `postpone=True`, keys whose relocation has not landed yet are moved later within their group.
  Approximate: draws are reused, but the multiset is exactly each drawn key `reuse` times.
  (Localizing one group ahead of the one handed out made a draw of the whole handle localize
  every group just before pulling it: each pull waited for its TRANSFERs; issue 11.)
- `onlylocal`: draw only among keys local now (owned or replicated), in proportion to their
  weights (or by rejection from a draw function). Biased towards what happens to be local.

preloc and pool localize under the table's `Relocate.lease`: keys another node moved to itself
recently stay there and are pulled remotely.

Threads and ownership: a handle belongs to the worker thread that prepared it.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..errors import ConfigError, TableError
from ..options import SCHEMES, Sampling


class SampleHandle:
    """Keys drawn for one worker: `drawn` is every key drawn so far (for checks), `left` how many
    keys the handle may still give out."""

    _ids = itertools.count()

    def __init__(self, table, n: int, scheme: str) -> None:
        self.table = table
        self.sampling: Sampling = table.state.sampling
        self.scheme = scheme
        self.left = n
        w = table.worker
        self.rng = np.random.default_rng(
            [self.sampling.seed, table.spec.table_id, w.rank, w.thread + 1, next(self._ids)]
        )
        self.drawn: list[np.ndarray] = []
        self.queue = np.empty(0, np.int64)  # keys prepared, in the order they will be handed out
        self.groups: list[np.ndarray] = []  # pool: groups still to be handed out
        self.closed = False

    def take(self, k: int) -> np.ndarray:
        k = min(k, self.left)
        if self.scheme == "naive":
            keys = self._draw(k)
        elif self.scheme == "onlylocal":
            keys = self._draw_local(k)
        else:
            keys = self._from_queue(k)
        self.left -= len(keys)
        return keys

    def _draw(self, k: int) -> np.ndarray:
        keys = self.sampling.draw(self.rng, k)
        self.drawn.append(keys)
        return keys

    def _from_queue(self, k: int) -> np.ndarray:
        while len(self.queue) < k and self.groups:
            self._next_group()
        keys, self.queue = self.queue[:k], self.queue[k:]
        if self.scheme == "pool" and self.sampling.postpone and len(self.queue):
            keys = self._postpone(keys)
        return keys

    def _next_group(self) -> None:
        self.queue = np.concatenate([self.queue, self.groups.pop(0)])  # localized at prepare

    def _postpone(self, keys: np.ndarray) -> np.ndarray:
        """Swap keys not local yet with local ones from later in the queue (same multiset)."""
        local = self.table.state.shard.owned(keys)
        later = self.table.state.shard.owned(self.queue)
        for i in np.flatnonzero(~local):
            swap = np.flatnonzero(later)
            if not len(swap):
                break
            j = swap[0]
            keys[i], self.queue[j] = self.queue[j], keys[i]
            later[j] = False
        return keys

    def _draw_local(self, k: int) -> np.ndarray:
        state = self.table.state
        if not callable(self.sampling.dist):
            assert isinstance(self.sampling.dist, np.ndarray)  # (options.Sampling made weights one)
            local = np.flatnonzero(state.shard.slot >= 0)
            if state.shard.replicas is not None:
                local = np.union1d(local, state.shard.replicas.keys)
            w = self.sampling.dist[local]
            if not len(local) or not w.sum() > 0:
                raise TableError(f"onlylocal sampling from table {self.table.name!r}: no local key has weight > 0")
            keys = local[self.rng.choice(len(local), size=k, p=w / w.sum())]
        else:
            got = []
            for _ in range(100):  # bounded rejection sampling
                cand = self.sampling.draw(self.rng, max(k, 16))
                got.append(cand[self.table.state.shard.owned(cand) | _replicated(state, cand)])
                if sum(map(len, got)) >= k:
                    break
            keys = np.concatenate(got)[:k]
        self.drawn.append(keys)
        return keys


def _replicated(state, keys: np.ndarray) -> np.ndarray:
    r = state.shard.replicas
    return np.zeros(len(keys), bool) if r is None else r.mask(keys)


def prepare(table, n: int, scheme: str | None) -> SampleHandle:
    sampling = table.state.sampling
    if sampling is None:
        raise TableError(
            f"table {table.name!r} has no sampling distribution; declare it with "
            "node.table(..., sampling=pskv.Sampling(weights))"
        )
    scheme = scheme or sampling.scheme
    if scheme not in SCHEMES:
        raise ConfigError(f"sampling scheme {scheme!r} is not one of {SCHEMES}")
    h = SampleHandle(table, int(n), scheme)
    if scheme == "preloc":
        h.queue = h._draw(h.left)
        table.localize(h.queue)
    elif scheme == "pool":
        reuse, size = sampling.reuse, sampling.group_size
        distinct = h._draw(-(-h.left // reuse))  # ceil(n / reuse) keys
        for lo in range(0, len(distinct), size):
            group = np.repeat(distinct[lo : lo + size], reuse)
            h.rng.shuffle(group)
            h.groups.append(group)
        if len(distinct):
            table.localize(distinct)
    return h


def checked(table, handle: SampleHandle) -> SampleHandle:
    if not isinstance(handle, SampleHandle) or handle.table is not table:
        raise TableError(f"that sample handle does not belong to table {table.name!r} of this worker")
    if handle.closed:
        raise TableError(f"sample handle of table {table.name!r} was finished; prepare a new one")
    return handle
