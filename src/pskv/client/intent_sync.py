"""Copies of keys several nodes intend (issue 35, AdaPM's replicas): made, served, synced and dropped on one node.

When two or more nodes' intent windows hold a key, its manager grants each of them a copy (an INTENT
with flag GRANT, server.intents; none to the node that owns the key). The grant lands in
`NodeIntents` (client.intents); the next `advance_clock` of one of the node's workers pulls the rows
of the granted keys that the node still intends and does not own, and installs them
(`Copies.make`, store.intent_replicas). From then on the table's request stage `Stage` serves the
node's pulls and pushes of those keys from the copy: a push is applied to the copy and summed for
the owner. The pskv-replica thread (client.replica_sync) syncs each table's copies every
`intent_sync` seconds (`Copies.round`; `pskv.Relocate(intent_sync=)`, else the node's
`pskv.init(intent_sync=)` / PSKV_INTENT_SYNC, 0.5 s; later when a round takes longer: one round in
flight per table; inf: no rounds, flushes only):

    the summed pushes of each copy since the last round   -> one push_pull to the keys' owners
    copies read since, or not refreshed for STALE rounds   -> one pull
    the replies                                           -> each copy's new base (store.intent_replicas.refresh)

With backups the push goes to the keys' chain heads as any push does (client.backed: applied by the
head, passed down the chain, answered by the tail; sent again with its request id to the new head
after a membership change, and applied once: server.applied), followed by one pull of its keys and
the others to the same heads, which answer it after the push (one link, in order).

A copy is dropped when no window of the node has held its key for `LINGER` seconds, or when the key
moved here: its unsent pushes go to the owner in the next round. A flush drops every copy and sends
their pushes: `worker.wait_replica_sync()`, a checkpoint, a leave, the close of a node's last worker
with windows, and each barrier (its node's last arrival, node.workers.settle, before it waits for the
node's requests): after a barrier every pull reads the owners' rows, which hold every push made
before it, as without copies. The keys still intended are told to their managers as starts again at
the next advance_clock (`NodeIntents.again`), and the copies come back with the managers' grants.
A copy whose pull was in flight during a flush is not installed (`IntentReplicas.flushes`). A set
of a copied key drops the copy first, sends its pushes and waits for those that rounds took before
it sends the set (`evict`, `Copies.settle`), so they reach the owner in the order they were made.

Exactness: pushes to a copy reach the key's owner exactly once (store.intent_replicas), through the
stages below this one (the owner's shard here, a co-located node's shard, or a plain request routed
to wherever the key lives). A sync's push passes no write gate: a checkpoint flushes the copies
after it closed the node's gate (collective.take), so its cut holds every push made before it.
Reads of a copy see the owner's row as of the last round plus this node's pushes since; as with
`pskv.Replicate`, another node's pushes show after its next round and this node's next one.

Threads and ownership: `Stage` runs in any thread; `make` in a worker thread (advance_clock);
`round` in pskv-replica, a flushing thread (under ReplicaSync's `_sending`) or a barrier's last
arrival, one at a time (`_round`); the replies' callbacks in pskv-server or a waiting thread. The
rows are store.intent_replicas' (under its lock).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..catalog import TableState
from ..errors import PskvError
from ..net.future import Future
from ..net.wire import Kind
from ..store.intent_replicas import IntentReplicas
from .context import Context
from .stages import Stage as _Stage
from .table import Table

if TYPE_CHECKING:
    from .intents import NodeIntents

LINGER = 5.0  # seconds a copy outlives its node's last window of the key (a key used again soon keeps it)
_create = threading.Lock()  # makes a table's IntentReplicas once


class Copies:
    """One table's copies on this node: the rows (`replicas`, made at the first grant) and the stage
    below the copies' stage, which reaches the keys' owners."""

    def __init__(self, state: TableState, ctx: Context, below: Any) -> None:
        self.state, self.ctx, self.below = state, ctx, below  # (below: the request stage after the copies')
        self.replicas: IntentReplicas | None = None
        self.rate = 2.0  # sync rounds a second (0: flushes only): the node's, `every`, once it made the table
        self.next_sync = 0.0  # when the pskv-replica thread syncs them next (its own bookkeeping)
        self._last: list[Future] = []  # the last round's requests: a round starts when they are done
        self._sent: list[Future] = []  # every round's requests not known to be done (a set waits for them)
        self._handle: Table | None = None
        self._round = threading.Lock()  # one round at a time: a flush's requests are issued after those of
        # a round in progress (a barrier's drain, which follows the flush, waits for both)

    def every(self, seconds: float) -> None:
        """The node's interval between two sync rounds (NodeConfig.intent_sync), unless the table has
        its own (`pskv.Relocate(intent_sync=)`); inf: no rounds."""
        own = self.state.options.placement.intent_sync
        self.rate = 1.0 / (seconds if own is None else own)
        if not self.rate:
            self.next_sync = float("inf")  # (not even a first round: a flush sends)

    def _h(self) -> Table:
        if self._handle is None:
            self._handle = Table(self.ctx, self.state, None)  # (no worker tracks a sync: ReplicaSync waits)
        return self._handle

    def _ensure(self) -> IntentReplicas:
        if self.replicas is None:
            with _create:
                if self.replicas is None:
                    self.replicas = IntentReplicas(self.state.spec)
            self.ctx.replica_sync.start()
        return self.replicas

    def make(self, keys: np.ndarray, intended: np.ndarray) -> Future | None:
        """Copies of the granted `keys` (sorted, distinct) that have none, are not owned here and are
        not replicated by pskv.Replicate: pull their rows from their owners, install those still
        intended here (`intended`: the node's count of windows per key) when they land."""
        reps = self._ensure()
        st = self.state
        keys = keys[(reps.index[keys] < 0) & (st.shard.slot[keys] < 0)]
        if st.shard.replicas is not None and len(keys):
            keys = keys[~st.shard.replicas.mask(keys)]
        if not len(keys):
            return None
        out = np.empty((len(keys), st.spec.dim), st.spec.dtype)  # (n, dim) the owners' rows
        flushes = reps.flushes

        def landed(f: Future) -> None:
            if f.exception() is None:
                wanted = intended[keys] > 0
                reps.install(keys[wanted], out[wanted], flushes)

        fut = self.below.request(self._h(), Kind.PULL, keys, None, out, None, False, False, None, False, None)
        fut.add_done_callback(landed)
        return fut

    def round(self, flush: bool) -> list[Future]:
        """One sync round (see the module docstring): drop the copies no window has held for LINGER
        seconds (or whose key moved here), send their leftover pushes, push_pull the others' pushes,
        pull the rest. `flush`: every copy is dropped and its pushes sent, whether or not the last
        round is done. Returns the round's Futures."""
        with self._round:
            return self._sync(flush)

    def _sync(self, flush: bool) -> list[Future]:
        reps, intents = self.replicas, cast("NodeIntents | None", self.state.intents)
        if reps is None or intents is None or (not flush and any(not f.done() for f in self._last)):
            return []
        if flush:
            dropped = reps.drop_all()
            intents.again(dropped[intents.active[dropped] > 0])
        else:
            held = reps.held()
            if len(held):
                idle = reps.idle(held, intents.active[held] > 0, time.monotonic() - LINGER)
                reps.drop(held[idle | (self.state.shard.slot[held] >= 0)])
        h, below, spec = self._h(), self.below, self.state.spec
        futures = []
        keys, pushes = reps.take_leftover()
        if len(keys):
            futures.append(below.request(h, Kind.PUSH, keys, pushes, None, None, False, False, None, False, None))
        number, keys, pushes, same = reps.take()
        parts: list[tuple[np.ndarray, np.ndarray | None]] = [(keys, pushes), (same, None)]
        if self.ctx.chains() is not None and len(keys):  # with backups: the push through the chain, then a pull
            futures.append(below.request(h, Kind.PUSH, keys, pushes, None, None, False, False, None, False, None))
            parts = [(np.concatenate([keys, same]), None)]  # (each key's pull follows its push to the same head)
        for k, v in parts:
            if not len(k):
                continue
            out = np.empty((len(k), spec.dim), spec.dtype)  # (n, dim) the owners' rows after the pushes
            kind = Kind.PULL if v is None else Kind.PUSH
            fut = below.request(h, kind, k, v, out, None, False, False, None, v is not None, None)
            fut.add_done_callback(functools.partial(_refreshed, reps, number, k, out))
            futures.append(fut)
        self._last = futures
        self._sent = [f for f in self._sent if not f.done()] + futures
        return futures

    def settle(self) -> None:
        """Wait until every push a round took has reached its owner (a set of copied keys: the pushes
        before it arrive first, although another thread sent them). A failed one fails elsewhere."""
        with self._round:  # (a round in progress has registered its requests)
            sent = list(self._sent)
        for f in sent:
            try:
                f.wait()
            except PskvError:
                pass  # (its error is the node's or its round's: ReplicaSync.flush raises it)

    def counters(self) -> dict:
        reps = self.replicas
        if reps is None:
            return {}
        return {
            "intent_copies": reps.live,
            "intent_copies_made": reps.installed,
            "intent_copies_dropped": reps.dropped,
            "intent_copy_keys_served": reps.served,
            "intent_copy_rounds": reps.rounds,
            "intent_copy_keys_synced": reps.keys_synced,
            "intent_copy_keys_refreshed": reps.keys_refreshed,
        }


def _refreshed(reps: IntentReplicas, number: int, keys: np.ndarray, rows: np.ndarray, fut: Future) -> None:
    """A round's reply: the owners' rows are the copies' new base (not when the request failed)."""
    if fut.exception() is None:
        reps.refresh(number, keys, rows)


class Stage(_Stage):
    """Keys with a copy here (Copies): pulls and pushes served from it, the rest to the next stage.
    Listed by Path.describe() once the table has copies."""

    name = "intent copies"
    next: Any  # the stage after this one (never None)

    def __init__(self, copies: Copies, nxt: Any) -> None:
        self.copies, self.next = copies, nxt

    def names(self) -> list[str]:
        return ([self.name] if self.copies.replicas is not None else []) + self.next.names()

    def request(self, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec) -> Future:
        reps = self.copies.replicas
        if reps is None or not reps.live or not len(keys):
            return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        if kind == Kind.SET:  # the copies' pushes first, then the set: in this order
            ek, eu = reps.evict(keys)
            if len(ek):
                self.next.request(h, Kind.PUSH, ek, eu, None, None, False, False, None, False, None)
            self.copies.settle()  # (what rounds took went from pskv-replica: applied before the set is sent)
            return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        miss = reps.serve("pull" if kind == Kind.PULL else "push", keys, values, out, gpos, rows)
        if miss is None:
            return self.next.request(h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
        return self.rest(self.copies.state, miss, h, kind, keys, values, out, gpos, copy, fresh, direct, rows, codec)
