"""server/intents.py: the manager's verdicts, exactly (no cluster): a sole intender gets a move, a key
several intend or that another node used lately stays, ends free it, leases of moved keys go."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv import updaters
from pskv.errors import ProtocolError
from pskv.net.wire import Header, Kind, Payload, unpack, unpack_header
from pskv.server import intents
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, as_init

pytestmark = pytest.mark.timeout(30)


class Board:
    """An IntentBoard of node 0, managing keys [0, 50) of a 100-row table, and what it sent."""

    def __init__(self) -> None:
        spec = TableSpec("t", 100, 1, np.dtype(np.float32), updaters.get("add"), as_init(0.0), table_id=3)
        self.shard = Shard(spec, 0, 50, 0)
        self.endpoint, self.transport = recording_endpoint(0)
        self.released: list = []
        self.board = intents.IntentBoard(self.endpoint,
                                         lambda table, keys: self.released.append((table, keys.tolist())))
        self.rounds: dict[int, int] = {}
        self.grants: list[tuple[int, list[int]]] = []  # (node, keys) of each grant of copies sent

    def intent(self, origin: int, starts, ends=(), round_: int | None = None) -> list[int]:
        """The starts node `origin` is told to take (the ACK's positions, as keys); `round_`: the
        node's round number (default: its next)."""
        keys = np.array(list(starts) + list(ends), np.int64)
        if round_ is None:
            round_ = self.rounds[origin] = self.rounds.get(origin, 0) + 1
        header = Header(Kind.INTENT, table=3, request_id=9, part=len(starts), origin=origin, n_keys=len(keys),
                        dim=round_)
        before = len(self.transport.sent)
        self.board.handle(header, Payload(keys, None, None, None), self.shard)
        sent = self.transport.sent[before:]
        rank, frames = sent[0]  # the ACK first, then the grants
        reply = unpack_header(bytes(frames[0]))
        assert (rank, reply.kind, reply.request_id) == (origin, Kind.ACK, 9)
        for node, grant in sent[1:]:
            h = unpack_header(bytes(grant[0]))
            assert (h.kind, h.flags, h.origin) == (Kind.INTENT, intents.GRANT, 0), h
            self.grants.append((node, unpack(h, [bytes(f) for f in grant]).keys.tolist()))
        pos = unpack(reply, [bytes(f) if not isinstance(f, np.ndarray) else f for f in frames]).positions
        return [int(starts[i]) for i in pos]


def test_a_sole_intender_moves_and_a_shared_key_stays(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(intents.time, "monotonic", lambda: clock[0])
    b = Board()
    assert b.intent(1, [3, 4, 60]) == [3, 4]  # 60: managed elsewhere, no verdict here
    assert b.released == [(3, [3, 4])]
    assert b.intent(2, [4, 5]) == [5]  # 4: node 1 intends it too
    assert b.board.intending(3, [3, 4, 5, 6]).tolist() == [1, 2, 1, 0]
    clock[0] += 5
    assert b.intent(1, [], ends=[3, 4]) == []
    assert b.board.intending(3, [3, 4, 5]).tolist() == [0, 1, 1]
    assert b.intent(1, [3]) == [3]  # node 1 again, and alone: moves
    assert b.intent(2, [], ends=[4]) == []
    assert b.intent(1, [4]) == []  # node 2's intent of 4 ended just now: taking turns, stays
    clock[0] += intents.TURN + 0.1
    assert b.intent(1, [], ends=[4]) == []
    assert b.intent(1, [4]) == [4]  # node 1's own turn: no other node used it lately
    assert (b.board.moves, b.board.shares) == (5, 3)


def test_ends_of_keys_never_started_and_repeated_starts_count_once():
    b = Board()
    assert b.intent(1, [], ends=[7, 8]) == []
    assert b.board.intending(3, [7, 8]).tolist() == [0, 0]
    b.intent(1, [7])
    b.intent(1, [7])  # a start again without an end: still one node
    assert b.board.intending(3, [7]).tolist() == [1]
    b.intent(1, [], ends=[7])
    assert b.board.intending(3, [7]).tolist() == [0]


def test_a_round_that_overtook_an_older_one_wins():
    """Two worker threads' rounds of one node may arrive out of order: round 2 (an end) before round 1
    (the start it ended). The start is then ignored: the node intends nothing."""
    b = Board()
    assert b.intent(1, [], ends=[9], round_=2) == []
    assert b.intent(1, [9], round_=1) == []
    assert b.board.intending(3, [9]).tolist() == [0]
    assert b.intent(1, [9], round_=3) == [9]  # a newer start counts
    assert b.intent(1, [], ends=[9], round_=3) == []  # the same round again: already applied
    assert b.board.intending(3, [9]).tolist() == [1]


def test_more_starts_than_keys_is_a_protocol_error():
    b = Board()
    header = Header(Kind.INTENT, table=3, request_id=1, part=3, origin=1, n_keys=2)
    with pytest.raises(ProtocolError, match="3 starts among 2 keys"):
        b.board.handle(header, Payload(np.array([1, 2]), None, None, None), b.shard)


def test_copies_are_granted_to_every_intending_node_but_the_owner():
    """A start that makes a key shared grants the sender a copy, and the node that intended it alone
    the same; later intending nodes get theirs at their start; the owner never; unmanaged keys never."""
    b = Board()
    b.shard.owner[7] = 1  # key 7 lives on node 1 (moved there)
    assert b.intent(1, [3, 4, 7, 60]) == [3, 4, 7]
    assert b.grants == []  # alone: moves, no copies
    assert b.intent(2, [4, 5, 7, 60]) == [5]
    assert sorted(b.grants) == [(1, [4]), (2, [4, 7])]  # 7: node 1 owns it, node 2 copies it
    b.grants.clear()
    assert b.intent(0, [4]) == []  # node 0 owns 4 (it manages it and nothing moved it yet): no copy for it
    assert b.grants == []  # (the third: 1 and 2 have theirs)
    assert b.intent(3, [4]) == []
    assert b.grants == [(3, [4])]
    b.grants.clear()
    assert b.intent(2, [], ends=[4]) == [] and b.intent(2, [4]) == []  # node 2 again: count 4, its copy only
    assert b.grants == [(2, [4])]
    b.grants.clear()
    assert b.intent(1, [4]) == []  # a start told again (its copy was flushed), no end before: a copy again
    assert b.grants == [(1, [4])]
    assert b.board.intending(3, [3, 4, 5, 7]).tolist() == [1, 4, 1, 2]
    assert b.board.grants == 6


def test_a_grant_is_handed_to_the_node():
    """An INTENT with flag GRANT is a manager's grant to this node: handed on, not counted, not answered."""
    b = Board()
    got = []
    b.board.on_grant = lambda table, keys: got.append((table, keys.tolist()))
    header = Header(Kind.INTENT, table=3, origin=1, n_keys=2, flags=intents.GRANT)
    b.board.handle(header, Payload(np.array([8, 9]), None, None, None), b.shard)
    assert got == [(3, [8, 9])] and b.transport.sent == []
    assert b.board.intending(3, [8, 9]).tolist() == [0, 0]
