"""ReplyBox: one thread's own inbox for the replies to requests it waits on, and how a socket's
messages are received (net.transport uses the same helpers for the node's inbox).

A ReplyBox is a PULL socket on a random port of the node's host (and, with ipc, a file in the
private directory). Its thread receives on it while it waits (net.endpoint.pump); any other thread
may too, holding the box's `lock`: one that waits on the owner's request, and pskv-server's sweep
(Transport.sweep) of boxes marked `swept` (threads that coalesce pulls, client.coalesce).
A packed frame (net.outbox) becomes its messages, in order (`Unpacker`).

Landing (issue 31): the owner of a box may name one reply it expects (`expect`: the request id and
the caller's `out`) before it sends a plain PULL whose rows one node answers whole. When that
reply comes, its rows are received straight into `out` (`recv_into`: one copy, made by libzmq
without the GIL, no frame or array object), and the message is delivered as `[header, LANDED]`:
net.endpoint admits it as any reply and completes its request without writing rows again. A
reply that does not fit (another request, flags, positions, another size), or comes when its request
is no longer pending (failed, expired), is received as usual. The expectation is used once; a later
request of the thread replaces it. Rows land before net.endpoint admits the message: one it drops (another
cluster, a fenced node) leaves rows in `out` that the request's own reply overwrites before it completes.

A box's receive waits with the socket's RCVTIMEO (set when the timeout changes), not a poll and
then a receive: a blocking pull's reply costs one call into libzmq, as raw pyzmq's does.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable

import zmq

from ..config import zmq_url
from ..errors import ProtocolError
from .auth import ClusterKeys
from .drops import Drops, peer_of
from .outbox import is_packed, split
from .private_ipc import bind_private, ipc_file
from .wire import HEADER_SIZE, lands

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_RCVTIMEO = int(zmq.RCVTIMEO)
_get = zmq.backend.Socket.get  # (not zmq.Socket.get: it wraps the result in an enum, microseconds per call)
_set = zmq.backend.Socket.set
LANDED = b"landed"  # frame 1 of a reply whose rows were received into the expected `out` (see the module docstring)
MISFIT = b"misfit"  # ... of one whose rows frame had another size than `out`: what is there is garbage


def recv_all(sock, flags: int = 0) -> list:
    """A message's frames (zmq.Frame, no copy). recv_multipart asks RCVMORE through pyzmq's
    option enums (~5 us a message); a Frame knows whether more follow."""
    frame = sock.recv(flags, copy=False)
    frames = [frame]
    while frame.more:
        frame = sock.recv(flags, copy=False)
        frames.append(frame)
    return frames


def waiting(sock) -> bool:
    """Whether a message waits on `sock` (cheaper than the zmq.Again a NOBLOCK recv raises)."""
    return bool(int(_get(sock, _EVENTS)) & _POLLIN)


def unlink(path) -> None:
    """Remove an ipc file we bound (libzmq leaves it behind)."""
    with contextlib.suppress(OSError):
        path and path.unlink()


class Unpacker:
    """Turns received ZeroMQ messages into pskv messages: a packed frame becomes its messages, in order."""

    __slots__ = ("queue", "dropped", "_drops")

    def __init__(self, drops: Drops) -> None:
        self.queue: collections.deque = collections.deque()
        self.dropped = 0  # malformed packed frames
        self._drops = drops

    def take(self, frames: list) -> list | None:
        if not is_packed(frames):
            return frames
        try:
            self.queue.extend(split(frames))
        except ProtocolError as exc:
            self.dropped += 1
            self._drops.add(peer_of(frames), f"a malformed packed frame: {exc}")
        return self.queue.popleft() if self.queue else None


class ReplyBox:
    """One thread's own inbox for the replies to requests it waits on (a PULL socket on a random port).

    Threads and ownership: the thread that made it (`thread`) receives on it while it waits; any
    other thread may too, holding `lock` (one that waits on that thread's request, and pskv-server's
    sweep of replies nobody waits for yet: net.dispatch); peers' server threads send to it. Closed
    by Transport.close()."""

    __slots__ = (
        "port",
        "thread",
        "lock",
        "pumper",
        "swept",
        "_sock",
        "_in",
        "_ipc",
        "_timeo",
        "_into",
        "_pending",
        "landed",
    )

    def __init__(self, ctx: zmq.Context, host: str, keys: ClusterKeys | None, drops: Drops, ipc) -> None:
        self._sock = ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        if keys is not None:
            keys.server(self._sock)
        if ":" in host:
            self._sock.setsockopt(zmq.IPV6, 1)
        self.port = self._sock.bind_to_random_port(zmq_url(host, 0).rsplit(":", 1)[0])
        self._ipc = ipc and ipc_file(ipc, self.port)  # ipc: the private directory, or None
        if self._ipc:
            self._ipc = bind_private(self._sock, keys, self._ipc)
        self.thread = threading.get_ident()
        self.lock = threading.Lock()  # held while receiving (see the class docstring)
        self.pumper: Callable[..., None] | None = None  # net.endpoint's pump(seconds) bound to this box, made once
        self.swept = False  # replies may wait here unread while the owner works (Transport.sweep takes them)
        self._in = Unpacker(drops)
        self._timeo = -1  # the socket's RCVTIMEO, ms
        self._into: tuple | None = None  # (request id, out, dim, dtype code): the reply to land in out (`expect`)
        self._pending: Callable[[int], bool] = bool  # whether a request is still pending (`expect`)
        self.landed = 0  # replies whose rows landed in the expected `out`, for stats and tests

    def expect(self, rid: int, out, dim: int, code: int, pending: Callable[[int], bool]) -> None:
        """The owner thread, before it sends request `rid`: land its whole plain PULL_REPLY of
        len(out) rows of `dim` values of dtype `code` in `out` (C-contiguous, writeable) while
        pending(rid) (the tracker's)."""
        self._pending = pending
        self._into = (rid, out, dim, code)

    def recv(self, timeout: float) -> list | None:
        """One message (its frames), or None after `timeout` seconds. Holding `lock`."""
        if self._in.queue:
            return self._in.queue.popleft()
        ms = max(0, int(timeout * 1000))
        if ms != self._timeo:
            _set(self._sock, _RCVTIMEO, ms)
            self._timeo = ms
        try:
            return self._take(0)
        except zmq.Again:
            return None

    def recv_nowait(self) -> list | None:
        """One message if one is waiting, else None. Holding `lock`."""
        if self._in.queue:
            return self._in.queue.popleft()
        if not waiting(self._sock):
            return None
        return self._take(zmq.NOBLOCK)

    def _take(self, flags: int) -> list | None:
        """Receive one message: its rows into the expected `out` when it is that reply (module docstring)."""
        sock = self._sock
        frame = sock.recv(flags, copy=False)
        into = self._into
        if (
            into is not None
            and frame.more
            and len(frame) == HEADER_SIZE
            and lands(frame.buffer, *into)
            and self._pending(into[0])
        ):
            self._into = None  # (once)
            out = into[1]
            # (a frame after the rows, which a plain PULL_REPLY never has, would come as messages of
            # their own, dropped as garbage: asking RCVMORE costs pyzmq an enum look-up per call)
            if sock.recv_into(out, flags=flags) != out.nbytes:
                return [frame, MISFIT]
            self.landed += 1
            return [frame, LANDED]
        frames = [frame]
        while frame.more:
            frame = sock.recv(flags, copy=False)
            frames.append(frame)
        return self._in.take(frames)

    @property
    def dropped(self) -> int:
        return self._in.dropped

    def close(self) -> None:
        unlink(self._ipc)
        self._sock.close(linger=0)
