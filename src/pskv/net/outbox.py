"""Outbox: one thread's socket to one destination. It sends each small message packed into one
frame, and it can hold small messages back to send them packed together (the pskv-server thread
does, for the replies to one burst of requests). `pack` and `split` are the packed frame's format.

A packed frame is BATCH_MAGIC, a uint32 count c, c uint32 lengths (for each message its frame
count, then each frame's byte length), zero padding to a multiple of 8 bytes, and the frames
back to back, each starting at a multiple of 8 bytes (so numpy views of them are aligned). A
receiver splits it back into its messages (`split`) before anything reads a header: above the
transport, a message that travelled packed is indistinguishable from one sent as frames, and
messages keep their order.

Why: with pyzmq each frame of a multipart message is one more send call that releases and
retakes the GIL; on a loaded 2-core machine a 3-frame message cost 5-10x a 1-frame one, more
than the payload of any small request. Packing costs one copy of at most PACK_BYTES, which pyzmq
would make anyway for frames that small.

Threads and ownership: an Outbox belongs to the thread that made it (Transport keeps them
thread-local); the one exception is a coalesced request (client.coalesce) that another thread
sends on its owner's outbox, so that the owner's messages to that node keep their order: every
send takes the outbox's `lock` (Transport.send). Held messages follow send's `copy`: with copy=True they are
copies (bytes) and callers may reuse their arrays at once; with copy=False the frames are kept as
given (packing copies them once, when they leave) and must not change meanwhile.
"""

from __future__ import annotations

import struct
import threading

import numpy as np

from ..errors import ProtocolError

BATCH_MAGIC = b"PSKB"  # a packed frame starts with it (a pskv header with b"PSKV")
PACK_BYTES = 64 << 10  # a message up to this size travels packed (pyzmq copies frames this small anyway)
_ALIGN = 8
_COUNT = struct.Struct("<4sI")


class Outbox:
    """One thread's PUSH socket to one destination, with the messages held back for it."""

    __slots__ = ("sock", "rank", "url", "held", "held_bytes", "batches", "lock")

    def __init__(self, sock, rank: int, url: str = "") -> None:  # sock: a zmq PUSH socket
        self.sock = sock
        self.lock = threading.Lock()  # held while sending: another thread may send a coalesced request on it
        self.rank = rank  # the destination node
        self.url = url  # where sock is connected
        self.held: list[list[bytes]] = []  # messages not sent yet, in order
        self.held_bytes = 0
        self.batches = 0  # packed frames sent that carried more than one message

    def send(self, frames: list, nbytes: int, copy: bool) -> None:
        """Send now, after what is held (order is kept); packed into one frame if small."""
        if nbytes <= PACK_BYTES:
            self.held.append(frames)
            self._flush()
            return
        if self.held:
            self._flush()
        self.sock.send_multipart(frames, copy=copy)

    def hold(self, frames: list, nbytes: int, copy: bool, *, max_messages: int, max_bytes: int) -> None:
        """Keep a small message to send packed with the next ones (a copy with `copy`; else the
        frames themselves, which the caller must not change, as for a zero-copy send); send all
        that is held once there are `max_messages` or `max_bytes`."""
        self.held.append([f if isinstance(f, bytes) else _bytes(f) for f in frames] if copy else frames)
        self.held_bytes += nbytes
        if len(self.held) >= max_messages or self.held_bytes >= max_bytes:
            self._flush()

    def flush(self) -> None:
        """Send what is held."""
        if self.held:
            self._flush()

    def _flush(self) -> None:
        held, self.held, self.held_bytes = self.held, [], 0
        if len(held) > 1:
            self.batches += 1
        self.sock.send(pack(held), copy=True)


def _bytes(frame) -> bytes:
    if isinstance(frame, np.ndarray):
        return frame.tobytes()
    return bytes(frame)


def pack(messages: list[list]) -> bytes:
    """One frame carrying `messages` (each a list of frames: bytes, or contiguous arrays)."""
    lengths: list[int] = []
    body: list = []
    for frames in messages:
        lengths.append(len(frames))
        for f in frames:
            n = f.nbytes if hasattr(f, "nbytes") else len(f)
            lengths.append(n)
            body.append(f)
            if n % _ALIGN:
                body.append(_PAD[n % _ALIGN])
    head = _COUNT.pack(BATCH_MAGIC, len(lengths)) + struct.pack(f"<{len(lengths)}I", *lengths)
    if len(head) % _ALIGN:
        head += _PAD[len(head) % _ALIGN]
    return b"".join([head, *body])


_PAD = {r: b"\0" * (_ALIGN - r) for r in range(1, _ALIGN)}


def is_packed(frames: list) -> bool:
    if len(frames) != 1:
        return False
    first = frames[0]
    buf = first.buffer if hasattr(first, "buffer") else memoryview(first)
    return buf.nbytes >= _COUNT.size and buf[:4] == BATCH_MAGIC


def split(frames: list) -> list[list]:
    """The messages of a packed frame, each a list of memoryviews into it (no copy). Raises
    ProtocolError if it is malformed."""
    buf = frames[0].buffer if hasattr(frames[0], "buffer") else memoryview(frames[0])
    _, count = _COUNT.unpack_from(buf)
    offset = _COUNT.size + 4 * count
    if offset > buf.nbytes:
        raise ProtocolError(f"a packed frame of {buf.nbytes} bytes claims {count} lengths")
    lengths = struct.unpack_from(f"<{count}I", buf, _COUNT.size)
    offset += -offset % _ALIGN
    messages: list[list] = []
    i = 0
    while i < count:
        n_frames = lengths[i]
        i += 1
        if n_frames == 0 or i + n_frames > count:
            raise ProtocolError(f"a packed frame's message {len(messages)} claims {n_frames} frames")
        msg = []
        for n in lengths[i : i + n_frames]:
            if offset + n > buf.nbytes:
                raise ProtocolError(f"a packed frame's frames overrun its {buf.nbytes} bytes")
            msg.append(buf[offset : offset + n])
            offset += n + (-n % _ALIGN)
        i += n_frames
        messages.append(msg)
    return messages
