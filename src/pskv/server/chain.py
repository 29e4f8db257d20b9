"""Chain replication of key ranges (`pskv.init(backups=B)`, B >= 1), and failover to the backups.

Each key range lives on a chain of B + 1 live nodes (placement.chains): its head serves pulls and
applies writes first; each member passes a write on to the next (CHAIN) after applying it, and the
chain's tail answers the writer (ACK). A push's Future therefore completes only after every live
member applied it, and every member applies the same writes in the same order (one sender per
link, ZeroMQ keeps its order; all writes of a range go through its head's pskv-server thread), so a
backup's rows and updater state equal the head's bit for bit. Chain, not primary-backup: one
message per member and no waiting state at the head, and it fits pskv's replies, which always go
straight to the origin (the tail answers, as any owner does).

A write with flag ROWS (an aggregated table's round sums, client.aggregate) is answered with the
tail's rows after it (PULL_REPLY, not ACK); a tail still waiting for its snapshot holds those
answers until the snapshot is in, since its copy is not whole before.

At-most-once: a write is identified by (origin, request id, part); each range keeps the ids it
applied (`Applied`, replicated with the range), and a write that comes again is passed on, not
applied. Origins send again every unanswered write after a membership change (client.backed), so
a write is never lost and never doubled. Ids below an origin's low watermark (its oldest pending
request, sent with heartbeats) are pruned, here and in reader copies' records, and the watermark
stays as a floor. The head decides by id and floor; every copy after it follows its verdict (flag
AGAIN: not applied at the head), never the floor alone, which also passes failed requests whose
writes are still on their way down (server.applied).

A membership change (`on_membership`): a node that becomes head of a range promotes its backup
copy into its store; the head of every range whose chain changed sends a SNAPSHOT (rows, state,
applied ids) down the new chain, each member installing it and passing it on, so a new tail is
filled (re-replication) and every copy equals the head's. A member that still waits for a snapshot
is not yet a safe copy; when none is missing the node tells the coordinator (SYNCED).

Readers (localize with backups; server.readers has the protocol): the tail passes a write's keys
that some node reads on to that node, which applies them to its copy and answers the writer.
`_read_applied` is a reader copy's at-most-once record, apart from `_applied` (a node may be a
member of a range and read some of its keys too).

Threads and ownership: everything runs in pskv-server but `add_table` (the main thread, at a
table's declaration); `_lock` orders the two.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import POSITIONS, READER, ROUNDS, ROWS, SET, STATE, Header, Kind, Payload
from ..placement.chains import Chains
from ..placement.ranges import KeyRanges
from ..store.shard import Shard
from ..store.spec import TableSpec
from . import sparse_copies
from .applied import Applied
from .batches import Batches
from .readers import Readers

log = logging.getLogger(__name__)
_DECLINE_MS = 1000  # a declined localize of keys another node reads is not asked again for this long
AGAIN = STATE  # flag of a CHAIN write: its head did not apply it (applied before, or below its origin's floor),
# so no copy does; it is passed on to be answered. (A CHAIN never carries updater state: it shares STATE's bit.)


def _write(shard: Shard, is_set: bool, keys: np.ndarray, values: np.ndarray) -> None:
    """Apply a write to rows this node holds."""
    if len(keys):
        shard.set(keys, values) if is_set else shard.push(keys, values)


class Chain:
    def __init__(self, endpoint: Endpoint, chains: Callable[[], Chains], epoch: Callable[[], int],
                 forward: Callable[..., None], on_synced: Callable[[int], None]) -> None:
        self._endpoint = endpoint
        self.rank = endpoint.rank
        self._chains = chains  # the view's current chains
        self._epoch = epoch
        self._key_ranges: dict[int, KeyRanges] = {}  # table id -> its key ranges
        self._forward = forward  # forward(dest, header, keys, positions, values): a hop on (server.serve)
        self._on_synced = on_synced  # tell the coordinator every range we back up is filled
        self._lock = threading.Lock()  # orders add_table (main thread) and on_membership (pskv-server)
        self._specs: dict[int, TableSpec] = {}
        self._backup: dict[tuple[int, int], Shard] = {}  # (table, range) -> its copy here (not headed here)
        self._applied: dict[tuple[int, int], Applied] = {}  # (table, range) -> writes applied, here
        self._filling: set[tuple[int, int]] = set()  # (table, range) whose snapshot has not come yet
        self._rows_waiting: dict[tuple[int, int], list] = {}  # (table, range) filling -> ROWS answers held for it
        self.batches = Batches(endpoint)  # CHAIN hops and ACKs of a burst, one message per link (server.batches)
        self.readers = Readers()  # localize with backups: who holds a kept-current copy of each key (server.readers)
        self._read_applied: dict[tuple[int, int], Applied] = {}  # (table, range) -> writes applied to our reader copies
        self._rounds: dict[int, np.ndarray] = {}  # table id -> (rows,) rounds completed per key (server.rounds)
        self._listeners: list[Callable[[], None]] = []  # fn() after each membership change
        self._members: frozenset[int] | None = None  # the live nodes since the last change (None: the chains')
        self._member_array = np.zeros(0, np.int64)  # the same, sorted (for np.isin)
        self.snapshots_sent = 0
        self.duplicates = 0  # writes that came again and were not applied again

    # ---- tables (main thread) -------------------------------------------------------------------
    def add_table(self, spec: TableSpec, main: Shard, ranges: KeyRanges, rounds: bool = False) -> None:
        """A table is being declared: hold the ranges this node heads (beyond its own) and backs up.
        `rounds`: count each key's completed rounds on every copy (server.rounds)."""
        with self._lock:
            if rounds:
                self._rounds[spec.table_id] = np.zeros(spec.rows, np.int64)
            self._specs[spec.table_id] = spec
            self._key_ranges[spec.table_id] = ranges
            if not spec.sparse:  # (a sparse table has no readers: localize refuses it)
                self.readers.add_table(spec.table_id, spec.rows)
            chains = self._chains()
            for r in range(chains.num_nodes):
                self._applied[(spec.table_id, r)] = Applied()
                if r == self.rank:
                    continue
                if r in chains.headed_by(self.rank):
                    self._promote(spec.table_id, r, _fresh(spec, ranges, r, self.rank), main)
                elif self.rank in chains.chain(r):
                    self._backup[(spec.table_id, r)] = _fresh(spec, ranges, r, self.rank)

    # ---- writes (pskv-server) -------------------------------------------------------------------
    def write(self, header: Header, p: Payload, keys: np.ndarray, shard: Shard) -> None:
        """A PUSH or SET reaching this node: apply the keys of ranges it heads, pass each on down
        its chain, forward the others to their head."""
        chains = self._chains()
        ranges = self._ranges(header.table)
        one = ranges.one_range(keys)  # (the common case: a request part is one range's keys)
        owners = None if one >= 0 else ranges.range_of(keys)
        lo, hi = (one, one) if one >= 0 else (int(owners.min()), int(owners.max()))
        for r in range(lo, hi + 1):
            sel = None if lo == hi else np.flatnonzero(owners == r)
            if sel is not None and not len(sel):
                continue
            k = keys if sel is None else keys[sel]
            v = p.values if sel is None else p.values[sel]
            pos = _positions(p.positions, sel)
            head = int(chains.heads[r])
            if head != self.rank:
                self._forward(head, header, k, pos, v)
                continue
            applied = self._apply(header, header.kind == Kind.SET, r, k, v, shard)
            self._pass(header, chains, r, k, pos, v, header.kind == Kind.SET, shard, shard, not applied)

    def _ranges(self, table: int) -> KeyRanges:
        ranges = self._key_ranges.get(table)
        if ranges is None:
            raise ProtocolError(f"node {self.rank} has no table with id {table}")
        return ranges

    def heads(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the node that heads each key's range now."""
        return self._chains().heads[self._ranges(table).range_of(keys)]

    def range_of(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the key range of each key."""
        return self._ranges(table).range_of(keys)

    def on_chain(self, header: Header, p: Payload, main: Shard) -> None:
        """CHAIN: a write our predecessor in a range's chain applied (one of a BATCH: server.serve
        splits it); apply it to our copy, pass it on (flag READER: to our reader's copy of some of
        its keys, then answer the writer)."""
        keys = np.asarray(p.keys, np.int64)
        ranges = self._ranges(header.table)
        r = ranges.one_range(keys)
        if r < 0:
            lo, hi = kernels.key_range(keys)
            raise ProtocolError(f"{header!r}: keys {lo}..{hi} span more than one key range")
        is_set = bool(header.flags & SET)
        if header.flags & READER:
            # A reader copy of a range we head now (we were its first backup and took it over) is
            # our copy as a member, which has every write an earlier tail passed on: answer only.
            chain = self._chains().chain(r)
            if chain[0] != self.rank:
                held = main.slot[keys] >= 0  # a copy not here (yet, or any more) has the write from the chain
                applied = self._read_applied.setdefault((header.table, r), Applied())
                write = (header.origin, header.request_id, header.part)
                if applied.fresh(write, link=header.sender == chain[-1], again=bool(header.flags & AGAIN)):
                    _write(main, is_set, keys[held], None if p.values is None else p.values[held])
                    applied.add(write)  # (a write that comes again is answered again, not applied)
            self._answer(header, len(keys), p.positions)
            return
        copy = self._backup.get((header.table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} holds no copy of key range {r} (epoch {self._epoch()})")
        chains = self._chains()
        link = header.sender == _before(chains, r, self.rank)  # (else a late copy from an earlier predecessor)
        applied = self._apply(header, is_set, r, keys, p.values, copy, link)
        if applied and header.flags & ROUNDS:
            self._rounds[header.table][keys] += 1
        self._pass(header, chains, r, keys, p.positions, p.values, is_set, copy, main, not applied)

    def on_chain_batch(self, header: Header, p: Payload, main: Shard) -> bool:
        """A BATCH of CHAIN writes, all pushes to one range we back up, none seen before, with an
        updater that applies in order (`Updater.in_order`): applied in one call, which equals
        applying them one by one; passed on or answered write by write. False, with nothing
        done, for any other batch (server.serve then splits it)."""
        w = p.writes
        keys = np.asarray(p.keys, np.int64)
        counts = w[:, 3]
        if p.positions is None or len(p.positions) != len(keys) or counts.min() < 0 or int(counts.sum()) != len(keys):
            return False  # (split says what is wrong with it)
        if not len(keys) or (w[:, 4] & (SET | ROWS | READER | ROUNDS | AGAIN)).any():
            return False
        r = self._ranges(header.table).one_range(keys)
        copy = self._backup.get((header.table, r)) if r >= 0 else None
        applied = self._applied.get((header.table, r))
        if copy is None or applied is None or not copy.spec.updater.in_order:
            return False
        chains = self._chains()
        if header.sender != _before(chains, r, self.rank):  # (a late copy: decided write by write)
            return False
        ids = [tuple(one) for one in w[:, :3].tolist()]  # [(origin, rid, part)]
        if len(set(ids)) != len(ids) or any(applied.seen(one) for one in ids):  # (a resend may follow its first copy)
            return False
        if len(copy.push(keys, p.values)):
            raise ProtocolError(f"node {self.rank} should hold every key of key range {r} of {copy.spec.name!r} "
                                f"but does not (epoch {self._epoch()})")
        nxt = chains.successor(r, self.rank)
        tail_plain = nxt < 0 and not (self.readers.of(header.table, keys) >= 0).any()
        start = 0
        for (origin, rid, part), n, flags in zip(ids, counts.tolist(), w[:, 4].tolist()):
            applied.add((origin, rid, part))
            stop = start + n
            pos = p.positions[start:stop] if flags & POSITIONS else None
            if nxt >= 0:
                self.batches.chain(nxt, header.table, origin, rid, part, 0, keys[start:stop], pos,
                                   p.values[start:stop])
            elif tail_plain and origin != self.rank:
                self.batches.ack_write(origin, header.table, rid, part, n, pos)
            else:
                one = Header(Kind.CHAIN, table=header.table, request_id=rid, part=part, n_keys=n, dim=header.dim,
                             origin=origin, epoch=header.epoch)
                self._pass(one, chains, r, keys[start:stop], pos, p.values[start:stop], False, copy, main, False)
            start = stop
        return True

    # ---- rounds of aggregated BSP/SSP tables (server.rounds, pskv-server) ----------------------------
    def rounds(self, table: int) -> np.ndarray:
        """(rows,) int64 the rounds completed per key, on this node's copies (the same on every copy)."""
        return self._rounds[table]

    def write_round(self, header: Header, keys: np.ndarray, sums: np.ndarray, main: Shard) -> bool:
        """At the head of the range of `keys`: apply a completed round (the nodes' sums; header: a
        CHAIN write of this node with flag ROUNDS), count it, and pass it down the chain; again
        (after a membership change) it is passed on only. False if this node no longer heads it."""
        r = self._ranges(header.table).one_range(keys)
        chains = self._chains()
        if r < 0 or int(chains.heads[r]) != self.rank:
            return False
        applied = self._apply(header, False, r, keys, sums, main)
        if applied:
            self._rounds[header.table][keys] += 1
        self._pass(header, chains, r, keys, None, sums, False, main, main, not applied)
        return True

    def on_change(self, fn: Callable[[], None]) -> None:
        """Call fn() in pskv-server after each membership change, once the chains are set up."""
        self._listeners.append(fn)

    def _apply(self, header: Header, is_set: bool, r: int, keys, values, shard: Shard, link: bool = False) -> bool:
        """Apply a write unless `Applied.fresh` says not (at the head: applied before, or below its
        origin's floor; `link`: from our predecessor, as the head decided); True if applied now."""
        applied = self._applied.setdefault((header.table, r), Applied())
        write = (header.origin, header.request_id, header.part)
        if not applied.fresh(write, link=link, again=bool(header.flags & AGAIN)):
            self.duplicates += 1
            return False
        miss = shard.set(keys, values) if is_set else shard.push(keys, values)
        if len(miss):
            raise ProtocolError(f"node {self.rank} should hold keys {keys[miss][:5].tolist()} of key range {r} "
                                f"of {shard.spec.name!r} but does not (epoch {self._epoch()})")
        applied.add(write)
        return True

    def _answer(self, header: Header, n: int, positions, keys=None, held: Shard | None = None, r: int = -1) -> None:
        """The write is on every copy of these keys: the writer may go on (flag ROWS: with the rows
        after it, from `held`, our copy of range r, which equals the head's once its snapshot came;
        until then the answer waits for it)."""
        kind, rows = Kind.ACK, None
        if header.flags & ROWS and (header.table, r) in self._filling:
            self._rows_waiting.setdefault((header.table, r), []).append((header, n, positions, keys))
            return
        if header.flags & ROWS and held is not None:
            kind, rows = Kind.PULL_REPLY, np.empty((n, held.spec.dim), held.spec.dtype)  # (n, dim)
            held.pull(keys, rows)
        if header.origin == self.rank:
            self._endpoint.reply_here(header, kind, n_keys=n, positions=positions, values=rows)
        elif rows is None:
            self.batches.ack(header, n, positions)
        else:
            self._endpoint.reply(header, kind, n_keys=n, positions=positions, values=rows)

    def _pass(self, header: Header, chains: Chains, r: int, keys, positions, values, is_set: bool, held: Shard,
              main: Shard, again: bool) -> None:
        """A write applied to `held`, our copy of range r (`again`: it was not, nor will it be on any
        copy after ours): on down the chain, or answered at its tail."""
        nxt = chains.successor(r, self.rank)
        if nxt < 0:  # the tail: the write is on every member; then on readers' copies (server.readers)
            readers = self.readers.of(header.table, keys)
            if not (readers < 0).all():
                readers = self._living(readers, header.table, keys)
            if (readers < 0).all():
                self._answer(header, len(keys), positions, keys, held, r)
                return
            pos = np.arange(len(keys)) if positions is None else np.asarray(positions, np.int64)
            for reader in np.unique(readers):
                sel = np.flatnonzero(readers == reader)
                if reader < 0:
                    self._answer(header, len(sel), pos[sel])
                elif reader == self.rank:  # our own reader copy, beside our copy as a member
                    applied = self._read_applied.setdefault((header.table, r), Applied())
                    write = (header.origin, header.request_id, header.part)
                    if held is not main and applied.fresh(write, link=True, again=again):  # (at the head: main)
                        mine = sel[main.slot[keys[sel]] >= 0]
                        _write(main, is_set, keys[mine], None if values is None else values[mine])
                        applied.add(write)
                    self._answer(header, len(sel), pos[sel])
                else:
                    h = Header(Kind.CHAIN, table=header.table, request_id=header.request_id, part=header.part,
                               dim=header.dim, flags=READER | (SET if is_set else 0) | (AGAIN if again else 0),
                               origin=header.origin)
                    self._send(int(reader), h, keys=keys[sel], positions=pos[sel],
                                        values=None if values is None else values[sel])
            return
        self.batches.chain(nxt, header.table, header.origin, header.request_id, header.part,
                           (SET if is_set else 0) | (AGAIN if again else 0) | (header.flags & (ROWS | ROUNDS)), keys,
                           positions, values)

    # ---- membership (pskv-server) ---------------------------------------------------------------
    def on_membership(self, previous: Chains, main: Callable[[int], Shard], unfinished: set[int] = frozenset(),
                      members=None) -> None:
        """A new epoch: promote the ranges we now head, send snapshots down every changed chain,
        expect one where our predecessor changed (we are new, or it died). `unfinished`: tables being
        declared (no write reached them yet, so a fresh copy is whole): a node that builds one after
        this change sends no snapshot of it, so none is expected (issue 30 F10d). `members`: the live
        nodes (default: the chains' own; a node that joined reads keys before it enters them)."""
        chains = self._chains()
        with self._lock:
            self._members = frozenset(chains.alive if members is None else members)
            self._member_array = np.array(sorted(self._members), np.int64)
            self.readers.drop(self._members, self.heads)  # before snapshots carry it
            for table, spec in self._specs.items():
                for r in range(chains.num_nodes):
                    old, new = previous.chain(r), chains.chain(r)
                    if old == new or self.rank not in new:
                        continue
                    if new[0] == self.rank:
                        if old[0] != self.rank:
                            copy = self._backup.pop((table, r), None)
                            if copy is None:  # cannot happen: a new head was the first backup
                                raise ProtocolError(f"node {self.rank} heads key range {r} of table {table} "
                                                    "without a copy of it")
                            self._promote(table, r, copy, main(table))
                            self._filling.discard((table, r))  # whole: the coordinator makes only those heads
                        if len(new) > 1:
                            self._snapshot(table, r, main(table), new[1])
                        elif not spec.sparse:  # head and tail at once
                            lo, hi = self._ranges(table).range_bounds(r)
                            keys = np.arange(lo, hi, dtype=np.int64)
                            self._refresh_readers(table, r, keys, *main(table).read(keys),
                                                  self._applied[(table, r)].array())
                        continue
                    if (table, r) not in self._backup:
                        self._backup[(table, r)] = _fresh(spec, self._ranges(table), r, self.rank)
                    if table not in unfinished and _before(previous, r, self.rank) != _before(chains, r, self.rank):
                        self._filling.add((table, r))  # (same predecessor: same stream of writes, still whole)
            self._rows_waiting = {tr: held for tr, held in self._rows_waiting.items() if tr in self._filling}
            self._maybe_synced()
        for fn in self._listeners:
            fn()

    def _promote(self, table: int, r: int, copy: Shard, main: Shard) -> None:
        if main.spec.sparse:
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
            self._endpoint.tracker.on_reply(rid, count, self.rank)
        log.info("node %d now serves key range %d of table %r (%d rows)", self.rank, r, main.spec.name, len(keys))

    def _snapshot(self, table: int, r: int, main: Shard, dest: int) -> None:
        if main.spec.sparse:  # its written keys only
            keys, rows, state = sparse_copies.read(main, self._ranges(table), r)
        else:
            lo, hi = self._ranges(table).range_bounds(r)
            keys = np.arange(lo, hi, dtype=np.int64)
            rows, state = main.read(keys)
        self._send_snapshot(table, r, dest, keys, rows, state, self._applied[(table, r)].array())

    def _send_snapshot(self, table, r, dest, keys, rows, state, applied) -> None:
        h = Header(Kind.SNAPSHOT, table=table, part=r, origin=self.rank)
        counts = self._rounds.get(table)
        readers = None if self._specs[table].sparse else self.readers.of(table, keys)
        self._send(dest, h, keys=keys, values=rows, state=state, applied=applied, readers=readers,
                   rounds=None if counts is None else counts[keys])
        self.snapshots_sent += 1

    def on_snapshot(self, header: Header, p: Payload, main: Shard) -> None:
        """SNAPSHOT: our predecessor's whole copy of a range; install it and pass it down the chain
        (flag READER: our copy of keys we read, from the tail)."""
        table, r = header.table, header.part
        keys = np.asarray(p.keys, np.int64)
        if header.flags & READER:
            self._install_reader(header, keys, p.values, p.state, p.applied, main)
            return
        copy = self._backup.get((table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} holds no copy of key range {r}")
        if copy.spec.sparse:  # exactly the head's written keys
            copy = self._backup[(table, r)] = sparse_copies.install(copy, keys, p.values, p.state)
        else:
            copy.overwrite(keys, p.values, p.state)
        self._applied[(table, r)] = Applied.of(p.applied)
        if p.rounds is not None and table in self._rounds:
            self._rounds[table][keys] = p.rounds
        if p.readers is not None:
            readers = self._living(np.asarray(p.readers, np.int64))  # (sent before a reader died: not one now)
            self.readers.set(table, keys, readers)
            mine = (readers == self.rank) & (main.slot[keys] >= 0)
            if mine.any():  # keys we also read: our reader copy may have missed writes of a tail that died
                self._install_reader(header, keys[mine], p.values[mine], None if p.state is None else p.state[mine],
                                     p.applied, main)
        nxt = self._chains().successor(r, self.rank)
        if nxt >= 0:
            self._send_snapshot(table, r, nxt, keys, p.values, p.state, p.applied)
        elif not copy.spec.sparse:  # the new tail: readers may have missed writes a dead member was passing to them
            self._refresh_readers(table, r, keys, p.values, p.state, p.applied)
        self._filling.discard((table, r))
        for header, n, positions, waiting in self._rows_waiting.pop((table, r), []):
            self._answer(header, n, positions, waiting, copy, r)
        self._maybe_synced()

    # ---- readers: localize with backups (server.readers) ------------------------------------------
    def subscribe(self, header: Header, p: Payload, main: Shard) -> None:
        """SUBSCRIBE: at the head, grant the keys no other node reads and pass it down the chain;
        at a member (flag READER), record the reader and pass it on; at the tail, send the reader
        its copy. Keys of ranges headed elsewhere go to their head."""
        if not self._live(header.origin):  # sent (or passed on) before its origin died or left: a reader
            return  # recorded now would be passed writes nobody answers, forever (its localize is gone with it)
        keys = np.asarray(p.keys, np.int64)
        chains, table = self._chains(), header.table
        owners = self._ranges(table).range_of(keys)
        for r in np.unique(owners).tolist():
            k = keys[owners == r]
            if header.flags & READER:  # a hop down the chain
                self.readers.set(table, k, header.origin)
                self._pass_subscribe(header, chains, r, k, main)
                continue
            head = int(chains.heads[r])
            if head != self.rank:
                self._endpoint.forward(head, header, 0, keys=k)
                continue
            ok = self.readers.grant(table, k, header.origin)
            if not ok.all():  # read by another node: it stays there, the requester reads it remotely
                for holder in np.unique(self.readers.of(table, k[~ok])).tolist():
                    decline = self._endpoint.reply_header(header, Kind.DECLINE, 0)
                    decline.part, decline.dim = holder, _DECLINE_MS
                    self._endpoint.send(header.origin, decline,
                                        keys=k[~ok][self.readers.of(table, k[~ok]) == holder])
            if ok.any():
                self._pass_subscribe(header, chains, r, k[ok], main)

    def _pass_subscribe(self, header: Header, chains: Chains, r: int, keys: np.ndarray, main: Shard) -> None:
        nxt = chains.successor(r, self.rank)
        if nxt >= 0:
            h = Header(Kind.SUBSCRIBE, table=header.table, request_id=header.request_id, flags=READER,
                       origin=header.origin)
            self._send(nxt, h, keys=keys)
            return
        copy = main if chains.heads[r] == self.rank else self._backup.get((header.table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} is the tail of key range {r} without a copy of it")
        rows, state = copy.read(keys)  # the tail's copy has every write that reached the chain before
        applied = self._applied.setdefault((header.table, r), Applied()).array()
        h = Header(Kind.SNAPSHOT, table=header.table, part=r, request_id=header.request_id, flags=READER,
                   origin=header.origin)
        if header.origin == self.rank:
            self._install_reader(h, keys, rows, state, applied, main)
        else:
            self._send(header.origin, h, keys=keys, values=rows, state=state, applied=applied)

    def _refresh_readers(self, table: int, r: int, keys, rows, state, applied) -> None:
        """The tail after a membership change changed range r's chain: send every other reader of its
        keys a fresh copy (before any later write it passes them: one link, in order)."""
        readers = self.readers.of(table, keys)
        for reader in np.unique(readers[(readers >= 0) & (readers != self.rank)]).tolist():
            sel = readers == reader
            h = Header(Kind.SNAPSHOT, table=table, part=r, flags=READER, origin=reader)
            self._send(reader, h, keys=keys[sel], values=rows[sel], state=None if state is None else state[sel],
                                applied=applied)

    def _install_reader(self, header: Header, keys, rows, state, applied, main: Shard) -> None:
        """Our copy of keys we read (a SNAPSHOT with flag READER from the tail): install it, wake the
        localize that waits for them."""
        r = header.part
        if int(self._chains().heads[r]) == self.rank:  # a copy sent before we took the range over: ours,
            return  # the head's, is whole and newer (installing it would undo writes we applied since)
        held = main.slot[keys] >= 0
        if held.any():  # sent again after a membership change: the tail's copy is at least as new
            main.overwrite(keys[held], rows[held], None if state is None else state[held])
        if (~held).any():
            main.unmark_incoming(keys[~held])  # incoming or absent: ours now either way
            main.insert(keys[~held], rows[~held], None if state is None else state[~held])
        mine = self._read_applied.setdefault((header.table, r), Applied())
        for write in np.asarray(applied).tolist():
            mine.add(tuple(write))
        for rid, count in main.arrived().items():
            self._endpoint.tracker.on_reply(rid, count, header.sender)

    def _live(self, rank: int) -> bool:
        """Whether node `rank` is a member now (a joiner too, before it enters the chains)."""
        return rank in (self._chains().alive if self._members is None else self._members)

    def _living(self, readers: np.ndarray, table: int = -1, keys: np.ndarray | None = None) -> np.ndarray:
        """`readers` with every node that is no member now replaced by -1 (and, given `table` and
        `keys`, forgotten in the map): a reader recorded from a message its origin sent before it died
        would never answer the writes passed to it."""
        members = np.array(sorted(self._chains().alive), np.int64) if self._members is None else self._member_array
        dead = (readers >= 0) & ~np.isin(readers, members)
        if not dead.any():
            return readers
        if keys is not None:
            self.readers.set(table, keys[dead], -1)
        return np.where(dead, -1, readers)

    def _send(self, dest: int, header: Header, **arrays) -> None:
        """Send down a chain (or to a reader) after the writes batched so far: one order per link."""
        self.batches.flush()
        self._endpoint.send(dest, header, **arrays)

    def _maybe_synced(self) -> None:
        if not self._filling:
            self._on_synced(self._epoch())

    def copies(self, table: int) -> list[Shard]:
        """The copies of `table`'s ranges this node holds as a backup."""
        return [copy for (t, _), copy in sorted(self._backup.items()) if t == table]

    def filling(self) -> list[int]:
        """The key ranges this node holds a copy of that is not whole yet (its snapshot did not come)."""
        return sorted({r for _, r in self._filling})

    def prune(self, low: dict[int, int]) -> None:
        """pskv-server: origins' low watermarks (from the coordinator's TICK), for the ranges' records
        and our reader copies' alike."""
        for applied in [*self._applied.values(), *self._read_applied.values()]:
            applied.prune(low)

    def kept(self) -> tuple[int, int]:
        """The write ids kept above the floors: (in the ranges' records, in our reader copies')."""
        return sum(map(len, self._applied.values())), sum(map(len, self._read_applied.values()))

    def describe(self) -> list[str]:
        return [f"backups: copies of {sorted(self._backup)}, {self.readers.count()} key(s) read elsewhere, "
                f"waiting for snapshots of {sorted(self._filling)}, "
                f"{self.snapshots_sent} snapshot(s) sent, {self.duplicates} duplicate write(s) not applied again, "
                f"write ids kept above the floors (ranges, reader copies): {self.kept()}, {self.batches!r}"]


def _fresh(spec: TableSpec, ranges: KeyRanges, r: int, rank: int) -> Shard:
    """Range r's rows as they start (a row's initial value depends only on table and row); one
    lock: only pskv-server writes a copy (its rows reach the main shard by `_promote`)."""
    if spec.sparse:
        return sparse_copies.fresh(spec, ranges, r, rank)
    return Shard(spec, *ranges.range_bounds(r), rank, stripes=1)


def _before(chains: Chains, r: int, rank: int) -> int:
    """The member before `rank` in range r's chain (the node that passes it the range's writes), or -1."""
    chain = chains.chain(r)
    i = chain.index(rank) if rank in chain else 0
    return chain[i - 1] if i > 0 else -1


def _positions(positions: np.ndarray | None, sel: np.ndarray | None) -> np.ndarray | None:
    """The positions in the request part of the keys `sel` (None: all) of a message with
    `positions` (None: the whole part); None for a whole part (its answer credits every key)."""
    if sel is None:
        return positions
    return sel if positions is None else positions[sel]
