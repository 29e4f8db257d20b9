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
where it is; a key no node intends any more stays where it was last moved. Every move is a plain
relocation (server.relocate), so sums stay exact.

Copies (AdaPM's replicas): a start that leaves two or more nodes intending a key grants the sender a
copy of it, and when it is the second, the node that intended it alone until then too; never the
node that owns the key. A grant is an INTENT with flag GRANT, [header, keys], one per node and
INTENT handled, with no reply: the node copies the keys it still intends and syncs the copies with
the owner, and drops each when its windows of the key are over (client.intent_sync). The owner
keeps no account of copies: a copy's pushes reach it as plain pushes.

A node that dies keeps its intents counted here (nothing moves to a sole other intender of its
keys until the table is declared again); keys the manager does not manage (a range handed on by
a leaving node) get no verdict: they stay. A manager that dies (backups: ranges keep their
managers) takes its counts along; the nodes tell its keys' starts and ends to each key's range
head from then on (client.intents), whose board counts what it hears from then on.

Threads and ownership: everything here runs in pskv-server, which alone touches `_count` and `_held`.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ProtocolError
from ..net.endpoint import Endpoint
from ..net.wire import ROWS, Header, Kind, Payload
from ..store.shard import Shard

TURN = 1.0  # seconds after another node's intent of a key started or ended during which it moves to none
GRANT = ROWS  # flag of an INTENT from a manager: copy these keys (no reply; flag ROWS, which INTENTs never carry)


class IntentBoard:
    """The manager's side: per table, how many nodes intend each key it manages, and which."""

    def __init__(self, endpoint: Endpoint, release) -> None:
        self._endpoint = endpoint
        self._release = release  # (table id, keys): forget their leases (server.relocate.Relocation.release)
        self.on_grant = lambda table, keys: None  # (table id, keys): a manager granted this node copies (the node's)
        self._count: dict[int, np.ndarray] = {}  # table -> (rows,) int32 nodes intending each key
        self._held: dict[int, dict[int, np.ndarray]] = {}  # table -> origin -> (rows,) bool: keys it intends
        self._round: dict[int, dict[int, np.ndarray]] = {}  # table -> origin -> (rows,) int64 last round applied
        self._last: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # table -> (rows,) the node whose intent of
        # each key started or ended last, and when (monotonic seconds)
        self.moves = 0  # keys this manager told their only intending node to take
        self.shares = 0  # starts it answered with "stay": another node intends the key too
        self.grants = 0  # copies it granted (keys, summed over the nodes)

    def handle(self, header: Header, p: Payload, shard: Shard) -> None:
        """INTENT: apply the sender's ends, then its starts; answer the starts that move (ACK positions),
        grant copies of the starts several nodes intend. With flag GRANT: a manager's grant to this node."""
        keys = np.asarray(p.keys, np.int64)
        if header.flags & GRANT:
            self.on_grant(header.table, keys)
            return
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
        self._grant(header, starts[~late], fresh, count, shard)

    def _grant(self, header: Header, starts: np.ndarray, fresh: np.ndarray, count: np.ndarray, shard: Shard) -> None:
        """Copies: to the sender of its starts that several nodes intend, and to the one other intending
        node of those its fresh starts made shared (count 2); none to the key's owner."""
        origin = header.origin
        shared = np.unique(starts[count[starts] >= 2])
        shared = shared[shard.owner[shared] >= 0]  # managed here
        grants = {origin: shared[shard.owner[shared] != origin]}
        second = fresh[count[fresh] == 2]
        second = second[shard.owner[second] >= 0]
        if len(second):
            for node, held in self._held[header.table].items():
                if node != origin:
                    theirs = second[held[second]]
                    theirs = theirs[shard.owner[theirs] != node]
                    if len(theirs):
                        grants[node] = theirs
        for node, keys in grants.items():
            if len(keys):
                self.grants += len(keys)
                self._endpoint.notice(node, Kind.INTENT, header.table, flags=GRANT, keys=keys)

    def intending(self, table: int, keys) -> np.ndarray:
        """(n,) int32 how many nodes intend each of `keys` now (tests, debug_state)."""
        count = self._count.get(table)
        keys = np.asarray(keys, np.int64)
        return np.zeros(len(keys), np.int32) if count is None else count[keys].copy()

    def __repr__(self) -> str:
        live = {t: int((c > 0).sum()) for t, c in self._count.items()}
        return (
            f"<IntentBoard keys intended by table {live} moves={self.moves} shares={self.shares} grants={self.grants}>"
        )
