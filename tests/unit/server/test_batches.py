"""server/batches.py: a burst's CHAIN hops and ACKs leave as one message per link, and the
receiver gets back exactly the writes that went in (wire.split, Endpoint.on_reply)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv.errors import ProtocolError
from pskv.net.wire import BATCH, POSITIONS, ROWS, SET, Header, Kind, encode, split, unpack, unpack_header
from pskv.server.batches import Batches

pytestmark = pytest.mark.timeout(30)


def _sent(transport, i=0):
    rank, frames = transport.sent[i]
    return rank, unpack_header(bytes(frames[0])), [bytes(f) if not isinstance(f, np.ndarray) else f for f in frames]


def test_chain_batch_splits_into_the_writes_in_order():
    endpoint, transport = recording_endpoint(1)
    batches = Batches(endpoint)
    writes = [(0, 11, 0, 0, np.array([3, 4]), None, np.ones((2, 2), np.float32)),
              (2, 12, 1, SET, np.array([5]), np.array([7]), np.full((1, 2), 5, np.float32)),
              (0, 13, 2, ROWS, np.array([6, 7, 8]), np.array([0, 2, 4]), np.arange(6, dtype=np.float32).reshape(3, 2))]
    for w in writes:
        batches.chain(2, 4, *w)
    assert transport.sent == []  # held until the burst ends
    batches.flush()
    assert len(transport.sent) == 1 and (batches.messages, batches.writes) == (1, 3)
    rank, h, frames = _sent(transport)
    assert (rank, h.kind, h.table, h.flags & BATCH, h.n_keys) == (2, Kind.CHAIN, 4, BATCH, 6)
    got = list(split(h, unpack(h, frames)))
    assert len(got) == 3
    for (one, p), (origin, rid, part, flags, keys, pos, values) in zip(got, writes):
        assert (one.kind, one.table, one.origin, one.request_id, one.part, one.flags, one.n_keys) == \
            (Kind.CHAIN, 4, origin, rid, part, flags, len(keys))
        assert p.keys.tolist() == keys.tolist() and (p.values == values).all()
        assert (p.positions is None) if pos is None else p.positions.tolist() == pos.tolist()  # whole parts: none


def test_one_write_per_link_goes_plain():
    endpoint, transport = recording_endpoint(1)
    batches = Batches(endpoint)
    batches.chain(2, 4, 0, 11, 3, 0, np.array([3, 4]), None, np.ones((2, 2), np.float32))
    batches.chain(0, 4, 0, 12, 0, SET, np.array([9]), None, np.ones((1, 2), np.float32))  # another link
    batches.flush()
    assert len(transport.sent) == 2 and batches.messages == 0
    rank, h, frames = _sent(transport)
    assert (rank, h.kind, h.request_id, h.part, h.flags & BATCH, h.flags & POSITIONS) == (2, Kind.CHAIN, 11, 3, 0, 0)
    batches.flush()
    assert len(transport.sent) == 2  # nothing left


def test_acks_of_one_origin_complete_each_request_once():
    """The tail's acks to node 0 in one burst are one message; node 0's endpoint credits each
    write's request with its keys, as separate acks would."""
    origin, _ = recording_endpoint(0)
    got = []
    first, f1 = origin.tracker.new_request(3, on_part=lambda s, payload: got.append(
        (s, payload[0].part, payload[1].positions)))
    second, f2 = origin.tracker.new_request(2)
    tail, transport = recording_endpoint(2)
    batches = Batches(tail)
    batches.ack(Header(Kind.CHAIN, table=4, request_id=first, part=0, origin=0), 3, None)
    batches.ack(Header(Kind.CHAIN, table=4, request_id=second, part=1, origin=0), 2, np.array([1, 3]))
    batches.ack(Header(Kind.CHAIN, table=4, request_id=99, part=0, origin=1), 1, None)  # another origin
    batches.flush()
    assert [rank for rank, _ in transport.sent] == [0, 1]
    _, frames = transport.sent[0]
    h = unpack_header(bytes(frames[0]))
    assert h.kind == Kind.ACK and h.flags & BATCH and h.sender == 2
    assert not f1.done() and not f2.done()
    origin.on_reply(h, frames)
    assert f1.done() and f2.done() and got == [(2, 0, None)]  # the whole part: no positions


def test_a_batch_whose_counts_do_not_add_up_is_refused():
    h = Header(Kind.CHAIN, table=1, dim=1)
    frames = encode(h, keys=np.arange(3), positions=np.arange(3), values=np.ones((3, 1), np.float32),
                    writes=np.array([[0, 1, 0, 2, 0]]))
    with pytest.raises(ProtocolError, match="name 2 keys, it carries 3"):
        list(split(unpack_header(frames[0]), unpack(unpack_header(frames[0]), frames)))
