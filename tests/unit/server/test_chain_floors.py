"""server/applied.py and server/chain.py: what the low-watermark floors may decide (issue 30).

A floor is an origin's low watermark, which passes failed requests too; only the head decides by
it, every copy after it follows the head's verdict (flag AGAIN). Reader copies' records are pruned
by the same floors. Nodes are driven by hand here: 3 nodes, backups=1, range 0 on the chain [0, 1],
node 2 the origin of the writes (and a reader of some keys of range 0)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.errors import RemoteError
from pskv.net.requests import RequestTracker
from pskv.net.wire import READER, Header, Kind, Payload, split, unpack, unpack_header
from pskv.placement.chains import Chains
from pskv.placement.ranges import KeyRanges
from pskv.server.backups import Backups
from pskv.server.chain import AGAIN
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)

TABLE = 4
KEYS = np.array([1, 2, 3], np.int64)  # of range 0 (rows 0..9)


def _node(rank):
    """(Backups, recording transport, main shard) of node `rank` of 3, backups=1, table 'w' (30 x 2, add)."""
    endpoint, transport = recording_endpoint(rank)
    chains = Chains(3, 1, {0, 1, 2})
    backups = Backups(endpoint, lambda: chains, lambda: 1, lambda *a: None, lambda epoch: None)
    spec = TableSpec("w", 30, 2, np.float32, updaters.get("add"), Zeros(), table_id=TABLE)
    ranges = KeyRanges(30, 3)
    main = Shard(spec, *ranges.manager_range(rank), rank)
    backups.failover.add_table(spec, main, ranges)
    return backups, transport, main


def _received(transport, dest):
    """The messages recorded for `dest` (each write of a BATCH on its own), taken out of the record."""
    mine = [frames for rank, frames in transport.sent if rank == dest]
    transport.sent[:] = [(rank, frames) for rank, frames in transport.sent if rank != dest]
    got = []
    for frames in mine:
        frames = [bytes(f) if not isinstance(f, np.ndarray) else f for f in frames]
        header = unpack_header(frames[0])
        p = unpack(header, frames)
        got += list(split(header, p)) if p.writes is not None else [(header, p)]
    return got


def _failed_request(tracker):
    """A request of node 2 that failed (an ERROR from some node): its id, and the low watermark after it."""
    rid, fut = tracker.new_request(len(KEYS))
    tracker.on_reply(rid, 0, 1, error=RemoteError("node 1 rejected the request: test", 1))
    assert fut.done() and tracker.low_watermark() > rid  # the floor passes it: it is pending no more
    return rid, tracker.low_watermark()


def _head_writes(head, main0, rid, values):
    """Node 2's PUSH (part 0 of request `rid`, to KEYS) reaches the head, node 0, which ends its burst."""
    head.chain.write(Header(Kind.PUSH, table=TABLE, request_id=rid, dim=2, origin=2, sender=2),
               Payload(KEYS, None, values, None), KEYS, main0)
    head.copies.batches.flush()


def test_a_backup_applies_what_its_head_applied_though_a_floor_passed_it():
    """The origin's request failed (its floor passes the id) while the head's CHAIN was still on its
    way; the TICK with the floor reaches the backup first. The backup applies the write all the
    same: both copies hold it once (before: the floor made it a 'duplicate' on the backup only)."""
    head, t0, main0 = _node(0)
    tail, t1, main1 = _node(1)
    rid, low = _failed_request(RequestTracker())
    values = np.ones((3, 2), np.float32)
    _head_writes(head, main0, rid, values)
    tail.copies.prune({2: low})  # the TICK overtook the CHAIN
    (header, p), = _received(t0, 1)
    assert header.kind == Kind.CHAIN and not header.flags & AGAIN
    tail.chain.on_chain(header, p, main1)
    (copy,) = tail.copies.copies(TABLE)
    assert main0.read(KEYS)[0].tolist() == [[1, 1]] * 3
    assert copy.read(KEYS)[0].tolist() == [[1, 1]] * 3 and tail.copies.duplicates == 0
    tail.copies.batches.flush()
    (ack, _), = _received(t1, 2)  # the tail answers the writer, as always
    assert (ack.kind, ack.request_id, ack.n_keys) == (Kind.ACK, rid, 3)


@pytest.mark.parametrize("head_pruned", [True, False])
def test_a_write_again_is_applied_once_on_every_copy(head_pruned):
    """A resend of a write every copy applied (its floor passed on the backup; on the head too, or
    not yet): the head does not apply it and says so (AGAIN); the backup follows, not applying it
    either, and answers the writer."""
    head, t0, main0 = _node(0)
    tail, t1, main1 = _node(1)
    tracker = RequestTracker()
    rid, _ = tracker.new_request(len(KEYS))
    values = np.full((3, 2), 2, np.float32)
    _head_writes(head, main0, rid, values)
    for header, p in _received(t0, 1):
        tail.chain.on_chain(header, p, main1)
    tracker.on_reply(rid, 3, 1)  # the tail's ACK: complete, the floor passes it
    tail.copies.prune({2: tracker.low_watermark()})
    if head_pruned:
        head.copies.prune({2: tracker.low_watermark()})
    _head_writes(head, main0, rid, values)  # the resend, late
    (header, p), = _received(t0, 1)
    assert header.flags & AGAIN
    tail.chain.on_chain(header, p, main1)
    (copy,) = tail.copies.copies(TABLE)
    assert main0.read(KEYS)[0].tolist() == [[2, 2]] * 3 and copy.read(KEYS)[0].tolist() == [[2, 2]] * 3
    assert (head.copies.duplicates, tail.copies.duplicates) == (1, 1)


def _reader(tail, t1):
    """Node 2 reads KEYS: the tail's copy of them installed on node 2 (SNAPSHOT, flag READER)."""
    reader, t2, main2 = _node(2)
    tail.copies.readers.set(TABLE, KEYS, 2)
    reader.copies.readers.set(TABLE, KEYS, 2)
    main2.mark_incoming(KEYS)
    rows, state = tail.copies.copies(TABLE)[0].read(KEYS)
    h = Header(Kind.SNAPSHOT, table=TABLE, part=0, flags=READER, origin=2, sender=1)
    reader.failover.on_snapshot(h, Payload(KEYS, None, rows, state, applied=tail.copies.applied[(TABLE, 0)].array()), main2)
    assert main2.read(KEYS)[0].tolist() == rows.tolist()
    return reader, t2, main2


def _through_chain(head, t0, tail, t1, reader, t2, main0, main1, main2, rid, values, prune=None):
    """Node 2's write `rid` through head 0 and tail 1 to reader 2; `prune`: the floors that reach the
    reader before the tail's copy of the write."""
    _head_writes(head, main0, rid, values)
    for header, p in _received(t0, 1):
        tail.chain.on_chain(header, p, main1)
    if prune:
        reader.copies.prune(prune)
    for header, p in _received(t1, 2):
        assert header.flags & READER
        reader.chain.on_chain(header, p, main2)


def test_reader_records_are_pruned_by_the_floors():
    """Each write passed to a reader copy leaves an id in its record; the floors prune them, as the
    ranges' records (before: never, one id per write for the node's life)."""
    head, t0, main0 = _node(0)
    tail, t1, main1 = _node(1)
    reader, t2, main2 = _reader(tail, t1)
    tracker = RequestTracker()
    for _ in range(5):
        rid, _ = tracker.new_request(len(KEYS))
        _through_chain(head, t0, tail, t1, reader, t2, main0, main1, main2, rid, np.ones((3, 2), np.float32))
        tracker.on_reply(rid, 3, 2)
    assert main2.read(KEYS)[0].tolist() == [[5, 5]] * 3
    assert reader.copies.kept() == (0, 5)
    reader.copies.prune({2: tracker.low_watermark()})
    assert reader.copies.kept() == (0, 0)
    for backups in (head, tail):
        backups.copies.prune({2: tracker.low_watermark()})
        assert backups.copies.kept() == (0, 0)


def test_a_reader_applies_what_its_tail_applied_though_a_floor_passed_it():
    """As on a backup: the floor of a failed request reaches the reader before the tail's copy of
    its write, which the head and tail applied; the reader applies it too."""
    head, t0, main0 = _node(0)
    tail, t1, main1 = _node(1)
    reader, t2, main2 = _reader(tail, t1)
    rid, low = _failed_request(RequestTracker())
    _through_chain(head, t0, tail, t1, reader, t2, main0, main1, main2, rid, np.full((3, 2), 3, np.float32),
                   prune={2: low})
    assert main0.read(KEYS)[0].tolist() == tail.copies.copies(TABLE)[0].read(KEYS)[0].tolist() == [[3, 3]] * 3
    assert main2.read(KEYS)[0].tolist() == [[3, 3]] * 3


def test_a_late_reader_write_from_an_earlier_tail_is_decided_by_its_floor():
    """A write that an earlier tail passed, reaching the reader after the floor (the new tail's fresh
    copy has it): not applied again."""
    head, t0, main0 = _node(0)
    tail, t1, main1 = _node(1)
    reader, t2, main2 = _reader(tail, t1)
    tracker = RequestTracker()
    rid, _ = tracker.new_request(len(KEYS))
    _head_writes(head, main0, rid, np.ones((3, 2), np.float32))
    for header, p in _received(t0, 1):
        tail.chain.on_chain(header, p, main1)
    (late, p), = _received(t1, 2)
    late.sender = 0  # as if node 0 had been the tail then, and node 1 is now
    main2.overwrite(KEYS, np.ones((3, 2), np.float32), None)  # the new tail's fresh copy, with the write
    tracker.on_reply(rid, 3, 2)
    reader.copies.prune({2: tracker.low_watermark()})
    reader.chain.on_chain(late, p, main2)
    assert main2.read(KEYS)[0].tolist() == [[1, 1]] * 3
