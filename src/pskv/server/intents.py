"""Intents at a key's manager (AdaPM's decision): which nodes intend to use each key now, and what to do.

A node's workers say which keys they will use in which window of their clocks (`table.intent`,
client.intents). The node tells each key's manager when its first window holding a key becomes
near (a start) and when its last one ends (an end): INTENT, [header, keys] with `part` = how many of
the keys are starts (the rest are ends) and `dim` = the round's number on that node and table, one
message per manager and round. Rounds of different worker threads may arrive out of order: a key's
start or end is applied only if its round is newer than the last one applied to that key. The manager counts
per key the nodes that intend it and answers each INTENT with ACK, whose positions are the starts
it says move: the key's only intending node is the sender, and no other node started or ended
an intent of it within the last TURN seconds (a key that nodes take turns at, a hot item or a
uniform negative, would otherwise move on nearly every batch and be read and written remotely by
the others all the same: measured, mf on Zipf ratings on 2 emulated hosts moved 22,000 keys per
node in 2 epochs for no byte saved). That node then localizes them
(client.intents), under no lease: the manager forgets the keys' leases and move counts here
(`Relocation.release`), since no other node means to use them. A key several nodes intend stays
where it is and is read and updated there; a key no node intends any more stays where it was
last moved. Every move is a plain relocation (server.relocate), so sums stay exact.

A node that dies keeps its intents counted here (nothing moves to a sole other intender of its
keys until the table is declared again); keys the manager does not manage (a range handed on by
a leaving node) get no verdict: they stay.

Threads and ownership: everything here runs in pskv-server, which alone touches `_count` and `_held`.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import Header, Kind, Payload
from ..store.shard import Shard

TURN = 1.0  # seconds after another node's intent of a key started or ended during which it moves to none


class IntentBoard:
    """The manager's side: per table, how many nodes intend each key it manages, and which."""

    def __init__(self, endpoint: Endpoint, release) -> None:
        self._endpoint = endpoint
        self._release = release  # (table id, keys): forget their leases (server.relocate.Relocation.release)
        self._count: dict[int, np.ndarray] = {}  # table -> (rows,) int32 nodes intending each key
        self._held: dict[int, dict[int, np.ndarray]] = {}  # table -> origin -> (rows,) bool: keys it intends
        self._round: dict[int, dict[int, np.ndarray]] = {}  # table -> origin -> (rows,) int64 last round applied
        self._last: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # table -> (rows,) the node whose intent of
        # each key started or ended last, and when (monotonic seconds)
        self.moves = 0  # keys this manager told their only intending node to take
        self.shares = 0  # starts it answered with "stay": another node intends the key too

    def handle(self, header: Header, p: Payload, shard: Shard) -> None:
        """INTENT: apply the sender's ends, then its starts; answer the starts that move (ACK positions)."""
        keys = np.asarray(p.keys, np.int64)
        n = header.part
        if n > len(keys):
            raise ProtocolError(f"{header!r}: {n} starts among {len(keys)} keys")
        rows = shard.spec.rows
        count = self._count.get(header.table)
        if count is None:
            count = self._count[header.table] = np.zeros(rows, np.int32)
            self._held[header.table] = {}
            self._round[header.table] = {}
            self._last[header.table] = (np.full(rows, -1, np.int32), np.full(rows, -np.inf))
        mine = self._held[header.table].get(header.origin)
        if mine is None:
            mine = self._held[header.table][header.origin] = np.zeros(rows, bool)
            self._round[header.table][header.origin] = np.zeros(rows, np.int64)
        seen = self._round[header.table][header.origin]
        ends = np.unique(keys[n:])
        ends = ends[seen[ends] < header.dim]  # (an older round that overtook this one is ignored)
        seen[ends] = header.dim
        ends = ends[mine[ends]]
        mine[ends] = False
        count[ends] -= 1
        starts = keys[:n]
        late = seen[starts] >= header.dim  # a newer round decided these already
        seen[starts[~late]] = header.dim
        fresh = np.unique(starts[~mine[starts] & ~late])
        mine[fresh] = True
        count[fresh] += 1
        now = time.monotonic()
        node, when = self._last[header.table]
        turn = (node[starts] != header.origin) & (when[starts] > now - TURN)  # another node's, lately
        move = (count[starts] == 1) & ~turn & ~late & (shard.owner[starts] >= 0)  # the sender alone, managed here
        for keys in (ends, fresh):
            node[keys], when[keys] = header.origin, now
        pos = np.flatnonzero(move)
        if len(pos):
            self._release(header.table, starts[pos])
        self.moves += len(pos)
        self.shares += n - len(pos)
        self._endpoint.reply(header, Kind.ACK, n_keys=len(pos), positions=pos)

    def intending(self, table: int, keys) -> np.ndarray:
        """(n,) int32 how many nodes intend each of `keys` now (tests, debug_state)."""
        count = self._count.get(table)
        keys = np.asarray(keys, np.int64)
        return np.zeros(len(keys), np.int32) if count is None else count[keys].copy()

    def __repr__(self) -> str:
        live = {t: int((c > 0).sum()) for t, c in self._count.items()}
        return f"<IntentBoard keys intended by table {live} moves={self.moves} shares={self.shares}>"
