"""Batches: the CHAIN hops and ACKs that pskv-server sends during one burst leave as one message
per link at the burst's end (backups, server.chain).

Under load a head passes many writes down the same link in one burst, and a tail answers many
writes of the same origin. Each as a message of its own costs a header, a dispatch and a handler
call at the receiver for a few keys: with backups that was most of a push's cost. `Batches` keeps
them in the order they were made and sends, at `flush`, one CHAIN per (successor, table) and one
ACK per (origin, table), with flag BATCH and a (m, 5) frame describing the writes; the receiver
splits them (wire.split) and handles each write as if it had come alone. A link with one write
gets a plain message.

A link whose send fails (TransportError: a dead or stuck peer) loses its own messages only: the
others of the burst still leave. The loss is logged and counted (`lost`), as pskv-server treats
any send to a dead peer: its writes' origins send them again after the membership change that its
death makes (client.backed), or their request_timeout reports them; an ACK lost to a dead origin
was awaited by nobody.

Order: the dispatcher flushes at the end of every burst, and the backup modules flush before they
send anything else down a chain (a SNAPSHOT, a reader's copy: `Copies.in_order`) and before a
membership change, so what crosses a link still crosses it in the order it was applied.

Threads and ownership: pskv-server only.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import TransportError
from ..net.endpoint import Endpoint
from ..net.wire import POSITIONS, Header, Kind

log = logging.getLogger(__name__)


class Batches:
    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        # (successor, table) -> [(origin, rid, part, flags, keys, pos, values)]
        self._chain: dict[tuple[int, int], list] = {}
        self._acks: dict[tuple[int, int], list] = {}  # (origin, table) -> [(rid, part, n, positions or None)]
        self.writes = 0  # writes and acks that left in a batch of two or more
        self.messages = 0  # batch messages sent
        self.lost = 0  # writes and acks whose link's send failed (a dead or stuck peer)

    def chain(
        self, dest: int, table: int, origin: int, rid: int, part: int, flags: int, keys, positions, values
    ) -> None:
        """A write to pass on to `dest`, the next member of its range's chain."""
        self._chain.setdefault((dest, table), []).append((origin, rid, part, flags, keys, positions, values))

    def ack(self, to: Header, n: int, positions) -> None:
        """Tell `to`'s origin that n keys of its write are on every copy."""
        if to.reply_to:  # answered in the origin's reply box: not batched
            self._endpoint.reply(to, Kind.ACK, n_keys=n, positions=positions)
            return
        self.ack_write(to.origin, to.table, to.request_id, to.part, n, positions)

    def ack_write(self, origin: int, table: int, rid: int, part: int, n: int, positions) -> None:
        """`ack` of a write that names no reply box (a write of a CHAIN batch), by its id."""
        self._acks.setdefault((origin, table), []).append((rid, part, n, positions))

    def flush(self) -> None:
        """Send what this burst made, one message per link; a link whose send fails loses only its own."""
        if self._chain:
            chain, self._chain = self._chain, {}
            for (dest, table), writes in chain.items():
                self._send(self._send_chain, dest, table, writes, "write(s) passed down the chain")
        if self._acks:
            acks, self._acks = self._acks, {}
            for (origin, table), writes in acks.items():
                self._send(self._send_acks, origin, table, writes, "ack(s)")

    def _send(self, send, dest: int, table: int, writes: list, what: str) -> None:
        try:
            send(dest, table, writes)
        except TransportError as exc:
            self.lost += len(writes)
            log.warning(
                "node %d lost %d %s of table %d to node %d: %s; their writers send them again after the "
                "membership change a dead node makes, or their request_timeout reports them",
                self._endpoint.rank,
                len(writes),
                what,
                table,
                dest,
                exc,
            )

    def _send_chain(self, dest: int, table: int, writes: list) -> None:
        if len(writes) == 1:
            origin, rid, part, flags, keys, positions, values = writes[0]
            self._endpoint.hop(
                dest,
                table,
                origin,
                rid,
                part,
                flags=flags,
                dim=values.shape[1],
                keys=keys,
                positions=positions,
                values=values,
            )
            return
        described = np.array(
            [
                (o, rid, part, len(k), flags if pos is None else flags | POSITIONS)
                for o, rid, part, flags, k, pos, _ in writes
            ],
            np.int64,
        )
        positions = np.concatenate(
            [np.arange(len(k), dtype=np.int64) if pos is None else pos for _, _, _, _, k, pos, _ in writes]
        )
        values = np.concatenate([v for *_, v in writes])
        keys = np.concatenate([k for _, _, _, _, k, _, _ in writes])
        self._endpoint.batch(dest, Kind.CHAIN, table, keys=keys, positions=positions, values=values, writes=described)
        self.writes += len(writes)
        self.messages += 1

    def _send_acks(self, origin: int, table: int, writes: list) -> None:
        if len(writes) == 1:
            rid, part, n, positions = writes[0]
            self._endpoint.answer(origin, Kind.ACK, table, rid, part=part, n_keys=n, positions=positions)
            return
        described = np.array(
            [(origin, rid, part, n, 0 if pos is None else POSITIONS) for rid, part, n, pos in writes], np.int64
        )
        positions = np.concatenate(
            [np.arange(n, dtype=np.int64) if pos is None else np.asarray(pos, np.int64) for _, _, n, pos in writes]
        )
        self._endpoint.batch(origin, Kind.ACK, table, origin=origin, positions=positions, writes=described)
        self.writes += len(writes)
        self.messages += 1

    def __repr__(self) -> str:
        return f"<Batches writes={self.writes} messages={self.messages} lost={self.lost}>"
