"""Server: a data request from another node in, a store operation, a reply out.

Threads and ownership: `handle()` runs in the node's pskv-server thread (the one that reads
the inbox). It touches store rows only through `Shard` methods, which take the stripe locks,
exactly as worker threads do. It sends replies through the injected `send(rank, frames)`.
Guarantees: one sender's requests are applied in the order they were sent; a request is
applied whole or not at all (everything is checked before the store changes); a bad request
gets an ERROR reply and changes nothing.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from . import kernels
from .errors import ProtocolError
from .protocol import Header, Kind, data_arrays, dtype_code
from .store import Store

log = logging.getLogger(__name__)


class Server:
    def __init__(self, store: Store, send: Callable[..., None], rank: int, cluster: Callable[[], int]) -> None:
        self._store = store
        self._send = send
        self.rank = rank
        self._cluster = cluster  # the cluster id, known once the node joined
        self.requests = 0  # handled, for stats
        self.errors = 0

    def handle(self, header: Header, frames: list) -> None:
        """Apply one PULL, PUSH or SET and reply to its sender (ERROR on any problem)."""
        try:
            reply = self._apply(header, frames)
        except ProtocolError as exc:
            self.errors += 1
            log.warning("node %d rejected %r: %s", self.rank, header, exc)
            reply = [self._reply_header(header, Kind.ERROR).pack(), str(exc).encode()]
        self.requests += 1
        self._send(header.sender, reply)

    def _apply(self, header: Header, frames: list) -> list:
        shard = self._store.get(header.table)
        if shard is None:
            raise ProtocolError(f"node {self.rank} has no table with id {header.table}")
        keys, values = data_arrays(header, frames)
        if header.dim != shard.spec.dim or (values is not None and values.dtype != shard.spec.dtype):
            raise ProtocolError(f"{header!r} does not match table {shard.spec.name!r} {shard.spec.describe()}")
        if keys.dtype != np.int64:
            keys = keys.astype(np.int64)
        if len(keys):
            lo, hi = kernels.key_range(keys)
            if not shard.owns(lo, hi):
                raise ProtocolError(f"node {self.rank} owns rows [{shard.start}, {shard.stop}) of table "
                                    f"{shard.spec.name!r}, not keys {lo}..{hi}")
        if header.kind == Kind.PULL:
            out = np.empty((len(keys), shard.spec.dim), dtype=shard.spec.dtype)  # (n, dim), sent zero-copy
            shard.pull(keys, out)
            h = self._reply_header(header, Kind.PULL_REPLY)
            h.n_keys, h.dim, h.dtype = len(keys), shard.spec.dim, dtype_code(shard.spec.dtype)
            return [h.pack(), out]
        if header.kind == Kind.PUSH:
            shard.push(keys, values)
        else:
            shard.set(keys, values)
        return [self._reply_header(header, Kind.ACK).pack()]

    def _reply_header(self, header: Header, kind: Kind) -> Header:
        return Header(kind, cluster=self._cluster(), sender=self.rank, table=header.table,
                      request_id=header.request_id, part=header.part)

    def __repr__(self) -> str:
        return f"<Server node={self.rank} handled={self.requests} errors={self.errors}>"
