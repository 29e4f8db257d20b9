"""Owner: level 2 of node aggregation, at the owner of the keys (see pskv.client.aggregate for both levels).

Threads and ownership: `Owner` runs in pskv-server (remote nodes' sums, AGG_PUSH) and in worker
threads holding their Aggregator's `_send_lock` (this node's own keys); `_lock` guards its arrays
and is held while replies are enqueued (Transport.send only enqueues), never while calling back
into an Aggregator.
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import Header, Kind, Payload
from ..store.shard import Shard
from ..store.spec import TableSpec


class Owner:
    """Level 2 of one aggregated table at the owner of its keys (this node's manager range)."""

    def __init__(self, spec: TableSpec, shard: Shard, num_nodes: int, asynchronous: bool, endpoint: Endpoint) -> None:
        self.spec = spec
        self._shard = shard
        self._nodes = num_nodes
        self._rank = endpoint.rank
        self._async = asynchronous
        self._endpoint = endpoint
        m = shard.stop - shard.start
        if not asynchronous:  # BSP: the nodes' sums of a round, until every node sent its own
            self._acc = np.zeros((2, m, spec.dim), spec.dtype)  # (2, m, dim) by round % 2
            self._count = np.zeros((2, m), np.int64)  # nodes that sent round r, in [r % 2]
            self._label = np.full((2, m), -1, np.int64)  # the round each slot collects
            self._applied = np.zeros(m, np.int64)  # rounds applied per key
            self._rid = np.zeros((2, m, num_nodes), np.int64)  # each node's request id ...
            self._pos = np.zeros((2, m, num_nodes), np.int64)  # ... and the key's position in it
        self._lock = threading.Lock()  # guards all arrays above; held while enqueueing replies

    def serve(self, header: Header, p: Payload) -> list:
        """pskv-server: an AGG_PUSH from another node; returns this node's results, as apply() does.

        Raises ProtocolError."""
        keys = np.asarray(p.keys, np.int64)
        if len(keys) > 1 and not (np.diff(keys) > 0).all():
            raise ProtocolError(f"{header!r}: an aggregated push needs sorted distinct keys")
        rounds = np.full(len(keys), header.part, np.int64) if p.rounds is None else p.rounds
        assert p.values is not None  # (unpack: an AGG_PUSH carries values)
        return self.apply(header.origin, header.request_id, keys, rounds, p.values)

    def apply(self, origin: int, rid: int, keys: np.ndarray, rounds: np.ndarray, sums: np.ndarray) -> list:
        """Node `origin`'s sums (n, dim) of `rounds` of distinct `keys`. Replies to other nodes are
        sent; results for this node are returned as [(keys, rounds, values)]."""
        if len(keys) and (keys.min() < self._shard.start or keys.max() >= self._shard.stop):
            raise ProtocolError(
                f"aggregated push of keys outside node {self._rank}'s range of table {self.spec.name!r}"
            )
        with self._lock:
            if self._async:
                return self._apply_now(origin, rid, keys, rounds, sums)
            return self._collect(origin, rid, keys, rounds, sums)

    def _apply_now(self, origin, rid, keys, rounds, sums) -> list:
        if len(self._shard.push(keys, sums)):
            raise ProtocolError(f"node {self._rank} does not own all keys of an aggregated push")
        values = np.empty((len(keys), self.spec.dim), self.spec.dtype)  # (n, dim) sent zero-copy
        self._shard.pull(keys, values)
        return self._answer(origin, rid, keys, rounds, None, values)

    def _collect(self, origin, rid, keys, rounds, sums) -> list:
        idx = keys - self._shard.start
        slot = rounds & 1
        label = self._label[slot, idx]
        applied = self._applied[idx]
        if ((label != rounds) & (label != -1)).any() or (applied > rounds).any() or (applied < rounds - 1).any():
            raise ProtocolError(
                f"node {origin} sent rounds {rounds[:5].tolist()} of table {self.spec.name!r} "
                f"out of order (applied rounds {applied[:5].tolist()})"
            )
        self._label[slot, idx] = rounds
        self._acc[slot, idx] += sums
        self._count[slot, idx] += 1
        self._rid[slot, idx, origin] = rid
        self._pos[slot, idx, origin] = np.arange(len(idx))
        full = self._count[slot, idx] >= self._nodes
        if not full.any():
            return []
        done, dslot, drounds = idx[full], slot[full], rounds[full]
        dkeys = done + self._shard.start
        self._shard.push(dkeys, self._acc[dslot, done])  # the updater once, on the sum of all nodes
        values = np.empty((len(done), self.spec.dim), self.spec.dtype)  # (d, dim)
        self._shard.pull(dkeys, values)
        self._acc[dslot, done] = 0
        self._count[dslot, done] = 0
        self._label[dslot, done] = -1
        self._applied[done] = drounds + 1
        mine = []
        for node in range(self._nodes):
            rids = self._rid[dslot, done, node]
            for one in np.unique(rids):
                sel = rids == one
                mine += self._answer(
                    node, int(one), dkeys[sel], drounds[sel], self._pos[dslot[sel], done[sel], node], values[sel]
                )
        return mine

    def _answer(self, node: int, rid: int, keys, rounds, positions, values) -> list:
        """Rows after the rounds to `node`: a PULL_REPLY, or returned when `node` is this one."""
        if node == self._rank:
            return [(keys, rounds, values)]
        self._endpoint.answer(node, Kind.PULL_REPLY, self.spec.table_id, rid, positions=positions, values=values)
        return []
