"""The write path of a cluster with backups (`pskv.init(backups=B)`, B >= 1): chain replication.

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
answers until the snapshot is in (server.failover releases them), since its copy is not whole before.

At-most-once: a write is identified by (origin, request id, part); each range keeps the ids it
applied (`Applied`, replicated with the range), and a write that comes again is passed on, not
applied. Origins send again every unanswered write after a membership change (client.backed), so
a write is never lost and never doubled. Ids below an origin's low watermark (its oldest pending
request, sent with heartbeats) are pruned, here and in reader copies' records, and the watermark
stays as a floor. The head decides by id and floor; every copy after it follows its verdict (flag
AGAIN: not applied at the head), never the floor alone, which also passes failed requests whose
writes are still on their way down (server.applied).

Readers (server.reader_copies): the tail passes a write's keys that some live node reads on to
that node (CHAIN, flag READER), which applies them to its copy and answers the writer.

Threads and ownership: pskv-server; the state is the node's `Copies` (server.copies).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net.wire import POSITIONS, READER, ROUNDS, ROWS, SET, STATE, Header, Kind, Payload, one_write
from ..placement.chains import Chains
from ..store.shard import Shard
from .applied import Applied
from .copies import Copies, Held, before
from .reader_copies import ReaderCopies

AGAIN = STATE  # flag of a CHAIN write: its head did not apply it (applied before, or below its origin's floor),
# so no copy does; it is passed on to be answered. (A CHAIN never carries updater state: it shares STATE's bit.)


def _write(shard: Held, is_set: bool, keys: np.ndarray, values: np.ndarray) -> None:
    """Apply a write to rows this node holds."""
    if len(keys):
        shard.set(keys, values) if is_set else shard.push(keys, values)


class Chain:
    def __init__(self, copies: Copies, readers: ReaderCopies, forward: Callable[..., None]) -> None:
        self._copies = copies
        self._readers = readers
        self.rank = copies.rank
        self._forward = forward  # forward(dest, header, keys, positions, values): a hop on, counted (server.hops)

    def handlers(self) -> dict:
        """The kinds this module handles, for the server's dispatch: fn(header, payload, shard)."""
        return {Kind.CHAIN: self.on_chain}

    def batches(self) -> dict:
        """The kinds whose BATCH messages it may take whole: fn(header, payload, shard) -> bool."""
        return {Kind.CHAIN: self.on_chain_batch}

    # ---- at the head ------------------------------------------------------------------------------
    def write(self, header: Header, p: Payload, keys: np.ndarray, shard: Held) -> None:
        """A PUSH or SET reaching this node: apply the keys of ranges it heads, pass each on down
        its chain, forward the others to their head."""
        chains = self._copies.chains()
        ranges = self._copies.ranges(header.table)
        values = p.values
        assert values is not None  # (unpack: a PUSH or SET carries values)
        one = ranges.one_range(keys)  # (the common case: a request part is one range's keys)
        if one >= 0:
            owners, lo, hi = None, one, one
        else:
            owners = ranges.range_of(keys)
            lo, hi = int(owners.min()), int(owners.max())
        for r in range(lo, hi + 1):
            sel = None if owners is None or lo == hi else np.flatnonzero(owners == r)
            if sel is not None and not len(sel):
                continue
            k = keys if sel is None else keys[sel]
            v = values if sel is None else values[sel]
            pos = _positions(p.positions, sel)
            head = int(chains.heads[r])
            if head != self.rank:
                self._forward(head, header, k, pos, v)
                continue
            applied = self._apply(header, header.kind == Kind.SET, r, k, v, shard)
            self._pass(header, chains, r, k, pos, v, header.kind == Kind.SET, shard, shard, not applied)

    def write_round(self, header: Header, keys: np.ndarray, sums: np.ndarray, main: Shard) -> bool:
        """At the head of the range of `keys`: apply a completed round (the nodes' sums; header: a
        CHAIN write of this node with flag ROUNDS), count it, and pass it down the chain; again
        (after a membership change) it is passed on only. False if this node no longer heads it."""
        r = self._copies.ranges(header.table).one_range(keys)
        chains = self._copies.chains()
        if r < 0 or int(chains.heads[r]) != self.rank:
            return False
        applied = self._apply(header, False, r, keys, sums, main)
        if applied:
            self._copies.rounds[header.table][keys] += 1
        self._pass(header, chains, r, keys, None, sums, False, main, main, not applied)
        return True

    # ---- at a member (CHAIN) ----------------------------------------------------------------------
    def on_chain(self, header: Header, p: Payload, main: Shard) -> None:
        """CHAIN: a write our predecessor in a range's chain applied (one of a BATCH: server.serve
        splits it); apply it to our copy, pass it on (flag READER: to our reader's copy of some of
        its keys, then answer the writer)."""
        c = self._copies
        keys = np.asarray(p.keys, np.int64)
        values = p.values
        assert values is not None  # (unpack: a CHAIN carries values)
        r = c.ranges(header.table).one_range(keys)
        if r < 0:
            lo, hi = kernels.key_range(keys)
            raise ProtocolError(f"{header!r}: keys {lo}..{hi} span more than one key range")
        is_set = bool(header.flags & SET)
        if header.flags & READER:
            # A reader copy of a range we head now (we were its first backup and took it over) is
            # our copy as a member, which has every write an earlier tail passed on: answer only.
            chain = c.chains().chain(r)
            if chain[0] != self.rank:
                held = main.slot[keys] >= 0  # a copy not here (yet, or any more) has the write from the chain
                record = c.read_applied.setdefault((header.table, r), Applied())
                write = (header.origin, header.request_id, header.part)
                if record.fresh(write, link=header.sender == chain[-1], again=bool(header.flags & AGAIN)):
                    _write(main, is_set, keys[held], values[held])
                    record.add(write)  # (a write that comes again is answered again, not applied)
            self.answer(header, len(keys), p.positions)
            return
        copy = c.backup.get((header.table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} holds no copy of key range {r} (epoch {c.epoch()})")
        chains = c.chains()
        link = header.sender == before(chains, r, self.rank)  # (else a late copy from an earlier predecessor)
        applied = self._apply(header, is_set, r, keys, values, copy, link)
        if applied and header.flags & ROUNDS:
            c.rounds[header.table][keys] += 1
        self._pass(header, chains, r, keys, p.positions, values, is_set, copy, main, not applied)

    def on_chain_batch(self, header: Header, p: Payload, main: Shard) -> bool:
        """A BATCH of CHAIN writes, all pushes to one range we back up, none seen before, with an
        updater that applies in order (`Updater.in_order`): applied in one call, which equals
        applying them one by one; passed on or answered write by write. False, with nothing
        done, for any other batch (server.serve then splits it)."""
        c = self._copies
        w, positions, values = p.writes, p.positions, p.values
        assert w is not None and values is not None  # (unpack: a BATCH of CHAIN writes carries both)
        keys = np.asarray(p.keys, np.int64)
        counts = w[:, 3]
        if positions is None or len(positions) != len(keys) or counts.min() < 0 or int(counts.sum()) != len(keys):
            return False  # (split says what is wrong with it)
        if not len(keys) or (w[:, 4] & (SET | ROWS | READER | ROUNDS | AGAIN)).any():
            return False
        r = c.ranges(header.table).one_range(keys)
        copy = c.backup.get((header.table, r)) if r >= 0 else None
        applied = c.applied.get((header.table, r))
        if copy is None or applied is None or not copy.spec.updater.in_order:
            return False
        chains = c.chains()
        if header.sender != before(chains, r, self.rank):  # (a late copy: decided write by write)
            return False
        ids = [tuple(one) for one in w[:, :3].tolist()]  # [(origin, rid, part)]
        if len(set(ids)) != len(ids) or any(applied.seen(one) for one in ids):  # (a resend may follow its first copy)
            return False
        if len(copy.push(keys, values)):
            raise ProtocolError(
                f"node {self.rank} should hold every key of key range {r} of {copy.spec.name!r} "
                f"but does not (epoch {c.epoch()})"
            )
        nxt = chains.successor(r, self.rank)
        tail_plain = nxt < 0 and not (c.readers.of(header.table, keys) >= 0).any()
        start = 0
        for (origin, rid, part), n, flags in zip(ids, counts.tolist(), w[:, 4].tolist(), strict=True):
            applied.add((origin, rid, part))
            stop = start + n
            pos = positions[start:stop] if flags & POSITIONS else None
            if nxt >= 0:
                c.batches.chain(nxt, header.table, origin, rid, part, 0, keys[start:stop], pos, values[start:stop])
            elif tail_plain and origin != self.rank:
                c.batches.ack_write(origin, header.table, rid, part, n, pos)
            else:
                one = one_write(header, origin, rid, part, n, 0)
                self._pass(one, chains, r, keys[start:stop], pos, values[start:stop], False, copy, main, False)
            start = stop
        return True

    # ---- applying, passing on, answering ----------------------------------------------------------
    def _apply(self, header: Header, is_set: bool, r: int, keys, values, shard: Held, link: bool = False) -> bool:
        """Apply a write unless `Applied.fresh` says not (at the head: applied before, or below its
        origin's floor; `link`: from our predecessor, as the head decided); True if applied now."""
        applied = self._copies.applied.setdefault((header.table, r), Applied())
        write = (header.origin, header.request_id, header.part)
        if not applied.fresh(write, link=link, again=bool(header.flags & AGAIN)):
            self._copies.duplicates += 1
            return False
        miss = shard.set(keys, values) if is_set else shard.push(keys, values)
        if len(miss):
            raise ProtocolError(
                f"node {self.rank} should hold keys {keys[miss][:5].tolist()} of key range {r} "
                f"of {shard.spec.name!r} but does not (epoch {self._copies.epoch()})"
            )
        applied.add(write)
        return True

    def answer(self, header: Header, n: int, positions, keys=None, held: Held | None = None, r: int = -1) -> None:
        """The write is on every copy of these keys: the writer may go on (flag ROWS: with the rows
        after it, from `held`, our copy of range r, which equals the head's once its snapshot came;
        until then the answer waits for it: `release`)."""
        c = self._copies
        kind, rows = Kind.ACK, None
        if header.flags & ROWS and (header.table, r) in c.filling:
            c.rows_waiting.setdefault((header.table, r), []).append((header, n, positions, keys))
            return
        if header.flags & ROWS and held is not None:
            kind, rows = Kind.PULL_REPLY, np.empty((n, held.spec.dim), held.spec.dtype)  # (n, dim)
            held.pull(keys, rows)
        if header.origin == self.rank:
            c.endpoint.reply_here(header, kind, n_keys=n, positions=positions, values=rows)
        elif rows is None:
            c.batches.ack(header, n, positions)
        else:
            c.endpoint.reply(header, kind, n_keys=n, positions=positions, values=rows)

    def release(self, table: int, r: int, copy: Held) -> None:
        """Range r's snapshot came (server.failover): the ROWS answers held for it, from `copy`."""
        for header, n, positions, keys in self._copies.rows_waiting.pop((table, r), []):
            self.answer(header, n, positions, keys, copy, r)

    def _pass(
        self,
        header: Header,
        chains: Chains,
        r: int,
        keys,
        positions,
        values,
        is_set: bool,
        held: Held,
        main: Held,
        again: bool,
    ) -> None:
        """A write applied to `held`, our copy of range r (`again`: it was not, nor will it be on any
        copy after ours): on down the chain, or answered at its tail."""
        c = self._copies
        nxt = chains.successor(r, self.rank)
        if nxt >= 0:
            c.batches.chain(
                nxt,
                header.table,
                header.origin,
                header.request_id,
                header.part,
                (SET if is_set else 0) | (AGAIN if again else 0) | (header.flags & (ROWS | ROUNDS)),
                keys,
                positions,
                values,
            )
            return
        readers = c.readers.of(header.table, keys)  # the tail: the write is on every member; then readers'
        if not (readers < 0).all():
            readers = self._readers.living(readers, header.table, keys)
        if (readers < 0).all():
            self.answer(header, len(keys), positions, keys, held, r)
            return
        pos = np.arange(len(keys)) if positions is None else np.asarray(positions, np.int64)
        for reader in np.unique(readers):
            sel = np.flatnonzero(readers == reader)
            if reader < 0:
                self.answer(header, len(sel), pos[sel])
            elif reader == self.rank:  # our own reader copy, beside our copy as a member
                record = c.read_applied.setdefault((header.table, r), Applied())
                write = (header.origin, header.request_id, header.part)
                if held is not main and record.fresh(write, link=True, again=again):  # (at the head: main)
                    assert isinstance(main, Shard)  # (readers: dense tables only; localize refuses sparse ones)
                    mine = sel[main.slot[keys[sel]] >= 0]
                    _write(main, is_set, keys[mine], values[mine])
                    record.add(write)
                self.answer(header, len(sel), pos[sel])
            else:
                c.in_order().hop(
                    int(reader),
                    header.table,
                    header.origin,
                    header.request_id,
                    header.part,
                    dim=header.dim,
                    flags=READER | (SET if is_set else 0) | (AGAIN if again else 0),
                    keys=keys[sel],
                    positions=pos[sel],
                    values=None if values is None else values[sel],
                )


def _positions(positions: np.ndarray | None, sel: np.ndarray | None) -> np.ndarray | None:
    """The positions in the request part of the keys `sel` (None: all) of a message with
    `positions` (None: the whole part); None for a whole part (its answer credits every key)."""
    if sel is None:
        return positions
    return sel if positions is None else positions[sel]
