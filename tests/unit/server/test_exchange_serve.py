"""server.exchange: a fused PUSH (a push, then a pull) served over a recording endpoint, no sockets or threads.
One reply when this node holds every key; else each half goes on as if it had come alone, the push first."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.net.wire import FUSED, POSITIONS, Header, Kind, dtype_code, encode, unpack, unpack_header
from pskv.placement.ranges import KeyRanges
from pskv.server.serve import Server
from pskv.store.shard import INCOMING, Store
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)
DIM = 2
PUSH_ID, PULL_ID = 5, 6


def _server():
    """Node 1 of 3 (managers: [0, 10), [10, 20), [20, 30)); returns (server, shard, sent)."""
    store = Store()
    spec = TableSpec("t", 30, DIM, np.dtype(np.float32), updaters.Add(), Zeros(), table_id=1)
    shard = store.add(spec, 10, 20, rank=1)
    endpoint, transport = recording_endpoint(1)
    return Server(store, endpoint, endpoint.tracker, lambda table: KeyRanges(30, 3)), shard, transport.sent


def _fused(server, push, values, pulls, origin=2):
    """Node `origin` pushes `values` to `push` and pulls `pulls`, in one message."""
    h = Header(Kind.PUSH, cluster=7, sender=origin, origin=origin, table=1, request_id=PUSH_ID, dim=DIM)
    frames = encode(h, keys=np.asarray(push, np.int64), values=np.asarray(values, np.float32),
                    fused=np.array([PULL_ID, 3, *pulls], np.int64))
    server.handle(unpack_header(frames[0]), [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes)
                                             else f for f in frames])


def _sent(sent):
    """(rank, header, payload or None for an ERROR) of each message sent."""
    got = []
    for rank, frames in sent:
        h = unpack_header(frames[0])
        got.append((rank, h, None if h.kind == Kind.ERROR else unpack(h, frames)))
    return got


def test_every_key_here_one_reply_with_the_rows_after_the_push():
    server, shard, sent = _server()
    _fused(server, [10, 11, 11], np.ones((3, DIM)), [11, 12, 10])
    [(rank, h, p)] = _sent(sent)
    assert (rank, h.kind, h.request_id, h.part, h.n_keys, h.flags & FUSED) == (2, Kind.PULL_REPLY, PULL_ID, 3, 3, FUSED)
    assert p.fused.tolist() == [PUSH_ID, 0, 3] and p.positions is None
    np.testing.assert_array_equal(p.values[:, 0], [2, 0, 1])  # key 11 pushed twice: read-my-writes


def test_keys_elsewhere_go_on_push_first_and_keys_on_their_way_wait():
    """Push keys 10 (here), 25 (node 2's) and 3 (incoming); pull keys 25, 12, 3, 5 (node 0's): ACK and
    PULL_REPLY for what is here, the push's key 25 forwarded before the pull's, key 3 applied when it lands."""
    server, shard, sent = _server()
    shard.slot[3] = INCOMING
    _fused(server, [10, 25, 3], [[1, 1], [2, 2], [4, 4]], [25, 12, 3, 5])
    got = _sent(sent)
    assert [(rank, h.kind, h.request_id, h.flags & FUSED) for rank, h, _ in got] == [
        (2, Kind.ACK, PUSH_ID, 0), (2, Kind.PULL_REPLY, PULL_ID, 0), (2, Kind.PUSH, PUSH_ID, 0),
        (0, Kind.PULL, PULL_ID, 0), (2, Kind.PULL, PULL_ID, 0)]
    (_, ack, a), (_, reply, r), (_, fpush, fp), (_, fpull0, fq0), (_, fpull, fq) = got
    assert ack.n_keys == 1 and a.positions.tolist() == [0]
    assert reply.n_keys == 1 and reply.part == 3 and r.positions.tolist() == [1] and r.values[:, 0].tolist() == [0]
    assert fp.keys.tolist() == [25] and fp.positions.tolist() == [1] and fp.values.tolist() == [[2, 2]]
    assert fq.keys.tolist() == [25] and fq.positions.tolist() == [0] and fpull.part == 3
    assert fq0.keys.tolist() == [5] and fq0.positions.tolist() == [3]
    assert all(h.flags & POSITIONS and h.flags >> 8 == 1 for _, h, _ in got[2:])  # one hop each
    sent.clear()
    h = Header(Kind.TRANSFER, cluster=7, sender=0, origin=1, table=1, request_id=9, n_keys=1, dim=DIM,
               dtype=dtype_code(np.float32), key_dtype=dtype_code(np.int64))
    server.handle(h, [h.pack(), np.array([3], np.int64).tobytes(), np.full((1, DIM), 10, np.float32).tobytes()])
    got = _sent(sent)
    assert [(rank, h.kind, h.request_id) for rank, h, _ in got] == [(2, Kind.ACK, PUSH_ID), (2, Kind.PULL_REPLY, PULL_ID)]
    assert got[0][2].positions.tolist() == [2] and got[1][2].positions.tolist() == [2]
    assert got[1][2].values[:, 0].tolist() == [14]  # landed as 10, then the waiting push of 4, then the pull


def test_a_whole_push_with_a_pull_partly_here_still_acks_in_the_reply():
    server, shard, sent = _server()
    _fused(server, [10, 11], np.ones((2, DIM)), [11, 5])
    got = _sent(sent)
    assert [(rank, h.kind, h.flags & FUSED) for rank, h, _ in got] == [(2, Kind.PULL_REPLY, FUSED), (0, Kind.PULL, 0)]
    assert got[0][2].fused.tolist() == [PUSH_ID, 0, 2] and got[0][2].positions.tolist() == [0]


@pytest.mark.parametrize("pulls, why", [([10, 30], "pull keys 10..30 outside table 't'"), ([-1], "pull keys -1..-1")])
def test_pull_keys_out_of_range_are_an_error_of_both_and_nothing_is_applied(pulls, why):
    server, shard, sent = _server()
    _fused(server, [10], np.ones((1, DIM)), pulls)
    got = _sent(sent)
    assert [(rank, h.kind, h.request_id, h.part) for rank, h, _ in got] == [(2, Kind.ERROR, PUSH_ID, 0),
                                                                           (2, Kind.ERROR, PULL_ID, 3)]
    assert all(why in bytes(frames[1]).decode() for _, frames in sent)
    assert shard.data[shard.slot[10], 0] == 0


def test_a_node_with_backups_refuses_a_fused_push():
    server, shard, sent = _server()
    server.backups = object()  # (its backups part: any)
    _fused(server, [10], np.ones((1, DIM)), [11])
    assert [(rank, h.kind, h.request_id) for rank, h, _ in _sent(sent)] == [(2, Kind.ERROR, PUSH_ID),
                                                                            (2, Kind.ERROR, PULL_ID)]
    assert "keeps backups" in bytes(sent[0][1][1]).decode()
