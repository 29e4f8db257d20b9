"""A blocking pull's reply received straight into the caller's `out` (net.replybox's landing, issue 31):
the one expected plain PULL_REPLY lands once and completes its request with exact rows; any other
reply (another request, positions, another size, an ERROR) takes the usual path; a reply whose rows
frame has another size fails its request; `Endpoint.pull`'s header is the one `encode` makes."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.errors import ProtocolError
from pskv.net import wire
from pskv.net.endpoint import Endpoint
from pskv.net.replybox import LANDED, MISFIT
from pskv.net.requests import RequestTracker
from pskv.net.transport import Transport
from pskv.net.wire import Header, Kind, encode

pytestmark = pytest.mark.timeout(60)
CLUSTER = 7
N, DIM = 300, 64  # 76,800 bytes of rows: more than a packed frame carries (net.outbox.PACK_BYTES), as a
# 1,000-key reply; smaller replies travel packed and take the usual path


@pytest.fixture
def pair():
    a, b = Transport(), Transport()
    a.set_address(1, b.address)
    b.set_address(0, a.address)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _reply(rid: int, rows: np.ndarray, *, positions=None, part: int = 0) -> list:
    header = Header(Kind.PULL_REPLY, cluster=CLUSTER, sender=0, request_id=rid, part=part, origin=1)
    return encode(header, positions=positions, values=rows)


def _pump_until(ep: Endpoint, fut, seconds: float = 10.0) -> None:
    fut.pumped_by(ep.pump)
    fut.wait(seconds)


def _request(tracker: RequestTracker, out: np.ndarray):
    """A pull's tracker entry whose one part writes rows by position into `out` (as client.request does)."""

    def on_part(sender, payload):
        if payload is None:
            return None
        header, p = payload
        if header.part or (p.positions is None and len(p.values) != len(out)):
            raise ProtocolError(f"part {header.part} of {len(p.values)} rows does not fit")
        if p.positions is None:
            np.copyto(out, p.values)
        else:
            out[p.positions] = p.values
        return None

    return tracker.new_request(len(out), on_part=on_part, result=out)


def test_pull_header_is_what_encode_makes():
    keys = np.array([5, 9, 2], np.int64)
    header = Header(Kind.PULL, cluster=3, sender=1, table=4, request_id=77, dim=8, origin=1, reply_to=5000, epoch=2)
    frames = encode(header, keys=keys)
    assert wire.pull_header(3, 1, 4, 77, 3, 8, 5000, 2) == frames[0]


def test_the_expected_reply_lands_in_out_once_with_exact_rows(pair):
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: CLUSTER)
    port = ep.reply_box()
    rows = np.arange(N * DIM, dtype=np.float32).reshape(N, DIM) + 0.5
    out = np.zeros((N, DIM), np.float32)
    rid, fut = _request(tracker, out)
    b.reply_box().expect(rid, out, DIM, wire.dtype_code(np.float32), tracker.pending)
    a.send(1, _reply(rid, rows), port=port)
    box = b.reply_box()
    frames = None
    while frames is None:
        with box.lock:
            frames = box.recv(5.0)
    assert frames[1] is LANDED
    assert np.array_equal(out, rows)
    ep.deliver(frames)
    assert fut.wait(1) is out and np.array_equal(out, rows)
    # used once: the same rows again (a duplicate) take the usual path, to an unknown request
    a.send(1, _reply(rid, rows * 2), port=port)
    with box.lock:
        again = box.recv(5.0)
    assert again is not None and again[1] is not LANDED and len(again) == 2
    assert np.array_equal(out, rows)


@pytest.mark.parametrize("case", ["other request", "positions", "other part", "fewer rows"])
def test_other_replies_take_the_usual_path(pair, case):
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: CLUSTER)
    port = ep.reply_box()
    out = np.zeros((N, DIM), np.float32)
    rid, fut = _request(tracker, out)
    b.reply_box().expect(
        rid + 1 if case == "other request" else rid, out, DIM, wire.dtype_code(np.float32), tracker.pending
    )
    rows = np.arange(N * DIM, dtype=np.float32).reshape(N, DIM) + 1
    if case == "positions":  # two replies of half the rows each, by position
        odd, even = np.arange(1, N, 2)[::-1], np.arange(0, N, 2)
        a.send(1, _reply(rid, rows[odd], positions=odd), port=port)
        a.send(1, _reply(rid, rows[even], positions=even), port=port)
    elif case == "other part":
        a.send(1, _reply(rid, rows, part=1), port=port)
    elif case == "fewer rows":
        a.send(1, _reply(rid, rows[:-1]), port=port)
    else:
        a.send(1, _reply(rid, rows), port=port)
    box = b.reply_box()
    got = []
    while len(got) < (2 if case == "positions" else 1):
        with box.lock:
            frames = box.recv(5.0)
        if frames is not None:
            assert frames[-1] is not LANDED
            got.append(frames)
            ep.deliver(frames)
    if case in ("other request", "positions"):
        assert fut.wait(1) is out and np.array_equal(out, rows)
    else:  # a part the request does not have, or N - 1 rows for N keys: the request fails
        with pytest.raises(ProtocolError):
            fut.wait(1)


def test_a_rows_frame_of_another_size_fails_the_request(pair):
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: CLUSTER)
    port = ep.reply_box()
    out = np.zeros((N, DIM), np.float32)
    rid, fut = _request(tracker, out)
    b.reply_box().expect(rid, out, DIM, wire.dtype_code(np.float32), tracker.pending)
    frames = _reply(rid, np.ones((N, DIM), np.float32))
    frames[1] = np.ones(N * DIM + 7, np.float32)  # the header says N x DIM, the frame holds 7 values more
    a.send(1, frames, port=port)
    box = b.reply_box()
    got = None
    while got is None:
        with box.lock:
            got = box.recv(5.0)
    assert got[1] is MISFIT
    ep.deliver(got)
    with pytest.raises(ProtocolError, match="rows frame of another size"):
        fut.wait(1)


def test_a_box_wait_times_out_with_nothing(pair):
    _, b = pair
    box = b.reply_box()
    with box.lock:
        assert box.recv(0.05) is None
        assert box.recv(0) is None


def test_rows_header_is_what_a_reply_encodes():
    """`Endpoint.rows`' header (a pull served whole) is `reply`'s: reply_header, stamped, with the rows."""
    to = Header(Kind.PULL, cluster=3, sender=1, table=4, request_id=77, part=2, dim=8, origin=1, reply_to=5000)
    rows = np.ones((5, 8), np.float64)
    reply = Header(Kind.PULL_REPLY, cluster=3, sender=0, table=4, request_id=77, part=2, origin=1, epoch=9)
    assert wire.rows_header(3, 0, to, 5, 8, wire.dtype_code(np.float64), 9) == encode(reply, values=rows)[0]


def test_a_reply_to_a_request_no_longer_pending_does_not_land(pair):
    """A request that failed (expired) before its reply came: its rows do not touch `out` any more."""
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: CLUSTER)
    port = ep.reply_box()
    out = np.zeros((N, DIM), np.float32)
    rid, fut = _request(tracker, out)
    b.reply_box().expect(rid, out, DIM, wire.dtype_code(np.float32), tracker.pending)
    assert tracker.expire(float("inf"), 0.0, lambda *args: ProtocolError("expired")) and fut.done()
    a.send(1, _reply(rid, np.ones((N, DIM), np.float32)), port=port)
    box = b.reply_box()
    got = None
    while got is None:
        with box.lock:
            got = box.recv(5.0)
    assert got[1] is not LANDED and box.landed == 0
    ep.deliver(got)  # the tracker drops it: an unknown request
    assert not out.any()
    with pytest.raises(ProtocolError, match="expired"):
        fut.wait(1)
