"""Hops: keys of a request part passed on toward their owner (Lapse's forwarding), counted.

Every forward of a request part leaves through `Hops.forward`: the server's keys it does not own
(server.serve), and with backups a write's keys whose range another node heads (server.chain).
Each hop is counted in the header's flags (bits 8..15), so a routing bug becomes an error after
32 hops, never an endless loop; the keys passed on are counted per node and per table (stats).

Threads and ownership: pskv-server only.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import ROWS, Header
from ..store.shard import Store

HOP_SHIFT = 8  # flags bits 8..15 count forwards: a routing bug becomes an error, never an endless loop
MAX_HOPS = 32  # a relocation chain moves a key at most once per hop; 32 is far beyond any real chain


class Hops:
    def __init__(self, endpoint: Endpoint, store: Store) -> None:
        self._endpoint = endpoint
        self._store = store
        self.keys = 0  # keys passed on to another node

    def forward(self, target: int, header: Header, keys: np.ndarray, positions: np.ndarray | None, values) -> None:
        """Pass keys of a request part on to `target`, counting the hop (a routing bug becomes an error).
        `positions` None: the whole part (a chain's write forwarded to its range's head; encode sets
        flag POSITIONS when there are some)."""
        hops = (header.flags >> HOP_SHIFT) + 1
        if hops > MAX_HOPS:
            raise ProtocolError(
                f"keys {keys[:5].tolist()} of table {header.table} were forwarded "
                f"{MAX_HOPS} times without reaching their owner"
            )
        self.keys += len(keys)
        shard = self._store.get(header.table)
        if shard is not None:
            shard.forwards += len(keys)
        self._endpoint.forward(
            target, header, header.flags & ROWS | hops << HOP_SHIFT, keys=keys, positions=positions, values=values
        )
