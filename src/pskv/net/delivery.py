"""Replies in: the half of `net.endpoint.Endpoint` that takes replies to this node's requests and
completes them in the `RequestTracker` (`Delivery`, its base class): `on_reply`, the dispatcher's
handler of PULL_REPLY, ACK, ERROR and RANGE_REPLY; a thread's reply box (`reply_box`), its `pump`,
and `deliver`, which admits what came to a box as the dispatcher admits what comes to the inbox.
A reply whose rows landed in the caller's `out` (net.replybox's landing) only completes its request.

Threads and ownership: pskv-server delivers the inbox's replies; the thread that owns a reply box
receives its own while it waits (any other thread may, under the box's lock). Nothing here holds
state but the count of garbage that reached a reply box (`dropped`, on the Endpoint).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..errors import ProtocolError, RemoteError
from .drops import peer_of
from .replybox import LANDED, MISFIT
from .requests import RequestTracker
from .transport import Transport
from .wire import BATCH, REPLIES, Header, Kind, Payload, frame_bytes, split, unpack, unpack_header

_ACKED = Payload(None, None, None, None)  # the payload of a write a fused reply answers (no positions: all of it)


class Delivery:
    """Replies in (the module docstring); `net.endpoint.Endpoint` sets these attributes."""

    tracker: RequestTracker
    dropped: int
    _transport: Transport
    _cluster: Callable[[], int]
    _admit: Callable[[Header], bool] | None

    # ---- replies ------------------------------------------------------------------------------------
    def reply_box(self, *, swept: bool = False) -> int:
        """The port of the calling thread's reply box for requests it will wait on itself; 0: none
        (its replies come through the inbox). `swept`: replies may wait there while the thread does
        not wait (client.coalesce): pskv-server takes them in (`Transport.sweep`)."""
        box = self._transport.reply_box()
        if box is None:
            return 0
        box.swept = box.swept or swept
        return box.port

    @property
    def pump(self) -> Callable[..., None] | None:
        """The calling thread's reply box's pump, for `Future.pumped_by`: pump(seconds, done=None)
        receives one reply from that box (waiting up to `seconds` for it, unless done() says the
        waiter's Future completed meanwhile) and delivers it, as pskv-server does with the inbox.
        Any thread may call it (a thread that waits on another's request takes the box's lock).
        Garbage, and replies of other clusters or kinds, are dropped."""
        box = self._transport.reply_box()
        if box is None:  # (no box: nothing of this thread's comes to one)
            return None
        if box.pumper is None:
            box.pumper = functools.partial(self._pump, box)
        return box.pumper

    def _pump(self, box, seconds: float, done: Callable[[], bool] | None = None) -> None:
        """(`done`: the waiter's Future is complete: checked once the lock is ours, since the sweep
        delivers what it takes before it lets go of the lock, and waiting on would wait for nothing.)"""
        if not box.lock.acquire(True, seconds):
            return
        try:
            frames = None if done is not None and done() else box.recv(seconds)
        finally:
            box.lock.release()
        if frames is not None:
            self.deliver(frames)

    def deliver(self, frames: list) -> None:
        """A message that came to a reply box: a reply of this cluster's members goes to `on_reply`."""
        try:
            header = unpack_header(frame_bytes(frames[0]))
        except ProtocolError:
            header = None
        if (
            header is not None
            and header.kind in REPLIES
            and header.cluster == self._cluster()
            and (self._admit is None or self._admit(header))
        ):
            self.on_reply(header, frames)
        else:
            self.dropped += 1
            why = "garbage" if header is None else f"{header!r}: not a reply of this cluster's members"
            self._transport.drops.add(
                peer_of(frames, None if header is None else header.sender), f"in a reply box: {why}"
            )

    # ---- delivering a reply (pskv-server for the inbox, the waiting thread for its reply box) --------
    def on_reply(self, header: Header, frames: list) -> None:
        """A reply to one of this node's requests: complete its part in the tracker."""
        if len(frames) == 2 and (frames[1] is LANDED or frames[1] is MISFIT):  # (received into its `out`: replybox)
            if frames[1] is LANDED:
                self.tracker.on_reply(header.request_id, header.n_keys, header.sender)
            else:
                error = ProtocolError(f"node {header.sender} answered {header!r} with a rows frame of another size")
                self.tracker.on_reply(header.request_id, 0, header.sender, error=error)
            return
        if header.kind == Kind.ERROR:
            message = frame_bytes(frames[1]).decode(errors="replace") if len(frames) > 1 else "?"
            self.tracker.on_reply(
                header.request_id,
                0,
                header.sender,
                error=RemoteError(f"node {header.sender} rejected the request: {message}", header.sender),
            )
            return
        try:
            payload = unpack(header, frames)
        except ProtocolError as exc:
            self.tracker.on_reply(header.request_id, 0, header.sender, error=exc)
            return
        if payload.fused is not None:  # a fused pull's rows (flag FUSED): they answer its push whole too
            rid, part, n = payload.fused.tolist()
            acked = Header(
                Kind.ACK,
                header.cluster,
                header.sender,
                header.table,
                rid,
                part,
                n,
                origin=header.origin,
                epoch=header.epoch,
            )
            self.tracker.on_reply(rid, n, header.sender, (acked, _ACKED))
        if header.flags & BATCH:  # the acks of several writes (server.batches)
            try:
                for one, part in split(header, payload):
                    self.tracker.on_reply(one.request_id, one.n_keys, header.sender, (one, part))
            except ProtocolError as exc:
                self.dropped += 1
                self._transport.drops.add(peer_of(frames, header.sender), f"a malformed batch of acks: {exc}")
            return
        count = 1 if header.kind == Kind.RANGE_REPLY else header.n_keys  # (a range is one part, whatever it holds)
        self.tracker.on_reply(header.request_id, count, header.sender, (header, payload))
