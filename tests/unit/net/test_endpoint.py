"""net/endpoint.py: every header is built here (cluster, sender, origin, counts), and replies complete requests."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv.errors import ProtocolError, RemoteError
from pskv.net.wire import POSITIONS, Header, Kind, unpack, unpack_header

pytestmark = pytest.mark.timeout(30)


def _sent(transport, i=0):
    rank, frames = transport.sent[i]
    header = unpack_header(bytes(frames[0]))
    return rank, header, frames


def test_request_is_stamped_and_tracked():
    endpoint, transport = recording_endpoint(2, cluster=99)
    rid, fut = endpoint.tracker.new_request(3, desc="pull")
    endpoint.request(1, Kind.PULL, 4, rid, part=1, dim=8, keys=np.array([5, 6, 7], np.int32))
    rank, h, frames = _sent(transport)
    assert (rank, h.kind, h.cluster, h.sender, h.origin, h.table, h.request_id, h.part, h.n_keys, h.dim) == \
        (1, Kind.PULL, 99, 2, 2, 4, rid, 1, 3, 8)
    assert unpack(h, frames).keys.tolist() == [5, 6, 7] and frames[1].dtype == np.int64
    assert endpoint.tracker._pending[rid].ranks == {1} and not fut.done()


def test_reply_goes_to_the_origin_with_the_request_id_and_part():
    endpoint, transport = recording_endpoint(1)
    request = Header(Kind.PULL, cluster=7, sender=3, origin=0, table=2, request_id=41, part=5, dim=2)
    endpoint.reply(request, Kind.PULL_REPLY, positions=np.array([1, 0]), values=np.ones((2, 2), np.float32))
    rank, h, frames = _sent(transport)
    assert (rank, h.kind, h.sender, h.request_id, h.part, h.table, h.n_keys, h.flags & POSITIONS) == \
        (0, Kind.PULL_REPLY, 1, 41, 5, 2, 2, POSITIONS)
    endpoint.reply(request, Kind.ACK, n_keys=6)
    assert _sent(transport, 1)[1].n_keys == 6 and len(transport.sent[1][1]) == 1


def test_forward_keeps_origin_id_and_part():
    endpoint, transport = recording_endpoint(1)
    request = Header(Kind.PUSH, cluster=7, sender=0, origin=0, table=2, request_id=41, part=3, dim=2)
    endpoint.forward(2, request, POSITIONS | 1 << 8, keys=np.array([9]), positions=np.array([4]),
                     values=np.full((1, 2), 3, np.float32))
    rank, h, frames = _sent(transport)
    assert (rank, h.kind, h.sender, h.origin, h.request_id, h.part, h.flags >> 8) == (2, Kind.PUSH, 1, 0, 41, 3, 1)
    p = unpack(h, frames)
    assert p.keys.tolist() == [9] and p.positions.tolist() == [4] and p.values.tolist() == [[3, 3]]


def test_error_reaches_the_requester_as_remote_error():
    server, transport = recording_endpoint(1)
    client, _ = recording_endpoint(0)
    rid, fut = client.tracker.new_request(2, desc="push")
    server.error(Header(Kind.PUSH, origin=0, request_id=rid, table=1), "table 1 has dim 4")
    rank, h, frames = _sent(transport)
    assert rank == 0 and h.kind == Kind.ERROR
    client.on_reply(h, frames)
    with pytest.raises(RemoteError, match="node 1 rejected the request: table 1 has dim 4"):
        fut.wait(1)


def test_a_reply_that_does_not_unpack_fails_its_request():
    client, _ = recording_endpoint(0)
    rid, fut = client.tracker.new_request(2, desc="pull")
    h = Header(Kind.PULL_REPLY, sender=1, request_id=rid, n_keys=2, dim=2, dtype=1)
    client.on_reply(h, [h.pack(), b"short"])
    with pytest.raises(ProtocolError, match="frame of 5 bytes"):
        fut.wait(1)


def test_answer_names_the_node_it_answers():
    endpoint, transport = recording_endpoint(0)
    endpoint.answer(3, Kind.PULL_REPLY, 2, 77, values=np.zeros((1, 2), np.float32))
    rank, h, _ = _sent(transport)
    assert (rank, h.origin, h.request_id, h.table, h.sender) == (3, 3, 77, 2, 0)
