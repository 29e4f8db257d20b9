"""Backups: a node's part in chain replication, its modules built together (docs/design.md §3c).

    server.copies         `Copies`: the state they share (copies, applied records, filling, readers)
    server.chain          `Chain`: the write path (PUSH/SET at the head, CHAIN)
    server.failover       `Failover`: a table's copies, promotion, snapshots (SNAPSHOT), SYNCED
    server.reader_copies  `ReaderCopies`: localize with backups (SUBSCRIBE), the dead-reader guard

The node builds one `Backups` when it runs with backups and hands it to `Server` at construction:
the server sends writes down `chain.write` and registers each module's message kinds
(`handlers`, `batches`).

Threads and ownership: pskv-server, but `Failover.add_table` (the main thread; `Copies.lock`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..net.endpoint import Endpoint
from ..placement.chains import Chains
from .chain import Chain
from .copies import Copies
from .failover import Failover
from .reader_copies import ReaderCopies


class Backups:
    def __init__(
        self,
        endpoint: Endpoint,
        chains: Callable[[], Chains | None],
        epoch: Callable[[], int],
        forward: Callable[..., None],
        on_synced: Callable[[int], None],
    ) -> None:
        """`chains`, `epoch`: the view's current ones; `forward(dest, header, keys, positions, values)`:
        a write's keys on to their range's head (server.hops); `on_synced(epoch)`: tell the
        coordinator that no copy here waits for its snapshot."""
        self.copies = Copies(endpoint, chains, epoch)
        self.reader_copies = ReaderCopies(self.copies)
        self.chain = Chain(self.copies, self.reader_copies, forward)
        self.failover = Failover(self.copies, self.chain, self.reader_copies, on_synced)

    def handlers(self) -> dict:
        """Every module's kinds, for the server's dispatch: fn(header, payload, shard)."""
        return {**self.chain.handlers(), **self.failover.handlers(), **self.reader_copies.handlers()}

    def batches(self) -> dict:
        """The kinds whose BATCH messages a module may take whole: fn(header, payload, shard) -> bool."""
        return self.chain.batches()

    def heads(self, table: int, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the node that heads each key's range now."""
        return self.copies.heads(table, keys)

    def describe(self) -> list[str]:
        return self.copies.describe()
