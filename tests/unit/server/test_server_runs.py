"""server.serve runs (issue 31): a run of plain requests served in one shard operation answers
exactly as the same messages handled one by one, over a recording endpoint (no sockets)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.net.wire import POSITIONS, Header, Kind, dtype_code, unpack, unpack_header
from pskv.placement.ranges import KeyRanges
from pskv.server.serve import Server
from pskv.store.shard import Store
from pskv.store.spec import Constant, TableSpec

pytestmark = pytest.mark.timeout(60)
DIM = 2
_KEYS = dtype_code(np.int64)
_F32 = dtype_code(np.float32)


def _server(updater=None):
    """Node 1 of 3 (managers: [0, 10), [10, 20), [20, 30)), rows 10..19 start at 1.0."""
    store = Store()
    spec = TableSpec("t", 30, DIM, np.dtype(np.float32), updater or updaters.Add(), Constant(1.0), table_id=1)
    shard = store.add(spec, 10, 20, rank=1)
    endpoint, transport = recording_endpoint(1)
    server = Server(store, endpoint, endpoint.tracker, lambda table: KeyRanges(30, 3))
    return server, shard, transport.sent


def _msg(kind, keys, *, origin, rid, values=None, positions=None, dim=DIM, dtype=_F32):
    keys = np.asarray(keys, np.int64)
    h = Header(kind, cluster=7, sender=origin, origin=origin, table=1, request_id=rid, n_keys=len(keys),
               key_dtype=_KEYS, dim=dim)
    frames = [None, keys]
    if positions is not None:
        h.flags |= POSITIONS
        frames.append(np.asarray(positions, np.int64))
    if values is not None:
        h.dtype = dtype
        frames.append(np.asarray(values, np.float32))
    frames[0] = h.pack()
    return h, [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes) else f for f in frames]


def _sent(sent):
    """What was sent, comparable: (dest, kind, request id, part, n_keys, positions, values) per message."""
    out = []
    for rank, frames in sent:
        h = unpack_header(bytes(frames[0]))
        if h.kind == Kind.ERROR:
            out.append((rank, h.kind, h.request_id, bytes(frames[1])))
            continue
        p = unpack(h, [bytes(memoryview(np.ascontiguousarray(f))) for f in frames])
        out.append((rank, h.kind, h.request_id, h.part, h.n_keys,
                    None if p.keys is None else p.keys.tolist(),
                    None if p.positions is None else p.positions.tolist(),
                    None if p.values is None else p.values.tolist()))
    return out


def _both(messages, updater=None, prepare=lambda shard: None):
    """Handle `messages` as one run and one by one on two equal servers; returns both (server, shard, sent)."""
    a, b = _server(updater), _server(updater)
    prepare(a[1])
    prepare(b[1])
    a[0].handle_many([(h, list(f)) for h, f in messages])
    for h, f in messages:
        b[0].handle(h, list(f))
    return a, b


def _pushes(kind, n=6):
    rng = np.random.default_rng(5)
    msgs = []
    for i in range(n):
        keys = rng.integers(10, 20, 4)
        keys[-1] = keys[0]  # a duplicate in every message, and the same keys across messages
        msgs.append(_msg(kind, keys, origin=i % 3, rid=i + 1, values=rng.integers(-3, 4, (4, DIM))))
    return msgs


@pytest.mark.parametrize("kind", [Kind.PUSH, Kind.SET])
def test_a_run_of_writes_applies_exactly_as_one_by_one(kind):
    """Pushes (duplicates summed) and sets (the last one wins) of one run: rows and ACKs equal."""
    (ra, sa, sent_a), (rb, sb, sent_b) = _both(_pushes(kind))
    np.testing.assert_array_equal(sa.data, sb.data)
    assert _sent(sent_a) == _sent(sent_b) and len(sent_a) == 6
    assert ra.runs == 1 and rb.runs == 0 and ra.requests == rb.requests == 6


def test_a_run_of_pulls_answers_each_with_its_rows_positions_and_forwards():
    """Pulls with positions, with keys of other nodes (forwarded) and incoming keys (deferred) in one run."""
    msgs = [_msg(Kind.PULL, [11, 12, 11], origin=0, rid=1),
            _msg(Kind.PULL, [19, 3, 25, 14], origin=2, rid=2),  # 3 and 25: forwarded to their managers
            _msg(Kind.PULL, [15, 16], origin=2, rid=3, positions=[7, 2]),  # a forwarded part
            _msg(Kind.PULL, [17, 5], origin=0, rid=4)]  # 5 is on its way here: waits

    def prepare(shard):
        shard.data[:, 0] = np.arange(10)
        shard.mark_incoming(np.array([5]))

    (ra, sa, sent_a), (rb, sb, sent_b) = _both(msgs, prepare=prepare)
    assert _sent(sent_a) == _sent(sent_b)
    got = _sent(sent_a)
    assert [(g[0], g[1], g[2]) for g in got] == [(0, Kind.PULL_REPLY, 1), (2, Kind.PULL_REPLY, 2), (0, Kind.PULL, 2),
                                                 (2, Kind.PULL, 2), (2, Kind.PULL_REPLY, 3), (0, Kind.PULL_REPLY, 4)]
    assert got[0][7] == [[1, 1], [2, 1], [1, 1]] and got[1][6] == [0, 3] and got[4][6] == [7, 2]
    assert ra.runs == 1 and ra.relocation.waiting() == rb.relocation.waiting() == 1


def test_a_bad_message_in_a_run_gets_its_error_and_the_others_their_answers():
    """One message of the wrong width and one with keys outside the table: the run goes one by one."""
    good = _pushes(Kind.PUSH, 3)
    msgs = [good[0], _msg(Kind.PUSH, [11], origin=0, rid=90, values=np.ones((1, 3)), dim=3), good[1],
            _msg(Kind.PUSH, [11, 30], origin=0, rid=91, values=np.ones((2, DIM))), good[2]]
    (ra, sa, sent_a), (rb, sb, sent_b) = _both(msgs)
    np.testing.assert_array_equal(sa.data, sb.data)
    assert _sent(sent_a) == _sent(sent_b)
    assert [(g[1], g[2]) for g in _sent(sent_a)] == [(Kind.ACK, 1), (Kind.ERROR, 90), (Kind.ACK, 2), (Kind.ERROR, 91),
                                                      (Kind.ACK, 3)]
    assert ra.errors == 2


def test_a_run_takes_one_shard_operation():
    """Eight pulls, one Shard.pull; pushes under an updater that is not in_order go one by one."""
    server, shard, sent = _server()
    calls = []
    pull = shard.pull
    shard.pull = lambda keys, out, pos=None: calls.append(len(keys)) or pull(keys, out, pos)
    server.handle_many([_msg(Kind.PULL, [10 + i, 11 + i], origin=0, rid=i) for i in range(8)])
    assert calls == [16] and len(sent) == 8
    (ra, sa, sent_a), (rb, sb, sent_b) = _both(_pushes(Kind.PUSH), updater=updaters.Adagrad(lr=0.1))
    assert ra.runs == 0 and _sent(sent_a) == _sent(sent_b)
    np.testing.assert_array_equal(sa.data, sb.data)


def test_mixed_kinds_keep_their_order():
    """push, pull, push, pull of one sender: each pull sees exactly the pushes before it."""
    msgs = [_msg(Kind.PUSH, [12], origin=0, rid=1, values=[[1, 1]]), _msg(Kind.PULL, [12], origin=0, rid=2),
            _msg(Kind.PULL, [12], origin=0, rid=3), _msg(Kind.PUSH, [12], origin=0, rid=4, values=[[5, 5]]),
            _msg(Kind.PUSH, [12], origin=0, rid=5, values=[[1, 1]]), _msg(Kind.PULL, [12], origin=0, rid=6)]
    (ra, sa, sent_a), _ = _both(msgs)
    pulled = [g[7][0][0] for g in _sent(sent_a) if g[1] == Kind.PULL_REPLY]
    assert pulled == [2.0, 2.0, 8.0] and ra.runs == 2
