"""server/applied.py and server/chain.py: the at-most-once record, and the tracker's side of resends (net/requests.py)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.net.requests import Credit, RequestTracker
from pskv.net.wire import Kind, split, unpack, unpack_header
from pskv.placement.chains import Chains
from pskv.placement.ranges import KeyRanges
from pskv.server.applied import Applied
from pskv.server.batches import Batches
from pskv.server.backups import Backups
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)


def test_applied_records_prunes_and_travels():
    applied = Applied()
    for write in [(0, 5, 0), (0, 5, 1), (0, 9, 0), (2, 3, 0)]:
        applied.add(write)
    assert (0, 5, 1) in applied and (0, 5, 2) not in applied and (1, 5, 0) not in applied
    copy = Applied.of(applied.array())  # what a SNAPSHOT carries
    assert len(copy) == 4 and (2, 3, 0) in copy
    copy.prune({0: 9})  # origin 0 has nothing pending below request 9: 5.x are forgotten, known complete
    assert len(copy) == 2 and (0, 9, 0) in copy and (2, 3, 0) in copy and (0, 5, 0) in copy
    assert Applied().array().shape == (0, 3)


def test_applied_floor_keeps_late_copies_out():
    """After pruning, a late copy of a write below the origin's low watermark (a resend still on
    its way when the first copy completed) is still a duplicate, here and on a node filled by a
    snapshot of this record."""
    applied = Applied()
    applied.add((0, 5, 0))
    applied.prune({0: 9, 1: 3})
    assert (0, 5, 0) in applied and (0, 8, 4) in applied and (0, 9, 0) not in applied and (1, 2, 0) in applied
    applied.prune({0: 7})  # a watermark never goes back
    assert (0, 8, 0) in applied
    copy = Applied.of(applied.array())
    assert (0, 5, 0) in copy and (1, 2, 7) in copy and (1, 3, 0) not in copy and len(copy) == 0


def test_tracker_counts_credit_not_reply_size():
    """A reply answered twice (after a resend) is credited once: `on_part` says how many keys are new."""
    tracker = RequestTracker()
    answered = np.zeros(4, bool)

    def on_part(sender, positions):
        new = ~answered[positions]
        answered[positions] = True
        return Credit(int(new.sum()))

    rid, fut = tracker.new_request(4, on_part=on_part)
    tracker.on_reply(rid, 2, 1, np.array([0, 1]))
    tracker.on_reply(rid, 2, 1, np.array([0, 1]))  # the same keys again: nothing new
    assert not fut.done()
    tracker.on_reply(rid, 3, 2, np.array([1, 2, 3]))
    assert fut.done() and fut.wait() is None


def test_low_watermark_and_retry_all():
    tracker = RequestTracker()
    sent = []
    first, _ = tracker.new_request(1, retry=lambda: sent.append("first"))
    second, _ = tracker.new_request(1)
    assert tracker.low_watermark() == first
    tracker.on_reply(first, 1)
    assert tracker.low_watermark() == second
    assert tracker.retry_all() == 0 and sent == []  # the one with a retry is complete
    third, fut = tracker.new_request(1, retry=lambda: 1 / 0)
    assert tracker.retry_all() == 1
    with pytest.raises(ZeroDivisionError):  # a resend that fails fails its request, not the caller
        fut.wait(1)
    tracker.on_reply(second, 1)
    assert tracker.low_watermark() == third + 1


def test_readers_grant_first_come_and_forget_the_dead_and_heads():
    """server.readers: the head grants a key to one reader (again to the same one), declines others;
    a membership change forgets readers that died and nodes that now head the key's range."""
    from pskv.server.readers import Readers

    readers = Readers()
    readers.add_table(0, 10)
    assert readers.grant(0, np.array([1, 2, 3]), 4).all()
    assert readers.grant(0, np.array([2, 3, 5]), 6).tolist() == [False, False, True]
    assert readers.grant(0, np.array([1]), 4).all()  # asking again: still granted
    assert readers.of(0, np.arange(7)).tolist() == [-1, 4, 4, 4, -1, 6, -1]
    readers.set(0, np.array([8]), 2)
    heads = {0: np.zeros(10, np.int64) + 2}  # node 2 heads every key now
    readers.drop([2, 4], lambda table, keys: heads[table][keys])  # node 6 died
    assert readers.of(0, np.arange(10)).tolist() == [-1, 4, 4, 4, -1, -1, -1, -1, -1, -1]
    assert readers.count() == 3


def test_snapshot_carries_readers_on_the_wire():
    from pskv.net.wire import READERS, Header, Kind, encode, unpack, unpack_header

    h = Header(Kind.SNAPSHOT, table=1, part=2, origin=0)
    frames = encode(h, keys=np.arange(3), values=np.ones((3, 2), np.float32), applied=np.zeros((1, 3), np.int64),
                    readers=np.array([-1, 4, 5]))
    header = unpack_header(bytes(frames[0]))
    assert header.flags & READERS
    p = unpack(header, frames)
    assert p.readers.tolist() == [-1, 4, 5] and p.applied.shape == (1, 3) and p.values.shape == (3, 2)


def _backup_of_range_0(updater):
    """Node 1 of 3 with backups=1: the tail of range 0 (head 0); a table of 30 rows, dim 2."""
    endpoint, transport = recording_endpoint(1)
    chains = Chains(3, 1, {0, 1, 2})
    backups = Backups(endpoint, lambda: chains, lambda: 1, lambda *a: None, lambda epoch: None)
    spec = TableSpec("w", 30, 2, np.float32, updaters.get(updater), Zeros(), table_id=4)
    ranges = KeyRanges(30, 3)
    main = Shard(spec, *ranges.manager_range(1), 1)
    backups.failover.add_table(spec, main, ranges)
    return backups, transport, main


def _batch(writes):
    """A CHAIN BATCH from node 0 as node 1 receives it: [(origin, rid, part, keys, positions, values)]."""
    endpoint, transport = recording_endpoint(0)
    batches = Batches(endpoint)
    for origin, rid, part, keys, pos, values in writes:
        batches.chain(1, 4, origin, rid, part, 0, np.array(keys), pos, np.asarray(values, np.float32))
    batches.flush()
    (_, frames), = transport.sent
    header = unpack_header(bytes(frames[0]))
    return header, unpack(header, [bytes(f) if not isinstance(f, np.ndarray) else f for f in frames])


@pytest.mark.parametrize("updater,at_once", [("add", True), ("sgd", True), ("adagrad", False)])
def test_a_batch_of_pushes_applies_at_once_as_one_by_one(updater, at_once):
    """A backup applies a CHAIN batch of pushes in one call where the updater allows it
    (`in_order`): its rows equal those of the same writes applied one by one, bit for bit, and
    every write is acknowledged to its origin (node 2's batched ACK, node 1's own answered here)."""
    rng = np.random.default_rng(5)
    writes = [(2, 10 + i, i % 2, rng.integers(0, 10, 4), None, rng.normal(size=(4, 2))) for i in range(6)]
    writes.append((1, 40, 0, [3, 3, 9], np.array([0, 2, 5]), rng.normal(size=(3, 2))))  # ours, some positions
    batched, transport, main = _backup_of_range_0(updater)
    header, p = _batch(writes)
    assert batched.chain.on_chain_batch(header, p, main) is at_once
    if not at_once:
        for one, part in split(header, p):
            batched.chain.on_chain(one, part, main)
    single, _, main2 = _backup_of_range_0(updater)
    for one, part in split(*_batch(writes)):
        single.chain.on_chain(one, part, main2)
    (a,), (b,) = batched.copies.copies(4), single.copies.copies(4)
    assert a.data.tobytes() == b.data.tobytes() and a.data.any()
    batched.copies.batches.flush()
    acked = [(rank, unpack_header(bytes(frames[0])).kind) for rank, frames in transport.sent]
    assert acked == [(2, Kind.ACK)]
    header, p = _batch(writes[:2])  # both seen before: not applied again, one by one (acked again)
    assert batched.chain.on_chain_batch(header, p, main) is False
    for one, part in split(header, p):
        batched.chain.on_chain(one, part, main)
    assert a.data.tobytes() == b.data.tobytes() and batched.copies.duplicates == 2


def test_a_stall_report_names_the_unanswered_keys():
    """`explain` (client.backed's: which keys, their ranges and heads) joins the request's stall line."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(3, explain=lambda: "unanswered keys [7] of key ranges [2], headed by nodes [0]")
    tracker.on_reply(rid, 2, 1)
    (line,) = tracker.expire(float("inf"), 1.0, lambda *a: RuntimeError("stalled"))
    assert "1/3 unanswered" in line and line.endswith("unanswered keys [7] of key ranges [2], headed by nodes [0]")
    with pytest.raises(RuntimeError):
        fut.wait(1)
