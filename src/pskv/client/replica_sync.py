"""Hot-key replication (NuPS): the pskv-replica thread that sends each node's changes of its replicas.

The replicas themselves (`store.Replicas`) live in the store; this module sends each node's
accumulated changes of them to every other node, `Replicate.syncs_per_sec` times a second per
table, as REPLICA_SYNC (the other nodes' servers add them and acknowledge). With backups it sends to
the live nodes only, and a round stops waiting for a node that died (the `retry` the tracker
calls after a membership change): a node's changes it had not sent yet die with it.

A node sends to its replicas' `peers` that are members: the nodes it started with, and each node
that joined later once that node caught up (store.replicas). A node that joined asks every member
for its changes so far (`catch_up`: REPLICA_SYNC with flag ROWS, answered by PULL_REPLY), so its
copies start at the cluster's current values and each change reaches it exactly once. Syncing
runs whenever another member is a peer, also in a cluster that started with one node.

The thread also syncs the copies that intents make of keys several nodes intend (client.intent_sync:
`Copies.round`, each table's `Copies.rate` times a second, one round in flight), and `flush` sends
theirs too, dropping the copies no window holds any more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from ..catalog import Catalog, CopiesPart, TableState
from ..net.endpoint import Endpoint
from ..net.future import Future, wait
from ..net.wire import ROWS, Kind


class ReplicaSync:
    """The pskv-replica thread: sends each replicated table's accumulated changes to every other node.

    Threads and ownership: the thread only reads TableState and calls Replicas.take_deltas, which
    locks; `flush()` may run in any thread at the same time (each delta is taken exactly once), and
    `catch_up()` in the thread that declares a table."""

    def __init__(
        self,
        endpoint: Endpoint,
        num_nodes: int,
        catalog: Catalog,
        stop: threading.Event,
        failed: Callable[[], bool],
        members: Callable[[], list[int]] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self.rank = endpoint.rank
        self._catalog = catalog
        self._stop = stop  # the node is shutting down
        self._failed = failed  # the node failed: stop syncing
        self._members = members or (lambda: list(range(num_nodes)))  # the live nodes: joins, leaves, deaths
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards _inflight and _thread
        self._inflight: list[Future] = []  # sync rounds not yet acknowledged by every node
        # one round at a time, from its take to its Future in _inflight: a flush (leave, checkpoint)
        # waits for a round the thread is sending, not only for those already registered
        self._sending = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"pskv-replica-{self.rank}", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.join(2)

    def flush(self, timeout: float | None = None) -> None:
        """Send every change not yet sent, and wait until every node has applied all rounds so far
        (copies of intended keys: until their owners have)."""
        for s in self._tables():
            self._round(s, threshold=0.0)
        for copies in self._copied():
            self._copies_round(copies, flush=True)
        with self._lock:
            futures, self._inflight = self._inflight, []
        wait(*futures, timeout=timeout)

    def catch_up(self, state: TableState, timeout: float) -> None:
        """This node joined a running cluster and declared `state`'s table: add every other member's
        changes of its replicas so far (each member sends it its later ones from its answer on).
        Blocks until every member answered."""
        replicas = state.shard.replicas
        others = [r for r in self._members() if r != self.rank]
        if replicas is None or not len(replicas.keys) or not others:
            return
        keys = replicas.keys

        def on_part(sender: int, reply) -> None:
            replicas.caught_up(sender, keys, reply[1].values)  # (m, dim) its changes so far

        rid, fut = self._endpoint.tracker.new_request(
            len(keys) * len(others), on_part=on_part, desc=f"replica catch-up of table {state.spec.name!r}"
        )
        zeros = np.zeros((len(keys), state.spec.dim), state.spec.dtype)  # (m, dim): REPLICA_SYNC carries values
        for r in others:
            self._endpoint.request(r, Kind.REPLICA_SYNC, state.spec.table_id, rid, flags=ROWS, keys=keys, values=zeros)
        fut.wait(timeout)

    def _tables(self) -> list[TableState]:
        return [s for s in self._catalog.tables() if s.shard.replicas is not None]

    def _copied(self) -> list[CopiesPart]:
        """The tables' copies of intended keys, where there are some (client.intent_sync)."""
        return [s.copies for s in self._catalog.tables() if s.copies is not None and s.copies.replicas is not None]

    def _run(self) -> None:
        while not self._stop.is_set() and not self._failed():
            now = time.monotonic()
            for s in self._tables():
                if s.next_sync > now:
                    continue
                replicate = s.options.replicate
                assert replicate is not None  # (a table has replicas exactly when it was declared with Replicate)
                rate = replicate.syncs_per_sec
                s.next_sync = now + (1.0 / rate if rate > 0 else float("inf"))
                self._round(s, replicate.threshold)
            for copies in self._copied():
                if copies.next_sync <= now:
                    copies.next_sync = now + (1.0 / copies.rate if copies.rate > 0 else float("inf"))
                    self._copies_round(copies, flush=False)
            upcoming = min(
                [s.next_sync for s in self._tables()] + [c.next_sync for c in self._copied()], default=now + 0.1
            )
            self._stop.wait(min(0.1, max(0.001, upcoming - time.monotonic())))

    def _round(self, s: TableState, threshold: float) -> None:
        """Send the table's changes to its peers that are members; the round's Future joins _inflight."""
        with self._sending:
            fut = self._send(s, threshold)
            if fut is not None:
                with self._lock:
                    self._inflight = [f for f in self._inflight if not f.done()] + [fut]

    def _copies_round(self, copies: CopiesPart, flush: bool) -> None:
        """A sync round of the table's copies of intended keys; its requests join _inflight."""
        with self._sending:
            futures = copies.round(flush)
            if futures:
                with self._lock:
                    self._inflight = [f for f in self._inflight if not f.done()] + futures

    def _send(self, s: TableState, threshold: float) -> Future | None:
        replicas = s.shard.replicas
        assert replicas is not None  # (_tables: the tables with replicas)
        keys, deltas, peers = replicas.take_deltas(threshold)  # (taken with no peers too: they count as sent)
        if not len(keys):
            return None
        members = self._members()
        others = [r for r in members if r != self.rank and r in peers]
        if not others:
            return None
        tracker = self._endpoint.tracker
        answered: set[int] = set()
        lock = threading.Lock()  # retry may run in pskv-server and in this thread at once

        def on_part(sender: int, _payload) -> None:
            with lock:
                answered.add(sender)

        def retry() -> None:
            """A membership change (backups): a node that died will not answer; count it as done."""
            alive = set(self._members())
            with lock:
                dead = [r for r in others if r not in alive and r not in answered]
                answered.update(dead)
            for r in dead:
                tracker.on_reply(rid, len(keys), r)

        rid, fut = tracker.new_request(
            len(keys) * len(others), on_part=on_part, retry=retry, desc=f"replica sync of table {s.spec.name!r}"
        )
        for r in others:
            self._endpoint.request(r, Kind.REPLICA_SYNC, s.spec.table_id, rid, copy=True, keys=keys, values=deltas)
        if self._members() != members:  # a membership change came while we sent: its retry may have run first
            retry()
        replicas.syncs += 1
        replicas.keys_sent += len(keys)
        return fut
