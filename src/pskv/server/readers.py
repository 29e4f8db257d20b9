"""Readers: `localize` in a cluster with backups (server.reader_copies keeps the copies, this the map).

With backups every write of a key range goes through its chain, so rows cannot move away from it
the way Lapse relocation moves them. A localize instead makes the node a *reader* of the keys: it
gets a copy that the chain keeps current, and serves its own pulls of them from memory:

    reader   SUBSCRIBE(keys) -> the range's head
    head     grants keys that no other node reads (DECLINE for the others: they stay with their
             reader, the requester reads them remotely), records the reader, passes SUBSCRIBE down
    member   records the reader, passes it on
    tail     sends the reader a SNAPSHOT (flag READER) of the rows, their state and the applied writes
    writes   the tail, after applying a write, passes the keys that have a reader to it (CHAIN,
             flag READER); the reader applies them to its copy and answers the writer

So a write completes only when the reader's copy has it too, and a reader reads its own writes.
Every member of a chain keeps the same map (SUBSCRIBE passes each member in order; a SNAPSHOT to a
new member carries it); a reader that dies is dropped from it; a node that becomes a range's head
stops being a reader of it (it holds the rows itself).

Threads and ownership: pskv-server only (main thread at a table's declaration, under `Copies.lock`).
"""

from __future__ import annotations

import numpy as np

_NONE = -1


class Readers:
    """Per table, the node that reads each key (or -1)."""

    def __init__(self) -> None:
        self._of: dict[int, np.ndarray] = {}  # table id -> (rows,) int64

    def add_table(self, table: int, rows: int) -> None:
        self._of[table] = np.full(rows, _NONE, np.int64)

    def of(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64: the reader of each key, -1 for none (every key of a table without readers:
        a sparse one, server.sparse_copies)."""
        of = self._of.get(table)
        return np.full(len(keys), _NONE, np.int64) if of is None else of[keys]

    def set(self, table: int, keys: np.ndarray, reader) -> None:
        self._of[table][keys] = reader

    def grant(self, table: int, keys: np.ndarray, origin: int) -> np.ndarray:
        """At the head: (n,) bool, the keys `origin` may read (nobody else does); it now does."""
        current = self._of[table][keys]
        ok = (current == _NONE) | (current == origin)
        self._of[table][keys[ok]] = origin
        return ok

    def drop(self, alive, heads_of) -> None:
        """A membership change: readers that died, and heads (which hold their rows), read nothing.
        `heads_of(table, keys)` gives each key's head."""
        alive = np.fromiter(alive, np.int64)
        for table, readers in self._of.items():
            keys = np.flatnonzero(readers != _NONE)
            if not len(keys):
                continue
            r = readers[keys]
            gone = ~np.isin(r, alive) | (r == heads_of(table, keys))
            readers[keys[gone]] = _NONE

    def count(self) -> int:
        return sum(int((r != _NONE).sum()) for r in self._of.values())
