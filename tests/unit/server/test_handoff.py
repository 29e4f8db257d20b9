"""server/handoff.py: a node leaving without backups gives its rows and ranges away, and forwards
whatever still reaches it for them (recording endpoints: no sockets, no threads)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.net.wire import Header, Kind, dtype_code, unpack, unpack_header
from pskv.placement.ranges import KeyRanges
from pskv.server import handoff
from pskv.server.serve import Server
from pskv.store.shard import INCOMING, Shard, Store
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)
DIM = 2
_KEYS = dtype_code(np.int64)


def _node(rank: int, start: int, stop: int, updater=None):
    """Node `rank` of 3 over a 30-key table (ranges [0, 10), [10, 20), [20, 30)): (server, shard, sent)."""
    store = Store()
    spec = TableSpec("t", 30, DIM, np.dtype(np.float32), updater or updaters.Adagrad(lr=0.1), Zeros(), table_id=1)
    shard = store.add(spec, start, stop, rank=rank)
    endpoint, transport = recording_endpoint(rank)
    server = Server(store, endpoint, endpoint.tracker, lambda table: KeyRanges(30, 3))
    return server, shard, transport.sent


def _deliver(server, rank_from, frames):
    """Hand frames sent by node `rank_from` to `server` as if they came over the wire."""
    header = unpack_header(bytes(frames[0]))
    header.sender = rank_from
    server.handle(header, [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes) else f
                           for f in [header.pack(), *frames[1:]]])


def test_give_hands_rows_state_and_the_range_over():
    """Node 2 leaves: range 2 goes to node 0 (OWNERS for the keys node 1 owns, then a HANDOFF with
    its own rows and Adagrad state); key 5 (of node 0's range, moved to node 2) goes home. The
    receiver owns and manages what it got, bit for bit; the leaver's map forwards to it."""
    leaver, lshard, _ = _node(2, 20, 30)
    lshard.push(np.arange(20, 30), np.arange(20, dtype=np.float32).reshape(10, 2))
    moved, rows, state = lshard.extract(np.array([23]))  # key 23 lives on node 1 now
    lshard.owner[23] = 1
    lshard.insert(np.array([5]), np.full((1, DIM), 7, np.float32), np.full((1, DIM), 3, np.float32))
    before = {k: lshard.read(np.array([k])) for k in (20, 29, 5)}
    messages = handoff.give(lshard, KeyRanges(30, 3), 2, [0, 1, 0])
    assert [(d, k.name, part, keys.tolist()) for d, k, part, keys, *_ in messages] == [
        (0, "OWNERS", 1, [23]), (0, "HANDOFF", 3, [20, 21, 22, 24, 25, 26, 27, 28, 29]), (0, "HANDOFF", 0, [5])]
    assert (lshard.slot < 0).all()  # it holds nothing any more
    assert (lshard.owner[20:30] == Shard.handed_to(0)).all() and lshard.owner[5] == Shard.handed_to(0)

    server0, shard0, sent0 = _node(0, 0, 10)
    shard0.extract(np.array([5]))
    shard0.owner[5] = 2  # its manager map: node 2 owns key 5
    endpoint, transport = recording_endpoint(2)
    handoff.send(endpoint, 1, 9, messages)
    for _, frames in transport.sent:
        _deliver(server0, 2, frames)
    assert [unpack_header(f[0]).kind for _, f in sent0] == [Kind.ACK] * 3
    assert sum(unpack_header(f[0]).n_keys for _, f in sent0) == sum(m[-1] for m in messages)
    assert shard0.owner[23] == 1 and (shard0.owner[[20, 29, 5]] == 0).all()
    for k, (row, st) in before.items():
        got = shard0.read(np.array([k]))
        np.testing.assert_array_equal(got[0], row)
        np.testing.assert_array_equal(got[1], st)


def test_a_leaver_forwards_requests_localizes_and_handovers_to_where_the_rows_went():
    leaver, shard, sent = _node(2, 20, 30)
    handoff.give(shard, KeyRanges(30, 3), 2, [0, 1, 0])
    h = Header(Kind.PUSH, cluster=7, sender=1, origin=1, table=1, request_id=4, n_keys=2, dim=DIM,
               dtype=dtype_code(np.float32), key_dtype=_KEYS)
    leaver.handle(h, [h.pack(), np.array([21, 22], np.int64).tobytes(), np.ones((2, DIM), np.float32).tobytes()])
    loc = Header(Kind.LOCALIZE, cluster=7, sender=1, origin=1, table=1, request_id=5, n_keys=1, key_dtype=_KEYS)
    leaver.handle(loc, [loc.pack(), np.array([25], np.int64).tobytes()])
    hand = Header(Kind.HANDOVER, cluster=7, sender=0, origin=1, table=1, request_id=6, n_keys=1, key_dtype=_KEYS)
    leaver.handle(hand, [hand.pack(), np.array([27], np.int64).tobytes()])
    got = [(rank, unpack_header(f[0]).kind, unpack_header(f[0]).origin, unpack(unpack_header(f[0]), f).keys.tolist())
           for rank, f in sent]
    assert got == [(0, Kind.PUSH, 1, [21, 22]), (0, Kind.LOCALIZE, 1, [25]), (0, Kind.HANDOVER, 1, [27])]


def test_a_handoff_wakes_what_waited_for_its_keys():
    """Node 0 had asked for key 21 (incoming, a push waiting for it) when node 2 handed range 2 over:
    the HANDOFF lands the row, the localize's waiters count it, the waiting push applies."""
    server0, shard0, sent0 = _node(0, 0, 10, updaters.Add())
    shard0.mark_incoming(np.array([21]))
    h = Header(Kind.PUSH, cluster=7, sender=1, origin=1, table=1, request_id=4, n_keys=1, dim=DIM,
               dtype=dtype_code(np.float32), key_dtype=_KEYS)
    server0.handle(h, [h.pack(), np.array([21], np.int64).tobytes(), np.ones((1, DIM), np.float32).tobytes()])
    assert sent0 == [] and shard0.slot[21] == INCOMING
    rid, fut = server0.relocation._tracker.new_request(1, desc="localize")
    assert shard0.await_keys(np.array([21]), rid) == 0
    leaver, lshard, _ = _node(2, 20, 30, updaters.Add())
    endpoint, transport = recording_endpoint(2)
    handoff.send(endpoint, 1, 9, handoff.give(lshard, KeyRanges(30, 3), 2, [0, 1, 0]))
    for _, frames in transport.sent:
        _deliver(server0, 2, frames)
    assert shard0.slot[21] >= 0
    np.testing.assert_array_equal(shard0.read(np.array([21]))[0], [[1, 1]])  # the waiting push applied
    assert (1, Kind.ACK) in [(r, unpack_header(f[0]).kind) for r, f in sent0]
    assert fut.done()  # the localize that waited for it completed
