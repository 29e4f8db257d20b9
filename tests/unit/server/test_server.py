"""Server relocation paths over a recording endpoint: no sockets, no threads."""

from __future__ import annotations

import numpy as np

from helpers import recording_endpoint
from pskv import updaters
from pskv.placement.ranges import KeyRanges
from pskv.net.wire import POSITIONS, Header, Kind, dtype_code, unpack, unpack_header
from pskv.server.serve import Server
from pskv.store.shard import INCOMING, Store
from pskv.store.spec import Zeros, TableSpec

DIM = 2
_KEYS = dtype_code(np.int64)
_F32 = dtype_code(np.float32)


def _server():
    """Node 1 of 3 (managers: [0, 10), [10, 20), [20, 30)); returns (server, shard, sent)."""
    store = Store()
    spec = TableSpec("t", 30, DIM, np.dtype(np.float32), updaters.Add(), Zeros(), table_id=1)
    shard = store.add(spec, 10, 20, rank=1)
    endpoint, transport = recording_endpoint(1)
    server = Server(store, endpoint, endpoint.tracker, lambda table: KeyRanges(30, 3))
    server.transport = transport  # for tests that make sends fail
    return server, shard, transport.sent


def _msg(kind, keys, *, origin, values=None, positions=None, state=False):
    keys = np.asarray(keys, np.int64)
    h = Header(kind, cluster=7, sender=origin, origin=origin, table=1, request_id=5, n_keys=len(keys),
               key_dtype=_KEYS)
    frames = [None, keys]
    if positions is not None:
        h.flags |= POSITIONS
        frames.append(np.asarray(positions, np.int64))
    if values is not None or kind == Kind.PULL:
        h.dim = DIM
    if values is not None:
        h.dtype = _F32
        frames.append(np.asarray(values, np.float32))
    frames[0] = h.pack()
    return h, [bytes(memoryview(np.ascontiguousarray(f))) if not isinstance(f, bytes) else f for f in frames]


def test_transfer_replays_waiting_ops_batched_by_message():
    """Ops that waited for incoming keys apply in arrival order per key, one TRANSFER / reply per message."""
    server, shard, sent = _server()
    keys = np.arange(0, 6, dtype=np.int64)  # managed by node 0, on their way here
    shard.slot[keys] = INCOMING
    server.handle(*_msg(Kind.PUSH, keys[:4], origin=2, values=np.ones((4, DIM))))  # waits
    server.handle(*_msg(Kind.PULL, keys[::-1], origin=2))  # waits: positions 5..0
    server.handle(*_msg(Kind.HANDOVER, keys[:3], origin=0))  # keys 0..2 move on to node 0 after the push
    assert sent == []
    h = Header(Kind.TRANSFER, cluster=7, sender=2, origin=1, table=1, request_id=9, n_keys=6, dim=DIM, dtype=_F32,
               key_dtype=_KEYS)
    server.handle(h, [h.pack(), keys.tobytes(), np.full((6, DIM), 10, np.float32).tobytes()])
    kinds = [(rank, unpack_header(frames[0]).kind) for rank, frames in sent]
    assert kinds == [(2, Kind.ACK), (2, Kind.PULL_REPLY), (0, Kind.TRANSFER)]
    ack, reply, transfer = (unpack_header(f[0]) for _, f in sent)
    assert ack.n_keys == 4 and reply.n_keys == 6
    p = unpack(reply, sent[1][1])
    got = np.empty((6, DIM), np.float32)
    got[p.positions] = p.values
    np.testing.assert_array_equal(got[:, 0], [10, 10, 11, 11, 11, 11])  # key 5 - i: pushed ones saw +1
    t = unpack(transfer, sent[2][1])
    np.testing.assert_array_equal(t.keys, [0, 1, 2])
    np.testing.assert_array_equal(t.values[:, 0], [11, 11, 11])
    assert (shard.slot[:3] == -1).all() and (shard.slot[3:6] >= 0).all()
    assert server.relocation._deferred == {}


def test_transfer_replays_duplicate_keys_of_a_waiting_push():
    """A waiting push with a key twice adds both rows once the key lands."""
    server, shard, sent = _server()
    shard.slot[[3, 4]] = INCOMING
    server.handle(*_msg(Kind.PUSH, [3, 4, 3], origin=2, values=[[1, 1], [2, 2], [4, 4]]))
    h = Header(Kind.TRANSFER, cluster=7, sender=0, origin=1, table=1, request_id=9, n_keys=2, dim=DIM, dtype=_F32,
               key_dtype=_KEYS)
    server.handle(h, [h.pack(), np.array([3, 4], np.int64).tobytes(), np.zeros((2, DIM), np.float32).tobytes()])
    assert sum(unpack_header(f[0]).n_keys for _, f in sent) == 3
    np.testing.assert_array_equal(shard.data[shard.slot[[3, 4]], 0], [5, 2])


def test_unexpected_server_exception_is_answered_with_error():
    """Any exception while serving (not only ProtocolError) answers the origin with ERROR."""
    server, shard, sent = _server()

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    shard.pull = broken
    server.handle(*_msg(Kind.PULL, [11, 12], origin=2))
    assert [(rank, unpack_header(frames[0]).kind) for rank, frames in sent] == [(2, Kind.ERROR)]
    assert "RuntimeError('disk on fire')" in bytes(sent[0][1][1]).decode()


def test_failed_replay_does_not_drop_later_deferred_operations():
    """A deferred op whose replay fails (its reply cannot be sent) gets an ERROR attempt; the ops after it
    still run (before, every later deferred op was silently dropped)."""
    store_server, shard, sent = _server()
    keys = np.array([3, 4], np.int64)
    shard.slot[keys] = -2  # incoming
    store_server.handle(*_msg(Kind.PUSH, keys, origin=2, values=np.ones((2, DIM))))  # its ACK will fail
    store_server.handle(*_msg(Kind.PULL, keys, origin=0))  # waits after it
    store_server.transport.fail_to.add(2)
    h = Header(Kind.TRANSFER, cluster=7, sender=0, origin=1, table=1, request_id=9, n_keys=2, dim=DIM, dtype=_F32,
               key_dtype=_KEYS)
    store_server.handle(h, [h.pack(), keys.tobytes(), np.zeros((2, DIM), np.float32).tobytes()])
    assert [(rank, unpack_header(frames[0]).kind) for rank, frames in sent] == [(0, Kind.PULL_REPLY)]
    assert store_server.relocation._deferred == {} and store_server.errors == 1


def _localize(server, keys, *, origin, lease_ms):
    h, frames = _msg(Kind.LOCALIZE, keys, origin=origin)
    h.part = lease_ms  # the lease the requester asks for (Table.localize sends Relocate.lease)
    server.handle(h, frames)


def test_manager_declines_a_localize_of_keys_under_another_nodes_lease():
    """Keys moved to node 2 under a lease stay there when node 0 asks within it (a DECLINE to node 0
    says so); keys without a lease move; lease 0 never holds a key."""
    server, shard, sent = _server()
    _localize(server, [11, 12], origin=2, lease_ms=60_000)  # from the manager's own store: moves
    assert [(r, unpack_header(f[0]).kind) for r, f in sent] == [(2, Kind.TRANSFER)]
    sent.clear()
    _localize(server, [11, 12, 13], origin=0, lease_ms=60_000)
    kinds = [(r, unpack_header(f[0])) for r, f in sent]
    assert [(r, h.kind, h.origin) for r, h in kinds] == [(0, Kind.DECLINE, 0), (0, Kind.TRANSFER, 0)]
    assert kinds[0][1].part == 2  # the DECLINE names where the keys stay ...
    assert 30_000 <= kinds[0][1].dim <= 60_000  # ... and for how long (ms left of the 60 s lease)
    np.testing.assert_array_equal(unpack(kinds[0][1], sent[0][1]).keys, [11, 12])  # declined: they stay at node 2
    np.testing.assert_array_equal(unpack(kinds[1][1], sent[1][1]).keys, [13])  # no lease on it: moved
    np.testing.assert_array_equal(shard.owner[[11, 12, 13]], [2, 2, 0])
    assert server.relocation.declined == 2
    sent.clear()
    _localize(server, [14], origin=2, lease_ms=0)  # lease 0: the next localize moves it on at once
    _localize(server, [14], origin=0, lease_ms=0)
    assert [(r, unpack_header(f[0]).kind) for r, f in sent] == [(2, Kind.TRANSFER), (2, Kind.HANDOVER)]
    assert shard.owner[14] == 0


def test_a_keys_lease_doubles_with_each_move():
    """Contention backoff: the n-th move of a key holds it for 2**(n-1) leases (keys that nodes keep
    taking from each other soon stay put); a key that never moved has no lease."""
    import time
    server, shard, sent = _server()
    table, idx = 1, 15  # key 15 of the manager's range [10, 20)
    for move, origin in enumerate([2, 0, 2, 0], start=1):
        before = time.monotonic()
        _localize(server, [15], origin=origin, lease_ms=1000)
        after = time.monotonic()
        end = server.relocation._leases[table][idx]
        assert before + 2 ** (move - 1) <= end <= after + 2 ** (move - 1), (move, end - before)
        assert shard.owner[idx] == origin
        server.relocation._leases[table][idx] = -np.inf  # as if the lease ran out
    assert server.relocation._leases[table][16] == -np.inf  # key 16 never moved


def test_declined_localize_completes_and_forwards_what_waited():
    """At the requester: a decline makes the keys absent again, completes the localize and forwards the
    ops that waited for them to the keys' manager (exact: nothing applied here, nothing dropped)."""
    server, shard, sent = _server()
    keys = np.array([3, 4], np.int64)  # managed by node 0
    shard.mark_incoming(keys)
    rid, fut = server.relocation._tracker.new_request(2, desc="localize")
    assert shard.await_keys(keys, rid) == 0
    server.handle(*_msg(Kind.PUSH, keys, origin=2, values=np.ones((2, DIM))))  # waits for the keys here
    assert sent == [] and not fut.done()
    learned = []
    server.relocation._on_declined = lambda table, k, owner, s: learned.append((table, k.tolist(), owner, s))
    h, frames = _msg(Kind.DECLINE, keys, origin=1)  # from the manager: the keys stay where they are
    h.sender, h.part, h.dim = 0, 2, 7_500  # at node 2, for 7.5 s more
    server.handle(h, frames)
    assert learned == [(1, [3, 4], 2, 7.5)]
    assert (shard.slot[keys] == -1).all() and fut.done()
    assert [(r, unpack_header(f[0]).kind) for r, f in sent] == [(0, Kind.PUSH)]  # on to the manager
    assert server.relocation._deferred == {}


def test_a_whole_part_forwarded_travels_without_positions():
    """A write part forwarded whole (a chain's head moved: server.chain) leaves without positions,
    and decodes; with positions it carries them (and the hop count)."""
    server, _, sent = _server()
    header = Header(Kind.PUSH, cluster=7, sender=0, origin=0, table=1, request_id=5, part=2, dim=DIM)
    values = np.ones((2, DIM), np.float32)
    server.forward(2, header, np.array([21, 22]), None, values)
    server.forward(2, header, np.array([23]), np.array([4]), values[:1])
    (d1, f1), (d2, f2) = sent
    h1, h2 = unpack_header(bytes(f1[0])), unpack_header(bytes(f2[0]))
    p1, p2 = unpack(h1, f1), unpack(h2, f2)
    assert (d1, h1.part, h1.flags & POSITIONS, p1.positions, p1.keys.tolist()) == (2, 2, 0, None, [21, 22])
    assert (d2, h2.flags & POSITIONS, p2.positions.tolist(), h2.flags >> 8) == (2, POSITIONS, [4], 1)
