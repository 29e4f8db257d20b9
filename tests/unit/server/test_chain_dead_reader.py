"""server/reader_copies.py and server/chain.py: a reader that died is never recorded again (the compose stress' lost write).

3 nodes, backups=1; node 1 is the tail of range 0 (chain [0, 1]) and stays so when node 2 dies.
Node 2 localized keys of range 0 just before it was SIGKILLed: its SUBSCRIBE, passed on by the head,
reaches node 1 after the membership change. Recorded, node 2 would be the keys' reader for good: the
tail passes every later write of them to node 2, nobody answers, and the writers' requests (and
clocks) wait forever, sent again to the same tail at each change (tests/stress/test_compose.py
seed 0 caught it in CI: 'push on table reloc: 1 of 9 key(s) unanswered')."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.net.wire import READER, Header, Kind, Payload, split, unpack, unpack_header
from pskv.placement.chains import Chains
from pskv.placement.ranges import KeyRanges
from pskv.server.backups import Backups
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, Zeros

pytestmark = pytest.mark.timeout(30)

TABLE = 4
KEYS = np.array([1, 2, 3], np.int64)  # of range 0 (rows 0..9)


def _tail_after_node_2_died():
    """(Backups of node 1 after the change to members {0, 1}, its recording transport, main shard)."""
    endpoint, transport = recording_endpoint(1)
    before = Chains(3, 1, {0, 1, 2})
    now = [before]
    backups = Backups(endpoint, lambda: now[0], lambda: 2, lambda *a: None, lambda epoch: None)
    spec = TableSpec("w", 30, 2, np.float32, updaters.get("add"), Zeros(), table_id=TABLE)
    ranges = KeyRanges(30, 3)
    main = Shard(spec, *ranges.manager_range(1), 1)
    backups.failover.add_table(spec, main, ranges)
    now[0] = Chains(3, 1, {0, 1})
    backups.failover.on_membership(before, lambda table: main, members={0, 1})
    assert now[0].chain(0) == (0, 1)
    transport.sent.clear()  # (the snapshots of the change)
    return backups, transport, main


def _sent(transport):
    """[(dest, header)] of every message recorded (each write of a BATCH on its own)."""
    got = []
    for rank, frames in transport.sent:
        frames = [bytes(f) if not isinstance(f, np.ndarray) else f for f in frames]
        header = unpack_header(frames[0])
        p = unpack(header, frames)
        got += [(rank, h) for h, _ in (split(header, p) if p.writes is not None else [(header, p)])]
    return got


def _write_from_head(backups, main, rid):
    """Node 0's push of KEYS (origin 0), as the head passes it to node 1, the tail."""
    header = Header(Kind.CHAIN, table=TABLE, request_id=rid, dim=2, origin=0, sender=0)
    backups.chain.on_chain(header, Payload(KEYS, None, np.ones((3, 2), np.float32), None), main)
    backups.copies.batches.flush()


def test_a_subscribe_of_a_node_that_died_is_not_recorded():
    backups, transport, main = _tail_after_node_2_died()
    hop = Header(Kind.SUBSCRIBE, table=TABLE, request_id=5, flags=READER, origin=2, sender=0)
    backups.reader_copies.subscribe(hop, Payload(KEYS, None, None, None), main)
    assert backups.copies.readers.of(TABLE, KEYS).tolist() == [-1, -1, -1] and not transport.sent
    _write_from_head(backups, main, rid=9)
    sent = _sent(transport)
    assert [(dest, h.kind, h.request_id, h.n_keys) for dest, h in sent] == [(0, Kind.ACK, 9, 3)]
    (copy,) = [c for c in backups.copies.copies(TABLE) if c.start == 0]
    assert copy.read(KEYS)[0].tolist() == [[1, 1]] * 3


def test_a_snapshot_that_names_a_dead_reader_installs_none():
    """A SNAPSHOT its predecessor sent while node 2 still read the keys, arriving after the change."""
    backups, transport, main = _tail_after_node_2_died()
    h = Header(Kind.SNAPSHOT, table=TABLE, part=2, origin=0, sender=0)  # range 2: node 1 is its new tail
    keys = np.arange(20, 30, dtype=np.int64)
    backups.failover.on_snapshot(h, Payload(keys, None, np.full((10, 2), 7, np.float32), None,
                                 applied=np.zeros((0, 3), np.int64), readers=np.full(10, 2, np.int64)), main)
    assert (backups.copies.readers.of(TABLE, keys) == -1).all()
    assert not [dest for dest, _ in _sent(transport) if dest == 2]


def test_the_tail_answers_for_a_reader_that_died_and_forgets_it():
    """However a dead reader got into the map, the tail answers the writer instead of passing the
    write to it, and forgets it."""
    backups, transport, main = _tail_after_node_2_died()
    backups.copies.readers.set(TABLE, KEYS[:2], 2)
    _write_from_head(backups, main, rid=11)
    sent = _sent(transport)
    assert sorted((dest, h.kind, h.n_keys) for dest, h in sent) == [(0, Kind.ACK, 3)]
    assert backups.copies.readers.of(TABLE, KEYS).tolist() == [-1, -1, -1]
