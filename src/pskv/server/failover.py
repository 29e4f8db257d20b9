"""Failover of a cluster with backups: a table's copies, promotion, snapshots and re-replication.

A table's declaration (`add_table`) gives this node a fresh copy of each range whose chain it is
in (a row's initial value depends only on table and row), and the ranges it heads beyond its own
(a table declared after a failure) into its store.

A membership change (`on_membership`): a node that becomes head of a range promotes its backup
copy into its store; the head of every range whose chain changed sends a SNAPSHOT (rows, state,
applied ids, readers, rounds) down the new chain, each member installing it and passing it on, so a
new tail is filled (re-replication) and every copy equals the head's. A member whose predecessor
changed (it is new, or the one before it died) waits for that snapshot: it is *filling*, not yet a
safe copy, and its tail's ROWS answers wait too (server.chain); when none is filling the node tells
the coordinator (SYNCED). A SNAPSHOT with flag READER is a reader's copy (server.reader_copies).

Threads and ownership: everything runs in pskv-server but `add_table` (the main thread, at a
table's declaration); `Copies.lock` orders the two. The state is the node's `Copies` (server.copies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import ProtocolError
from ..net.wire import READER, Header, Kind, Payload
from ..placement.chains import Chains
from ..placement.ranges import KeyRanges
from ..store.shard import Shard
from ..store.sparse import SparseShard
from ..store.spec import TableSpec
from . import sparse_copies
from .applied import Applied
from .chain import Chain
from .copies import Copies, Held, before
from .reader_copies import ReaderCopies

log = logging.getLogger(__name__)


class Failover:
    def __init__(self, copies: Copies, chain: Chain, readers: ReaderCopies, on_synced: Callable[[int], None]) -> None:
        self._copies = copies
        self._chain = chain
        self._readers = readers
        self.rank = copies.rank
        self._on_synced = on_synced  # tell the coordinator every range we back up is filled
        self._listeners: list[Callable[[], None]] = []  # fn() after each membership change

    def handlers(self) -> dict:
        """The kinds this module handles, for the server's dispatch: fn(header, payload, shard)."""
        return {Kind.SNAPSHOT: self.on_snapshot}

    # ---- tables (main thread) -------------------------------------------------------------------
    def add_table(self, spec: TableSpec, main: Shard, ranges: KeyRanges, rounds: bool = False) -> None:
        """A table is being declared: hold the ranges this node heads (beyond its own) and backs up.
        `rounds`: count each key's completed rounds on every copy (server.rounds)."""
        c = self._copies
        with c.lock:
            if rounds:
                c.rounds[spec.table_id] = np.zeros(spec.rows, np.int64)
            c.specs[spec.table_id] = spec
            c.key_ranges[spec.table_id] = ranges
            if not spec.sparse:  # (a sparse table has no readers: localize refuses it)
                c.readers.add_table(spec.table_id, spec.rows)
            chains = c.chains()
            for r in range(chains.num_nodes):
                c.applied[(spec.table_id, r)] = Applied()
                if r == self.rank:
                    continue
                if r in chains.headed_by(self.rank):
                    self._promote(spec.table_id, r, _fresh(spec, ranges, r, self.rank), main)
                elif self.rank in chains.chain(r):
                    c.backup[(spec.table_id, r)] = _fresh(spec, ranges, r, self.rank)

    # ---- membership (pskv-server) ---------------------------------------------------------------
    def on_change(self, fn: Callable[[], None]) -> None:
        """Call fn() in pskv-server after each membership change, once the chains are set up."""
        self._listeners.append(fn)

    def on_membership(
        self,
        previous: Chains,
        main: Callable[[int], Shard | SparseShard | None],
        unfinished: set[int] | frozenset[int] = frozenset(),
        members=None,
    ) -> None:
        """A new epoch: promote the ranges we now head, send snapshots down every changed chain,
        expect one where our predecessor changed (we are new, or it died). `unfinished`: tables being
        declared (no write reached them yet, so a fresh copy is whole): a node that builds one after
        this change sends no snapshot of it, so none is expected (issue 30 F10d). `members`: the live
        nodes (default: the chains' own; a node that joined reads keys before it enters them)."""
        c = self._copies
        chains = c.chains()
        with c.lock:
            c.members = frozenset(chains.alive if members is None else members)
            c.member_array = np.array(sorted(c.members), np.int64)
            c.readers.drop(c.members, c.heads)  # before snapshots carry it
            for table, spec in c.specs.items():
                for r in range(chains.num_nodes):
                    old, new = previous.chain(r), chains.chain(r)
                    if old == new or self.rank not in new:
                        continue
                    if new[0] == self.rank:
                        shard = main(table)
                        if shard is None:  # (cannot happen: a table is in the store before add_table)
                            raise ProtocolError(
                                f"node {self.rank} heads key range {r} of table {table} it does not hold"
                            )
                        self._head(table, r, spec, old, new, shard)
                        continue
                    if (table, r) not in c.backup:
                        c.backup[(table, r)] = _fresh(spec, c.ranges(table), r, self.rank)
                    if table not in unfinished and before(previous, r, self.rank) != before(chains, r, self.rank):
                        c.filling.add((table, r))  # (same predecessor: same stream of writes, still whole)
            c.rows_waiting = {tr: held for tr, held in c.rows_waiting.items() if tr in c.filling}
            self._maybe_synced()
        for fn in self._listeners:
            fn()

    def _head(self, table: int, r: int, spec: TableSpec, old: tuple, new: tuple, main: Held) -> None:
        """We head range r after the change (its chain changed from `old` to `new`)."""
        c = self._copies
        if old[0] != self.rank:
            copy = c.backup.pop((table, r), None)
            if copy is None:  # cannot happen: a new head was the first backup
                raise ProtocolError(f"node {self.rank} heads key range {r} of table {table} without a copy of it")
            self._promote(table, r, copy, main)
            c.filling.discard((table, r))  # whole: the coordinator makes only those heads
        if len(new) > 1:
            self._snapshot(table, r, main, new[1])
        elif not isinstance(main, SparseShard):  # head and tail at once
            lo, hi = c.ranges(table).range_bounds(r)
            keys = np.arange(lo, hi, dtype=np.int64)
            self._readers.refresh(table, r, keys, *main.read(keys), c.applied[(table, r)].array())

    def _promote(self, table: int, r: int, copy: Held, main: Held) -> None:
        if isinstance(copy, SparseShard) or isinstance(main, SparseShard):  # (both: a sparse table's)
            assert isinstance(copy, SparseShard) and isinstance(main, SparseShard)
            sparse_copies.promote(r, copy, main)
            return
        keys = np.arange(copy.start, copy.stop, dtype=np.int64)
        rows, state = copy.read(keys)
        held = main.slot[keys] >= 0  # keys we read: our copy as a member is the one to keep
        if held.any():
            main.overwrite(keys[held], rows[held], None if state is None else state[held])
        main.unmark_incoming(keys[~held])
        main.insert(keys[~held], rows[~held], None if state is None else state[~held])
        for rid, count in main.arrived().items():  # localizes of ours that waited for them: they are here
            self._copies.endpoint.complete(rid, count, self.rank)
        log.info("node %d now serves key range %d of table %r (%d rows)", self.rank, r, main.spec.name, len(keys))

    def _snapshot(self, table: int, r: int, main: Held, dest: int) -> None:
        c = self._copies
        if isinstance(main, SparseShard):  # its written keys only
            keys, rows, state = sparse_copies.read(main, c.ranges(table), r)
        else:
            lo, hi = c.ranges(table).range_bounds(r)
            keys = np.arange(lo, hi, dtype=np.int64)
            rows, state = main.read(keys)
        self._send_snapshot(table, r, dest, keys, rows, state, c.applied[(table, r)].array())

    def _send_snapshot(self, table, r, dest, keys, rows, state, applied) -> None:
        c = self._copies
        counts = c.rounds.get(table)
        readers = None if c.specs[table].sparse else c.readers.of(table, keys)
        c.in_order().snapshot(
            dest,
            table,
            r,
            origin=self.rank,
            keys=keys,
            values=rows,
            state=state,
            applied=applied,
            readers=readers,
            rounds=None if counts is None else counts[keys],
        )
        c.snapshots_sent += 1

    def on_snapshot(self, header: Header, p: Payload, main: Shard) -> None:
        """SNAPSHOT: our predecessor's whole copy of a range; install it and pass it down the chain
        (flag READER: our copy of keys we read, from the tail: server.reader_copies)."""
        if header.flags & READER:
            self._readers.on_snapshot(header, p, main)
            return
        c = self._copies
        table, r = header.table, header.part
        keys = np.asarray(p.keys, np.int64)
        values, applied = p.values, p.applied
        assert values is not None and applied is not None  # (unpack: a SNAPSHOT carries both)
        copy = c.backup.get((table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} holds no copy of key range {r}")
        if isinstance(copy, SparseShard):  # exactly the head's written keys
            copy = c.backup[(table, r)] = sparse_copies.install(copy, keys, values, p.state)
        else:
            copy.overwrite(keys, values, p.state)
        c.applied[(table, r)] = Applied.of(applied)
        if p.rounds is not None and table in c.rounds:
            c.rounds[table][keys] = p.rounds
        if p.readers is not None:
            readers = self._readers.living(np.asarray(p.readers, np.int64))  # (sent before a reader died: not one now)
            c.readers.set(table, keys, readers)
            mine = (readers == self.rank) & (main.slot[keys] >= 0)
            if mine.any():  # keys we also read: our reader copy may have missed writes of a tail that died
                self._readers.install(
                    table,
                    r,
                    header.sender,
                    keys[mine],
                    values[mine],
                    None if p.state is None else p.state[mine],
                    applied,
                    main,
                )
        nxt = c.chains().successor(r, self.rank)
        if nxt >= 0:
            self._send_snapshot(table, r, nxt, keys, values, p.state, applied)
        elif not copy.spec.sparse:  # the new tail: readers may have missed writes a dead member was passing to them
            self._readers.refresh(table, r, keys, values, p.state, applied)
        c.filling.discard((table, r))
        self._chain.release(table, r, copy)
        self._maybe_synced()

    def _maybe_synced(self) -> None:
        if not self._copies.filling:
            self._on_synced(self._copies.epoch())


def _fresh(spec: TableSpec, ranges: KeyRanges, r: int, rank: int) -> Held:
    """Range r's rows as they start (a row's initial value depends only on table and row); one
    lock: only pskv-server writes a copy (its rows reach the main shard by `_promote`)."""
    if spec.sparse:
        return sparse_copies.fresh(spec, ranges, r, rank)
    return Shard(spec, *ranges.range_bounds(r), rank, stripes=1)
