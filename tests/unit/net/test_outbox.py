"""net/outbox.py and its use by net/transport.py: packed frames, held messages, reply boxes."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.errors import ProtocolError
from pskv.net import outbox
from pskv.net.transport import HOLD_BYTES, Transport

pytestmark = pytest.mark.timeout(60)


def _messages():
    rng = np.random.default_rng(0)
    return [[b"h" * 42, rng.integers(0, 99, n).astype(np.int64), rng.standard_normal((n, 3)).astype(np.float32)]
            for n in (0, 1, 5, 13)] + [[b"x" * 7], [b"", b"abc"]]


def test_pack_then_split_gives_back_every_message_in_order():
    messages = _messages()
    frame = outbox.pack(messages)
    assert outbox.is_packed([frame]) and not outbox.is_packed([frame, b""])
    got = outbox.split([frame])
    assert len(got) == len(messages)
    for want, have in zip(messages, got):
        assert [bytes(memoryview(f)) for f in want] == [bytes(f) for f in have]


def test_split_views_are_aligned_for_numpy():
    """Every frame of a packed message starts at a multiple of 8 bytes of the packed frame."""
    frame = np.frombuffer(outbox.pack(_messages()), np.uint8).copy()  # an 8-aligned buffer
    for msg in outbox.split([frame]):
        for f in msg:
            assert np.frombuffer(f, np.uint8).ctypes.data % 8 == 0


@pytest.mark.parametrize("cut", [8, 12, 40, -9])  # -9: into the last frame's bytes (past its padding)
def test_a_truncated_packed_frame_is_a_protocol_error(cut):
    frame = outbox.pack(_messages())
    with pytest.raises(ProtocolError):
        outbox.split([frame[:cut]])


def test_a_message_claiming_no_frames_is_a_protocol_error():
    frame = bytearray(outbox.pack([[b"abc"]]))
    frame[8:12] = (0).to_bytes(4, "little")  # message 0: zero frames
    with pytest.raises(ProtocolError, match="claims 0 frames"):
        outbox.split([bytes(frame)])


@pytest.fixture
def pair():
    a, b = Transport(), Transport()
    a.set_address(1, b.address)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _recv_all(t: Transport, n: int) -> list[list[bytes]]:
    got = []
    while len(got) < n:
        frames = t.recv(10.0)
        assert frames is not None, f"only {len(got)} of {n} messages arrived"
        got.append([bytes(memoryview(f)) for f in frames])
    return got


def test_small_messages_travel_packed_and_arrive_as_sent(pair):
    a, b = pair
    a.send(1, [b"one", np.arange(3, dtype=np.int64)])
    big = np.arange(HOLD_BYTES * 40, dtype=np.uint8)  # > PACK_BYTES: sent as frames
    a.send(1, [b"two", big])
    got = _recv_all(b, 2)
    assert got == [[b"one", np.arange(3, dtype=np.int64).tobytes()], [b"two", big.tobytes()]]
    assert b.messages_received == 2 and a.messages_sent == 2


def test_a_holding_thread_sends_its_messages_packed_together_on_flush(pair):
    """hold_all() (pskv-server) keeps small messages until flush(): they leave as one frame, and
    the receiver sees each message alone, in order; one too large to hold leaves at once, after
    (and packed with) what is held."""
    a, b = pair
    a.hold_all()
    for i in range(10):
        a.send(1, [b"msg", np.full(4, i, np.int64)])
    assert b.recv(0.05) is None  # nothing left yet
    big = np.zeros(HOLD_BYTES + 8, np.uint8)
    a.send(1, [b"big", big])  # leaves now, behind the ten: order is kept
    a.send(1, [b"after", b"x"])
    a.flush()
    got = _recv_all(b, 12)
    assert got[:10] == [[b"msg", np.full(4, i, np.int64).tobytes()] for i in range(10)]
    assert got[10] == [b"big", big.tobytes()] and got[11] == [b"after", b"x"]
    assert a.batches_sent == 1  # the ten and the big one went as one frame ...
    assert b.messages_received == 2  # ... and the last alone


def test_held_arrays_may_change_after_send(pair):
    """A message held with copy=True is a copy: the caller may reuse its array at once."""
    a, b = pair
    a.hold_all()
    keys = np.arange(4, dtype=np.int64)
    a.send(1, [b"k", keys], copy=True)
    keys[:] = -1
    a.flush()
    assert _recv_all(b, 1) == [[b"k", np.arange(4, dtype=np.int64).tobytes()]]


def test_a_send_to_a_port_reaches_that_reply_box_not_the_inbox(pair):
    a, b = pair
    box = b.reply_box()
    assert box is not None and b.reply_box() is box  # one per thread
    a.send(1, [b"to the box"], port=box.port)
    frames = box.recv(10.0)
    assert frames is not None and [bytes(memoryview(f)) for f in frames] == [b"to the box"]
    assert b.recv(0.05) is None


def test_pump_delivers_replies_from_the_box_and_drops_everything_else(pair):
    """A Future pumped by its thread completes from the reply box; garbage, other clusters' and
    non-reply messages that reach the box are counted and dropped."""
    from pskv.net.endpoint import Endpoint
    from pskv.net.requests import RequestTracker
    from pskv.net.wire import Header, Kind

    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: 7)
    port = ep.reply_box()
    rid, fut = tracker.new_request(3)
    fut.pumped_by(ep.pump)
    a.send(1, [b"garbage"], port=port)
    a.send(1, [Header(Kind.ACK, cluster=8, request_id=rid, n_keys=3).pack()], port=port)  # another cluster
    a.send(1, [Header(Kind.PULL, cluster=7, request_id=rid, n_keys=3).pack()], port=port)  # not a reply
    a.send(1, [Header(Kind.ACK, cluster=7, request_id=rid, n_keys=3).pack()], port=port)
    assert fut.wait(10) is None
    assert ep.dropped == 3 and len(tracker) == 0


def test_a_message_held_without_copy_keeps_its_arrays_until_it_leaves(pair):
    """copy=False (pskv-server's replies): the frames wait as given, no copy until they are packed."""
    a, b = pair
    a.hold_all()
    rows = np.arange(6, dtype=np.float32)
    a.send(1, [b"r", rows])
    assert a._outbox(1).held[0][1] is rows
    a.flush()
    assert _recv_all(b, 1) == [[b"r", rows.tobytes()]]


def test_close_closes_a_socket_it_lost_track_of_and_does_not_hang(caplog):
    """A socket of the transport's context that close() does not know (one in a buffer-full send to a
    peer that never came, LINGER unset) would make ZeroMQ's term() wait for ever: close() closes it."""
    import time

    import zmq

    t = Transport()
    stray = t._ctx.socket(zmq.PUSH)  # LINGER -1: term() would wait for its message
    stray.connect("tcp://127.0.0.1:9")  # nobody listens there
    stray.send(b"never delivered", zmq.NOBLOCK)
    began = time.monotonic()
    t.close()
    assert stray.closed and time.monotonic() - began < 5
    assert "1 ZeroMQ socket(s) still open" in caplog.text
