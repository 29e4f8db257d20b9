"""A push and a pull in one message (flag FUSED, Table.exchange): the frames, the endpoint's gather and
release (which requests fuse, which leave apart, in order), and the one reply that completes both."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv.errors import ProtocolError, RemoteError
from pskv.net.future import Future, both
from pskv.net.wire import FUSED, Header, Kind, encode, unpack, unpack_header

pytestmark = pytest.mark.timeout(30)


def _roundtrip(header, **arrays):
    frames = encode(header, **arrays)
    h = unpack_header(bytes(frames[0]))
    return h, unpack(h, [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes) else f
                         for f in frames])


def test_fused_push_and_reply_frames_round_trip():
    h, p = _roundtrip(Header(Kind.PUSH, request_id=5, part=1, dim=2), keys=np.array([3, 1]),
                      values=np.ones((2, 2), np.float32), fused=np.array([9, 0, 7, 8, 3]))
    assert h.flags & FUSED and p.keys.tolist() == [3, 1] and p.fused.tolist() == [9, 0, 7, 8, 3]
    assert p.values.tolist() == [[1, 1], [1, 1]]
    h, p = _roundtrip(Header(Kind.PULL_REPLY, request_id=9), values=np.zeros((3, 2), np.float32),
                      fused=np.array([5, 1, 2]))
    assert h.flags & FUSED and h.n_keys == 3 and p.fused.tolist() == [5, 1, 2] and p.values.shape == (3, 2)
    h, p = _roundtrip(Header(Kind.PUSH, dim=2), keys=np.array([3]), values=np.ones((1, 2), np.float32))
    assert not h.flags & FUSED and p.fused is None


@pytest.mark.parametrize("kind, fused", [(Kind.PUSH, [9]), (Kind.PULL_REPLY, [5, 1]), (Kind.PULL_REPLY, [5, 1, 2, 3])])
def test_a_fused_frame_of_the_wrong_length_is_a_protocol_error(kind, fused):
    arrays = {"keys": np.array([1])} if kind == Kind.PUSH else {}
    with pytest.raises(ProtocolError, match="a fused frame of"):
        _roundtrip(Header(kind, dim=2), values=np.ones((1, 2), np.float32), fused=np.array(fused), **arrays)


def _pair(endpoint):
    """Two tracked requests, a push (3 keys) and a pull (2 keys; a reply's rows are its result): ids, Futures."""
    push = endpoint.tracker.new_request(3, desc="push")
    pull = endpoint.tracker.new_request(2, on_part=lambda sender, got: np.array(got[1].values), desc="pull")
    return push, pull


def test_release_fuses_a_push_and_the_pull_after_it_to_one_node():
    endpoint, transport = recording_endpoint(0)
    (prid, pfut), (qrid, qfut) = _pair(endpoint)
    endpoint.gather()
    endpoint.request(1, Kind.PUSH, 4, prid, part=0, dim=2, keys=np.array([10, 11, 12]),
                     values=np.ones((3, 2), np.float32))
    endpoint.request(2, Kind.PUSH, 4, prid, part=1, dim=2, keys=np.array([20]), values=np.ones((1, 2), np.float32))
    endpoint.request(1, Kind.PULL, 4, qrid, part=0, dim=2, keys=np.array([12, 13]), values=None)
    assert transport.sent == []  # gathered
    endpoint.release()
    assert endpoint.fused == 1 and len(transport.sent) == 2
    (d0, f0), (d1, f1) = transport.sent
    h0, h1 = unpack_header(bytes(f0[0])), unpack_header(bytes(f1[0]))
    assert (d0, h0.kind, h0.request_id, h0.part, h0.flags & FUSED, h0.n_keys) == (1, Kind.PUSH, prid, 0, FUSED, 3)
    assert unpack(h0, f0).fused.tolist() == [qrid, 0, 12, 13]
    assert (d1, h1.kind, h1.flags & FUSED) == (2, Kind.PUSH, 0)


def test_release_keeps_apart_what_may_not_fuse():
    """Another message for the node between them, another table, a codec or a reply box: sent apart, in order."""
    endpoint, transport = recording_endpoint(0)
    (prid, _), (qrid, _) = _pair(endpoint)
    endpoint.gather()
    endpoint.request(1, Kind.PUSH, 4, prid, part=0, dim=2, keys=np.array([1]), values=np.ones((1, 2), np.float32))
    endpoint.request(1, Kind.SET, 4, prid, part=1, dim=2, keys=np.array([2]), values=np.ones((1, 2), np.float32))
    endpoint.request(1, Kind.PULL, 4, qrid, part=0, dim=2, keys=np.array([1]), values=None)
    endpoint.request(3, Kind.PUSH, 4, prid, part=2, dim=2, keys=np.array([1]), values=np.ones((1, 2), np.float32))
    endpoint.request(3, Kind.PULL, 5, qrid, part=1, dim=2, keys=np.array([1]), values=None)
    endpoint.request(2, Kind.PUSH, 4, prid, part=3, dim=2, keys=np.array([1]), values=np.ones((1, 2), np.float32))
    endpoint.request(2, Kind.PULL, 4, qrid, part=2, dim=2, reply_to=5555, keys=np.array([1]), values=None)
    endpoint.release()
    kinds = [(d, unpack_header(bytes(f[0])).kind) for d, f in transport.sent]
    assert kinds == [(1, Kind.PUSH), (1, Kind.SET), (1, Kind.PULL), (3, Kind.PUSH), (3, Kind.PULL), (2, Kind.PUSH),
                     (2, Kind.PULL)]
    assert endpoint.fused == 0 and not any(unpack_header(bytes(f[0])).flags & FUSED for _, f in transport.sent)
    endpoint.request(1, Kind.PUSH, 4, prid, part=4, dim=2, keys=np.array([1]), values=np.ones((1, 2), np.float32))
    assert len(transport.sent) == 8  # not gathering any more: sent at once


def test_one_fused_reply_completes_the_push_and_the_pull():
    endpoint, _ = recording_endpoint(0)
    (prid, pfut), (qrid, qfut) = _pair(endpoint)
    reply = Header(Kind.PULL_REPLY, cluster=7, sender=1, origin=0, table=4, request_id=qrid, part=0)
    frames = encode(reply, values=np.full((2, 2), 6, np.float32), fused=np.array([prid, 0, 3]))
    h = unpack_header(bytes(frames[0]))
    endpoint.on_reply(h, [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes) else f
                          for f in frames])
    assert pfut.done() and pfut.wait(1) is None
    assert qfut.done() and qfut.wait(1).tolist() == [[6, 6], [6, 6]]
    assert len(endpoint.tracker) == 0


def test_both_is_the_second_result_once_both_are_done_and_fails_at_the_first_error():
    first, second = Future("push"), Future("pull")
    joined = both(first, second)
    second.resolve("rows")
    assert not joined.done()
    first.resolve(None)
    assert joined.wait(1) == "rows"
    done = Future.completed(None, "push")
    assert both(done, second) is second
    first, second = Future("push"), Future("pull")
    joined = both(first, second)
    first.resolve(None, RemoteError("node 1 rejected the request: no", 1))
    with pytest.raises(RemoteError, match="rejected"):  # at once: the pull may never be answered
        joined.wait(1)
