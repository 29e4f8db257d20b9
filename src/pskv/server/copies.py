"""Copies: what the backup modules of a node share (backups, `pskv.init(backups=B)`, B >= 1).

A node with backups holds, besides its own shard, copies of the key ranges whose chains it is in
(placement.chains), and for each range the record of the writes applied to it (`Applied`). Three
modules work on them, each handling its own message kinds (server.backups builds them together):

    server.chain          the write path: PUSH/SET at a range's head, CHAIN hops, the tail's answer
    server.failover       a table's copies at its declaration; at a membership change promotion,
                          snapshots down every changed chain (SNAPSHOT), filling and SYNCED
    server.reader_copies  localize with backups: SUBSCRIBE, a reader's copy, the dead-reader guard

`Copies` is their one shared record: the copies, the applied records (of the ranges, and of the
reader copies this node holds: `read_applied`, apart, since a node may be a member of a range and
read some of its keys too), the ranges still filling and the ROWS answers held for them, rounds
of aggregated tables, who reads each key (server.readers), the burst's batched sends
(server.batches), the members since the last change. No module keeps state of its own about them.

Threads and ownership: everything runs in pskv-server but `Failover.add_table` (the main thread, at
a table's declaration); `lock` orders the two.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..placement.chains import Chains
from ..placement.ranges import KeyRanges
from ..store.shard import Shard
from ..store.sparse import SparseShard
from ..store.spec import TableSpec
from .applied import Applied
from .batches import Batches
from .readers import Readers

Range = tuple[int, int]  # (table id, key range)
Held = Shard | SparseShard  # a range's rows here: a sparse table's are a SparseShard


class Copies:
    def __init__(self, endpoint: Endpoint, chains: Callable[[], Chains | None], epoch: Callable[[], int]) -> None:
        self.endpoint = endpoint
        self.rank = endpoint.rank
        self._chains = chains  # the view's current chains (None until the node is welcomed)
        self.epoch = epoch  # the view's current epoch
        self.lock = threading.Lock()  # orders add_table (main thread) and on_membership (pskv-server)
        self.specs: dict[int, TableSpec] = {}
        self.key_ranges: dict[int, KeyRanges] = {}  # table id -> its key ranges
        self.backup: dict[Range, Held] = {}  # (table, range) -> its copy here (not headed here)
        self.applied: dict[Range, Applied] = {}  # (table, range) -> writes applied, here
        self.read_applied: dict[Range, Applied] = {}  # (table, range) -> writes applied to our reader copies
        self.filling: set[Range] = set()  # (table, range) whose snapshot has not come yet
        self.rows_waiting: dict[Range, list] = {}  # (table, range) filling -> ROWS answers held for it
        self.rounds: dict[int, np.ndarray] = {}  # table id -> (rows,) rounds completed per key (server.rounds)
        self.readers = Readers()  # who holds a kept-current copy of each key (server.readers)
        self.batches = Batches(endpoint)  # CHAIN hops and ACKs of a burst, one message per link (server.batches)
        self.members: frozenset[int] | None = None  # the live nodes since the last change (None: the chains')
        self.member_array = np.zeros(0, np.int64)  # the same, sorted (for np.isin)
        self.snapshots_sent = 0
        self.duplicates = 0  # writes that came again and were not applied again

    def chains(self) -> Chains:
        """The current chains: set at WELCOME, before a table or a message of one reaches the backups."""
        chains = self._chains()
        assert chains is not None  # (a cluster with backups has chains once welcomed)
        return chains

    def ranges(self, table: int) -> KeyRanges:
        ranges = self.key_ranges.get(table)
        if ranges is None:
            raise ProtocolError(f"node {self.rank} has no table with id {table}")
        return ranges

    def heads(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the node that heads each key's range now."""
        return self.chains().heads[self.ranges(table).range_of(keys)]

    def range_of(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the key range of each key."""
        return self.ranges(table).range_of(keys)

    def in_order(self) -> Endpoint:
        """The endpoint, once the writes batched so far left: a message sent down a chain (or to a
        reader) after them keeps its link's order."""
        self.batches.flush()
        return self.endpoint

    def copies(self, table: int) -> list[Held]:
        """The copies of `table`'s ranges this node holds as a backup."""
        return [copy for (t, _), copy in sorted(self.backup.items()) if t == table]

    def filling_ranges(self) -> list[int]:
        """The key ranges this node holds a copy of that is not whole yet (its snapshot did not come)."""
        return sorted({r for _, r in self.filling})

    def prune(self, low: dict[int, int]) -> None:
        """pskv-server: origins' low watermarks (from the coordinator's TICK), for the ranges' records
        and our reader copies' alike."""
        for applied in [*self.applied.values(), *self.read_applied.values()]:
            applied.prune(low)

    def kept(self) -> tuple[int, int]:
        """The write ids kept above the floors: (in the ranges' records, in our reader copies')."""
        return sum(map(len, self.applied.values())), sum(map(len, self.read_applied.values()))

    def describe(self) -> list[str]:
        return [
            f"backups: copies of {sorted(self.backup)}, {self.readers.count()} key(s) read elsewhere, "
            f"waiting for snapshots of {sorted(self.filling)}, "
            f"{self.snapshots_sent} snapshot(s) sent, {self.duplicates} duplicate write(s) not applied again, "
            f"write ids kept above the floors (ranges, reader copies): {self.kept()}, {self.batches!r}"
        ]


def before(chains: Chains, r: int, rank: int) -> int:
    """The member before `rank` in range r's chain (the node that passes it the range's writes), or -1."""
    chain = chains.chain(r)
    i = chain.index(rank) if rank in chain else 0
    return chain[i - 1] if i > 0 else -1
