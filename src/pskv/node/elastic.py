"""A node's part in membership changes and elastic membership (docs/design.md):

    MembershipChanges  pskv-server's side of MEMBERSHIP: new view, ranges, chains, requests sent
                       again, the user's callbacks; DRAINED once a node that left is drained
    take_share(...)   a node that joined a running cluster takes its share of each table it declares
    check_leave(...)  what a node cannot take with it when it leaves (ConfigError, before anything moves)
    hand_over(...)    a node leaving without backups gives every row and key range away (sparse too)

They work on the parts they are given; the Node owns those parts and their threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from ..catalog import Catalog, TableState
from ..errors import ClusterError, ConfigError
from ..membership import join
from ..membership.view import View
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.transport import Transport
from ..server import handoff
from ..server.serve import Server
from ..store.shard import Store

log = logging.getLogger(__name__)


class MembershipChanges:
    """What a node does when membership changes. pskv-server alone calls `changed` and `drained`;
    `callbacks` is appended to by the Node's owner thread before the changes it wants to see."""

    def __init__(
        self,
        rank: int,
        view: View,
        transport: Transport,
        server: Server,
        store: Store,
        catalog: Catalog,
        tracker: RequestTracker,
        release_held: Callable[[], None],
        report: Callable[[int], None],
    ) -> None:
        self.rank, self.view, self.transport, self.server, self.store = rank, view, transport, server, store
        self.catalog, self.tracker, self.release_held, self.report = catalog, tracker, release_held, report
        self.callbacks: list[Callable[[list[int]], None]] = []
        self.count = 0  # membership changes seen (the metrics exporter reads it)
        self.drain_mark: tuple[int, int] | None = None  # (epoch, request id): report DRAINED once below it

    def changed(self, payload: dict) -> None:
        """At MEMBERSHIP: new chains, promoted ranges and snapshots, held messages, requests sent
        again to the new heads, then the user's callbacks."""
        epoch, dead = int(payload["epoch"]), int(payload["dead"])
        backups = self.server.backups
        if backups is not None:
            backups.copies.batches.flush()  # what this epoch passed on leaves stamped with it
        self.count += 1
        previous = self.view.change(
            epoch,
            [int(r) for r in payload["alive"]],
            payload.get("managers"),
            [int(r) for r in payload.get("leaving", ())],
            payload.get("addresses"),
            payload.get("outside", ()),
        )
        for rank, address in (payload.get("addresses") or {}).items():
            self.transport.set_address(int(rank), address)
        # tables this node declared whose TABLE_OK has not come (membership.client): built for the members
        # before this change, and no write reached them on any node yet (issue 30 F10d)
        unfinished = {s.spec.table_id for s in self.catalog.tables() if s.spec.name in payload.get("unfinished", ())}
        if previous is not None and backups is not None:
            backups.failover.on_membership(previous, self.store.get, unfinished, self.view.alive)
        for state in self.catalog.tables():  # what nodes now gone changed of the replicas: the lowest answers for it
            if state.shard.replicas is not None:
                state.shard.replicas.retire(self.view.alive, self.rank)
        if "managers" in payload:  # without backups: ranges changed hands; nothing may route to who left
            for state in self.catalog.tables():
                state.ranges = self.view.key_ranges(state.spec.rows)
                if state.spec.table_id in unfinished:
                    _adopt_unmanaged(state, self.rank)
                if state.loc_cache.size:
                    state.loc_cache[np.isin(state.loc_cache, list(self.view.leaving))] = -1
            self.drain_mark = (epoch, self.tracker.issued())
        self.release_held()
        resent = self.tracker.retry_all()
        what = "left" if payload.get("left") else f"failed ({payload.get('reason')})"
        if "joined" in payload:
            dead, what = int(payload["joined"]), "joined"
        elif "entered" in payload:  # with backups: a node that joined now ends some chains (membership.joining)
            dead, what = int(payload["entered"]), "entered the chains"
        members = sorted(self.view.alive)
        log.warning(
            "node %d: node %d %s; membership epoch %d, members %s; %d request(s) sent again",
            self.rank,
            dead,
            what,
            epoch,
            members,
            resent,
        )
        for fn in self.callbacks:
            try:
                fn(members)
            except Exception:  # a user's callback must not stop pskv-server
                log.exception("node %d: on_membership_change callback %r raised", self.rank, fn)

    def drained(self, now: float) -> None:
        """Every loop of pskv-server: after a node left, tell the coordinator once every earlier
        request is answered."""
        mark = self.drain_mark
        if mark is not None and self.tracker.low_watermark() >= mark[1]:
            self.drain_mark = None
            self.report(mark[0])


def _adopt_unmanaged(state: TableState, rank: int) -> None:
    """A table whose declaration is under way, at a change of range managers: take each range now managed
    here that no node handed over (its `owner` entries all -1: its former manager, who left, never built
    the table), with fresh rows, as a node building the table in the new epoch does (node.tables)."""
    if state.spec.sparse:  # (a sparse shard takes any key of the ranges routed to it: nothing to adopt)
        return
    shard = state.shard
    for r in state.ranges.managed_by(rank):
        lo, hi = state.ranges.range_bounds(r)
        if (shard.owner[lo:hi] == -1).all():
            shard.adopt(lo, hi, rank)
            log.info(
                "node %d now manages key range %d of table %r, declared while it changed hands (%d rows)",
                rank,
                r,
                state.spec.name,
                hi - lo,
            )


def take_share(state: TableState, joined: dict, localize: Callable, rank: int, timeout: float) -> None:
    """A node that joined a running cluster takes its share of a table's rows from every key range
    (membership.join.share), by relocation forced past leases (`localize(keys)`: the main thread's
    table handle's); blocks until they are here. With backups it takes none: rows stay on their
    chains, and the node holds copies at their ends instead (membership.joining). Of a sparse table it
    takes none: it holds only the ranges later leaves hand to it (a range moves whole: SparseRanges)."""
    if joined.get("backups") or state.spec.sparse:
        return
    members, joiners = len(joined["alive"]), joined["joiners"]
    ranges, parts = state.ranges, []
    for r in range(ranges.num_ranges):
        lo, hi = ranges.range_bounds(r)
        taken = sum((hi - lo) // int(m) for _, m in joiners)
        a, b = join.share(lo, hi, taken, members)
        parts.append(np.arange(a, b, dtype=np.int64))
    keys = np.concatenate(parts)
    if len(keys) and state.aggregator is None:
        localize(keys).wait(timeout)
        log.info("node %d took %d rows of table %r", rank, len(keys), state.spec.name)


def check_leave(rank: int, catalog: Catalog, backups: int) -> None:
    """ConfigError for tables a leaving node cannot hand over."""
    aggregated = [s.spec.name for s in catalog.tables() if s.aggregator is not None]
    if not backups and aggregated:
        raise ConfigError(
            f"node {rank}: leave() without backups cannot move the aggregation state of "
            f"table(s) {aggregated} (pskv.NodeAggregate); start the cluster with backups=1"
        )


def hand_over(
    plan: list[int],
    timeout: float,
    *,
    rank: int,
    catalog: Catalog,
    tracker: RequestTracker,
    endpoint: Endpoint,
    soon: Callable[[Callable[[], None]], None],
    check: Callable[[], None],
) -> None:
    """Without backups: give every row and key range away (server.handoff) and wait for the ACKs.
    The sends run in pskv-server (`soon`), which alone writes the manager maps; the calling
    thread waits, checking the node's health (`check`)."""
    started: list = []

    def give() -> None:
        try:
            tables = [(s.spec.table_id, handoff.give(s.shard, s.ranges, rank, plan)) for s in catalog.tables()]
            total = sum(m[-1] for _, messages in tables for m in messages)
            rid, fut = tracker.new_request(total, desc=f"node {rank} hands its rows over (leave)")
            for table, messages in tables:
                handoff.send(endpoint, table, rid, messages)
            started.append(fut)
        except BaseException as exc:  # noqa: BLE001 - raised in the leaving thread
            started.append(exc)

    soon(give)
    deadline = time.monotonic() + timeout
    while not started:
        check()
        if time.monotonic() > deadline:
            raise ClusterError(f"node {rank}: its server did not start the handover within {timeout:g} s")
        time.sleep(0.001)
    if isinstance(started[0], BaseException):
        raise started[0]
    started[0].wait(timeout)
