"""Endpoint: the one place that builds headers and sends data messages, and that takes replies in.

Every request, reply, forward and error of the data path leaves through `Endpoint`: it stamps
the cluster id and this node's rank, builds the frames with `wire.encode`, tells the tracker
where a tracked request went, and hands the frames to `Transport` (the calling thread's own
socket). Replies that come back (PULL_REPLY, ACK, ERROR) arrive in `on_reply`, the handler the
dispatcher calls for them, and complete requests in the `RequestTracker` (that half, with reply
boxes and their pump, is net.delivery's `Delivery`, Endpoint's base class). A blocking plain pull
leaves on a short path (`pull`: its header packed at once), and a pull part served whole is
answered on one (`rows`).

Threads and ownership: any thread may send (Transport gives each thread its own sockets); replies
are taken in by pskv-server, except those to a reply box, which the thread that owns the box takes
in itself while it waits (`pump`). Endpoint holds no lock and no state of its own but a counter
of garbage that reached a reply box (also counted in the transport's `drops`, which logs at most
one line per peer per minute), per thread the holds of coalesced pulls (client.coalesce) to
send before any other message of that thread to their node, so that its messages keep their order,
and per thread the requests it gathers (`gather`/`release`): a push and a pull of one table to one
node leave fused in one message (flag FUSED, Table.exchange), which the node answers with one reply.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .delivery import Delivery
from .outbox import Outbox
from .requests import RequestTracker
from .transport import Transport
from .wire import (
    REPLIES,
    Header,
    Kind,
    dtype_code,
    encode,
    pull_header,
    rows_header,
)

HANDLES = REPLIES  # the kinds `on_reply` takes


class _Holds(threading.local):
    # (class defaults: a missing attribute of a threading.local costs a raise inside getattr)
    by_dest: dict | None = None  # {rank: [hold]}
    by_table: dict | None = None  # {(table id, rank): hold}
    gathered: list | None = None  # requests held until `release` (see `gather`), in order


def _carries(arrays: dict, *names: str) -> bool:
    """The request's arrays are exactly `names` (others None)."""
    return all((arrays.get(k) is not None) == (k in names) for k in arrays) and all(
        arrays.get(k) is not None for k in names
    )


class Endpoint(Delivery):
    def __init__(
        self,
        rank: int,
        transport: Transport,
        tracker: RequestTracker,
        cluster: Callable[[], int],
        epoch: Callable[[], int] = lambda: 0,
        admit: Callable[[Header], bool] | None = None,
    ) -> None:
        self.rank = rank
        self.tracker = tracker
        self._transport = transport
        self._cluster = cluster  # the cluster id, known once the node joined
        self._epoch = epoch  # this node's membership epoch, stamped on every message
        self._admit = admit  # whether a reply in a reply box comes from a live member (the dispatcher's gate)
        self.dropped = 0  # garbage that reached a reply box
        self.fused = 0  # messages sent that carried a push and a pull (see `gather`); GIL-atomic +=
        self._holds = _Holds()  # the calling thread's holds (see `hold`) and gathered requests (`gather`)

    # ---- sending ------------------------------------------------------------------------------------
    def request(
        self,
        dest: int,
        kind: Kind,
        table: int,
        rid: int,
        *,
        part: int = 0,
        dim: int = 0,
        copy: bool = False,
        reply_to: int = 0,
        flags: int = 0,
        codec=None,
        via: Outbox | None = None,
        **arrays,
    ) -> None:
        """Send part `part` of this node's tracked request `rid` to node `dest`; its replies come to
        this node's inbox, or with `reply_to`, to that reply box (see `pump`). `codec` (a
        net.codec.Codec): key caching, compression, 16-bit values on the way (the server decodes).
        `via`: the outbox of the thread whose coalesced pulls these are (client.coalesce); without
        it, what the calling thread holds for `dest` leaves first."""
        if via is None:
            self._unhold(dest)
        self.tracker.sent_to(rid, dest)
        if via is None and self._holds.gathered is not None:
            self._holds.gathered.append((dest, kind, table, rid, part, dim, copy, reply_to, flags, codec, arrays))
            return
        self._send(dest, kind, table, rid, part, dim, copy, reply_to, flags, codec, via, arrays)

    def pull(self, dest: int, table: int, rid: int, dim: int, reply_to: int, keys: np.ndarray, into=None) -> None:
        """`request(dest, Kind.PULL, table, rid, dim=dim, copy=True, reply_to=reply_to, keys=keys)` of a
        plain pull's only part, on a short path (its header packed at once, no Header object). `into`:
        the caller's `out`, C-contiguous, where its reply's rows land when one reply answers all of them
        (net.replybox's landing; with `reply_to` only, the calling thread's box)."""
        holds = self._holds
        if holds.gathered is not None:
            self.request(dest, Kind.PULL, table, rid, dim=dim, copy=True, reply_to=reply_to, keys=keys)
            return
        if holds.by_dest:
            self._unhold(dest)
        self.tracker.sent_to(rid, dest)
        if into is not None and reply_to:
            box = self._transport.reply_box()
            if box is not None and box.port == reply_to:
                box.expect(rid, into, dim, dtype_code(into.dtype), self.tracker.pending)
        header = pull_header(self._cluster(), self.rank, table, rid, len(keys), dim, reply_to, self._epoch())
        self._transport.send(dest, [header, np.ascontiguousarray(keys, np.int64)], copy=True)

    def _send(self, dest, kind, table, rid, part, dim, copy, reply_to, flags, codec, via, arrays) -> None:
        header = self._stamp(
            Header(
                kind, table=table, request_id=rid, part=part, dim=dim, flags=flags, origin=self.rank, reply_to=reply_to
            )
        )
        frames = encode(header, **arrays)
        if codec is not None:
            frames = codec.encode(frames, header, dest)
        if via is None:
            self._transport.send(dest, frames, copy=copy)
        else:
            self._transport.send(dest, frames, copy=copy, via=via)

    def gather(self) -> None:
        """Hold the calling thread's requests from now until its `release()` (Table.exchange, around a
        push and then a pull: nothing waits for a reply in between)."""
        self._holds.gathered = []

    def release(self) -> None:
        """Send what the calling thread gathered since `gather()`, in order. A plain PUSH (no codec, no
        flags) and a later plain PULL of the same table to the same node, with the same reply box and no
        message for that node between them, leave as one message (flag FUSED: the PUSH, then the PULL's
        request id, part and keys in one frame): the node applies the push, then serves the pull, and
        answers both in one PULL_REPLY when it holds all their keys (server.exchange)."""
        items: list = self._holds.gathered or []
        self._holds.gathered = None
        error = None
        for i, item in enumerate(items):
            if item is None:
                continue
            dest, kind, table, rid, part, dim, copy, reply_to, flags, codec, arrays = item
            if kind == Kind.PUSH and codec is None and not flags and _carries(arrays, "keys", "values"):
                pull = next((j for j in range(i + 1, len(items)) if items[j] is not None and items[j][0] == dest), None)
                other = None if pull is None else items[pull]
                if (
                    pull is not None
                    and other is not None
                    and other[1] == Kind.PULL
                    and other[2] == table
                    and other[7] == reply_to
                    and other[9] is None
                    and not other[8]
                    and _carries(other[10], "keys")
                ):
                    keys = other[10]["keys"]
                    fused = np.empty(2 + len(keys), np.int64)  # (the pull's request id, part, keys)
                    fused[0], fused[1] = other[3], other[4]
                    fused[2:] = keys
                    items[pull] = None
                    self.fused += 1
                    arrays = {"keys": arrays["keys"], "values": arrays["values"], "fused": fused}
            try:
                self._send(dest, kind, table, rid, part, dim, copy, reply_to, flags, codec, None, arrays)
            except Exception as exc:  # noqa: BLE001 - the others still leave; the caller gets the first error
                error = error or exc
        if error is not None:
            raise error

    def outbox(self, dest: int) -> Outbox:
        """The calling thread's outbox to `dest`, for `request(via=)`."""
        return self._transport.outbox(dest)

    def hold(self, table: int, dest: int, hold) -> None:
        """Register the calling thread's `hold` of coalesced pulls of `table` to `dest`
        (client.coalesce.Hold): its `flush()` runs before any other message of this thread leaves for `dest`."""
        holds = self._holds
        if holds.by_dest is None or holds.by_table is None:  # (both made at once)
            holds.by_dest, holds.by_table = {}, {}
        holds.by_dest.setdefault(dest, []).append(hold)
        holds.by_table[(table, dest)] = hold

    def held(self, table: int, dest: int):
        """The calling thread's hold for (`table`, `dest`), or None."""
        by_table = self._holds.by_table
        return None if by_table is None else by_table.get((table, dest))

    def _unhold(self, dest: int) -> None:
        by_dest = self._holds.by_dest
        if by_dest:
            for hold in by_dest.get(dest, ()):
                hold.flush()  # (also waits for one that another thread is sending now)

    def reply(self, to: Header, kind: Kind, *, n_keys: int = 0, **arrays) -> None:
        """Answer the request `to` at its origin (ACK, PULL_REPLY, or a TRANSFER a HANDOVER causes),
        in the reply box it names, if any."""
        self.send(to.origin, self.reply_header(to, kind, n_keys), port=to.reply_to, **arrays)

    def rows(self, to: Header, rows: np.ndarray) -> None:
        """`reply(to, Kind.PULL_REPLY, n_keys=len(rows), values=rows)` of a pull part served whole here
        (`rows` C-contiguous, sent zero-copy), its header packed at once."""
        dest = to.origin
        if self._holds.by_dest:
            self._unhold(dest)
        header = rows_header(
            self._cluster(), self.rank, to, len(rows), rows.shape[1], dtype_code(rows.dtype), self._epoch()
        )
        self._transport.send(dest, [header, rows], port=to.reply_to)

    def reply_here(self, to: Header, kind: Kind, *, n_keys: int = 0, **arrays) -> None:
        """Answer a request of this very node without a message (the tail of a chain that wrote it)."""
        header = self._stamp(self.reply_header(to, kind, n_keys))
        self.on_reply(header, encode(header, **arrays))

    def answer(self, node: int, kind: Kind, table: int, rid: int, *, part: int = 0, n_keys: int = 0, **arrays) -> None:
        """Answer part `part` of request `rid` of node `node` at its inbox (one reply for requests of
        several nodes, as an aggregation owner sends when a round completes; the ACK of one write of
        a chain), or at once, without a message, when `node` is this one."""
        header = Header(kind, table=table, request_id=rid, part=part, n_keys=n_keys, origin=node)
        if node == self.rank:
            self._stamp(header)
            self.on_reply(header, encode(header, **arrays))
        else:
            self.send(node, header, **arrays)

    def complete(self, rid: int, count: int, sender: int = -1, *, error: BaseException | None = None) -> None:
        """Credit `count` keys of this node's request `rid` as answered by node `sender`, or fail it
        with `error`, without a message (keys that reached this node: a localize's rows came)."""
        self.tracker.on_reply(rid, count, sender, error=error)

    def own_request(self, kind: Kind, table: int, rid: int, *, dim: int = 0, flags: int = 0) -> Header:
        """The header of this node's request `rid` as its own pskv-server would receive it, for one it
        takes without a message (the write of an aggregated round at its range's head, server.rounds)."""
        return self._stamp(Header(kind, table=table, request_id=rid, dim=dim, flags=flags, origin=self.rank))

    def hop(
        self, dest: int, table: int, origin: int, rid: int, part: int, *, flags: int = 0, dim: int = 0, **arrays
    ) -> None:
        """Pass write `part` of request `rid` of node `origin` (CHAIN) on to `dest`: the next copy of
        its key range, or a reader of some of its keys (flag READER)."""
        self.send(
            dest,
            Header(Kind.CHAIN, table=table, request_id=rid, part=part, dim=dim, flags=flags, origin=origin),
            **arrays,
        )

    def notice(self, dest: int, kind: Kind, table: int, *, flags: int = 0, **arrays) -> None:
        """A message of this node's own to `dest` that asks no reply (an INTENT with flag GRANT:
        server.intents)."""
        self.send(dest, Header(kind, table=table, flags=flags, origin=self.rank), **arrays)

    def batch(self, dest: int, kind: Kind, table: int, *, origin: int = 0, **arrays) -> None:
        """Several writes of `table` in one message (CHAIN hops, or ACKs to `origin`): `writes`, a
        (m, 5) frame, names each (flag BATCH, `wire.split`)."""
        self.send(dest, Header(kind, table=table, origin=origin), **arrays)

    def snapshot(
        self, dest: int, table: int, r: int, *, origin: int, request_id: int = 0, flags: int = 0, **arrays
    ) -> None:
        """Key range `r`'s copy of `table` (SNAPSHOT: rows, state, applied writes) to `dest`: the next
        member of its chain, or (flag READER) a reader, for its localize `request_id` of node `origin`."""
        self.send(
            dest,
            Header(Kind.SNAPSHOT, table=table, request_id=request_id, part=r, flags=flags, origin=origin),
            **arrays,
        )

    def decline(self, to: Header, owner: int, ms: int, **arrays) -> None:
        """Tell the origin of the localize `to` that its `keys` stay at node `owner` for `ms` more
        milliseconds at least (DECLINE: `part` the owner, `dim` the ms)."""
        header = self.reply_header(to, Kind.DECLINE, 0)
        header.part, header.dim = owner, ms
        self.send(to.origin, header, **arrays)

    def error(self, to: Header, message: str) -> None:
        """Tell the origin of `to` that it failed here, in words."""
        header = self._stamp(self.reply_header(to, Kind.ERROR, 0))
        self._transport.send(to.origin, [header.pack(), message.encode()], port=to.reply_to)

    def forward(self, dest: int, header: Header, flags: int, **arrays) -> None:
        """Pass part of a request on to `dest`, keeping its origin, id and part."""
        h = Header(
            header.kind,
            table=header.table,
            request_id=header.request_id,
            part=header.part,
            dim=header.dim,
            flags=flags,
            origin=header.origin,
            reply_to=header.reply_to,
        )
        self.send(dest, h, **arrays)

    def send(self, dest: int, header: Header, *, copy: bool = False, port: int = 0, **arrays) -> None:
        self._unhold(dest)
        self._transport.send(dest, encode(self._stamp(header), **arrays), copy=copy, port=port)

    def reply_header(self, to: Header, kind: Kind, n_keys: int) -> Header:
        return Header(kind, table=to.table, request_id=to.request_id, part=to.part, n_keys=n_keys, origin=to.origin)

    def _stamp(self, header: Header) -> Header:
        header.cluster, header.sender, header.epoch = self._cluster(), self.rank, self._epoch()
        return header
