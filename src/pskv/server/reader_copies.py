"""Reader copies: `localize` in a cluster with backups (server.readers has the protocol and the map).

Rows cannot leave their chain, so a localize makes the node a *reader*: SUBSCRIBE goes to the
keys' head, which grants the keys no other node reads (DECLINE for the others) and passes it down
the chain, each member recording the reader; the tail sends the reader its copy (SNAPSHOT, flag
READER), which completes the localize. Later writes reach the reader from the tail (server.chain);
after a membership change the tail of a changed chain sends every reader a fresh copy (`refresh`).

The dead-reader guard (`live`, `living`): a SUBSCRIBE or SNAPSHOT its origin sent before it died
may arrive after the membership change; recorded, the dead node would be the keys' reader for good,
the tail would pass their writes to it, and the writers would wait forever. So a reader that is no
member now is never recorded, and the tail answers for one it still finds and forgets it.

Threads and ownership: pskv-server; the state is the node's `Copies` (server.copies).
"""

from __future__ import annotations

import numpy as np

from ..errors import ProtocolError
from ..net.wire import READER, Header, Kind, Payload
from ..placement.chains import Chains
from ..store.shard import Shard
from .applied import Applied
from .copies import Copies

DECLINE_MS = 1000  # a declined localize of keys another node reads is not asked again for this long


class ReaderCopies:
    def __init__(self, copies: Copies) -> None:
        self._copies = copies
        self.rank = copies.rank

    def handlers(self) -> dict:
        """The kinds this module handles, for the server's dispatch: fn(header, payload, shard)."""
        return {Kind.SUBSCRIBE: self.subscribe}

    def subscribe(self, header: Header, p: Payload, main: Shard) -> None:
        """SUBSCRIBE: at the head, grant the keys no other node reads and pass it down the chain;
        at a member (flag READER), record the reader and pass it on; at the tail, send the reader
        its copy. Keys of ranges headed elsewhere go to their head."""
        if not self.live(header.origin):  # sent (or passed on) before its origin died or left: a reader
            return  # recorded now would be passed writes nobody answers, forever (its localize is gone with it)
        c = self._copies
        keys = np.asarray(p.keys, np.int64)
        chains, table = c.chains(), header.table
        owners = c.ranges(table).range_of(keys)
        for r in np.unique(owners).tolist():
            k = keys[owners == r]
            if header.flags & READER:  # a hop down the chain
                c.readers.set(table, k, header.origin)
                self._pass_subscribe(header, chains, r, k, main)
                continue
            head = int(chains.heads[r])
            if head != self.rank:
                c.endpoint.forward(head, header, 0, keys=k)
                continue
            ok = c.readers.grant(table, k, header.origin)
            if not ok.all():  # read by another node: it stays there, the requester reads it remotely
                for holder in np.unique(c.readers.of(table, k[~ok])).tolist():
                    c.endpoint.decline(header, holder, DECLINE_MS, keys=k[~ok][c.readers.of(table, k[~ok]) == holder])
            if ok.any():
                self._pass_subscribe(header, chains, r, k[ok], main)

    def _pass_subscribe(self, header: Header, chains: Chains, r: int, keys: np.ndarray, main: Shard) -> None:
        c = self._copies
        nxt = chains.successor(r, self.rank)
        if nxt >= 0:
            c.in_order().forward(nxt, header, READER, keys=keys)
            return
        copy = main if chains.heads[r] == self.rank else c.backup.get((header.table, r))
        if copy is None:
            raise ProtocolError(f"{header!r}: node {self.rank} is the tail of key range {r} without a copy of it")
        assert isinstance(copy, Shard)  # (a sparse table has no readers: localize refuses it)
        rows, state = copy.read(keys)  # the tail's copy has every write that reached the chain before
        applied = c.applied.setdefault((header.table, r), Applied()).array()
        if header.origin == self.rank:
            self.install(header.table, r, self.rank, keys, rows, state, applied, main)
        else:
            c.in_order().snapshot(
                header.origin,
                header.table,
                r,
                origin=header.origin,
                request_id=header.request_id,
                flags=READER,
                keys=keys,
                values=rows,
                state=state,
                applied=applied,
            )

    def refresh(self, table: int, r: int, keys, rows, state, applied) -> None:
        """The tail after a membership change changed range r's chain: send every other reader of its
        keys a fresh copy (before any later write it passes them: one link, in order)."""
        readers = self._copies.readers.of(table, keys)
        for reader in np.unique(readers[(readers >= 0) & (readers != self.rank)]).tolist():
            sel = readers == reader
            self._copies.in_order().snapshot(
                reader,
                table,
                r,
                origin=reader,
                flags=READER,
                keys=keys[sel],
                values=rows[sel],
                state=None if state is None else state[sel],
                applied=applied,
            )

    def on_snapshot(self, header: Header, p: Payload, main: Shard) -> None:
        """SNAPSHOT with flag READER: our copy of keys we read, from the tail (server.failover hands it)."""
        self.install(
            header.table, header.part, header.sender, np.asarray(p.keys, np.int64), p.values, p.state, p.applied, main
        )

    def install(self, table: int, r: int, sender: int, keys, rows, state, applied, main: Shard) -> None:
        """Our copy of keys of range r we read, from the tail `sender`: install it, wake the localize
        that waits for them."""
        if int(self._copies.chains().heads[r]) == self.rank:  # a copy sent before we took the range over: ours,
            return  # the head's, is whole and newer (installing it would undo writes we applied since)
        held = main.slot[keys] >= 0
        if held.any():  # sent again after a membership change: the tail's copy is at least as new
            main.overwrite(keys[held], rows[held], None if state is None else state[held])
        if (~held).any():
            main.unmark_incoming(keys[~held])  # incoming or absent: ours now either way
            main.insert(keys[~held], rows[~held], None if state is None else state[~held])
        mine = self._copies.read_applied.setdefault((table, r), Applied())
        for write in np.asarray(applied).tolist():
            mine.add(tuple(write))
        for rid, count in main.arrived().items():
            self._copies.endpoint.complete(rid, count, sender)

    def live(self, rank: int) -> bool:
        """Whether node `rank` is a member now (a joiner too, before it enters the chains)."""
        c = self._copies
        return rank in (c.chains().alive if c.members is None else c.members)

    def living(self, readers: np.ndarray, table: int = -1, keys: np.ndarray | None = None) -> np.ndarray:
        """`readers` with every node that is no member now replaced by -1 (and, given `table` and
        `keys`, forgotten in the map): a reader recorded from a message its origin sent before it died
        would never answer the writes passed to it."""
        c = self._copies
        members = np.array(sorted(c.chains().alive), np.int64) if c.members is None else c.member_array
        dead = (readers >= 0) & ~np.isin(readers, members)
        if not dead.any():
            return readers
        if keys is not None:
            c.readers.set(table, keys[dead], -1)
        return np.where(dead, -1, readers)
