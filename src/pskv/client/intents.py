"""Intent signaling (AdaPM): workers say which keys they will use when; the keys' managers decide where they live.

    table.intent(keys, start, end=None)    this worker will use `keys` in clocks [start, end) (end: start + 1)
    worker.advance_clock()                 this worker's intent clock moves on by one (e.g. per batch)

The intent clock is a worker's own counter, apart from the BSP/SSP clock (`worker.clock()`):
signaling intents never makes a pull wait, and a BSP/SSP app may advance both at its own pace.

Nothing is sent by `intent()`. At each `advance_clock()` the worker takes the windows that come
near: those that start before `clock + ahead`, where `ahead` is how many of its clock ticks the
table's last moves took to land (measured: seconds from telling the managers to the keys being
here, over the worker's seconds per tick, plus one; at least 2). A node counts per key the windows of its
workers that hold it (`NodeIntents.active`); a key whose count leaves 0 is a start, one whose count
falls back to 0 an end. Each manager gets one INTENT with its starts and ends per round
(server.intents), and answers which starts move: those no other node intends. The next
`advance_clock()` of any worker of the node localizes them (skip > gate > move, as
`table.localize`; with backups, subscribe), only the keys still intended and not here yet. A key
several nodes intend stays where it is, and each of them that does not own it gets a copy while its
windows hold the key (the manager's grant; client.intent_sync); a key no longer intended stays where
it was last moved.

Exactness: intents cause relocations and copies; a push is applied once, wherever the key is, and a
push to a copy reaches the key's owner once (client.intent_sync).
A table whose keys do not move (sparse, aggregated: its localize is refused) takes intents and
ignores them, so that one Lookahead can name every table a batch uses.

Threads and ownership: a `WorkerIntents` belongs to its worker's thread. `NodeIntents` is shared by
the node's workers under `_lock`; the INTENT replies land in pskv-server (`_answered`), which only
appends to `_moves` (and a manager's grants to `_grants`) under the lock (it never localizes: a
localize may wait at a checkpoint's gate).
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ..catalog import TableState
from ..errors import TableError
from ..net.requests import Credit
from ..net.wire import Kind
from ..store.spec import check_keys
from .context import Context

if TYPE_CHECKING:
    from .table import Table

_EMA = 0.2  # weight of a new sample in the measured tick and lead times
_MAX_AHEAD = 64  # ticks: at most this far ahead of the clock are windows taken
_create = threading.Lock()  # makes a table's NodeIntents once


class NodeIntents:
    """One table's intents on this node: how many windows of its workers hold each key now, the
    managers' verdicts not yet acted on, the measured lead time, counters."""

    def __init__(self, state: TableState, ctx: Context) -> None:
        self.state, self.ctx = state, ctx
        self.active = np.zeros(state.spec.rows, np.int32)  # (rows,) windows of this node's workers holding each key
        self._lock = threading.Lock()  # guards active, _moves, _grants, _again, lead and the counters
        self._moves: list[tuple[float, np.ndarray]] = []  # (when told, keys) the managers said move here
        self._grants: list[np.ndarray] = []  # keys the managers granted a copy of (several nodes intend them)
        self._again: list[np.ndarray] = []  # keys still intended whose copies a flush dropped: started again
        self.lead = 0.0  # seconds from telling the managers to the moved keys being here (EMA; 0: none yet)
        self._seq = 0  # numbers the rounds in the order of their counts (INTENT `dim`): threads' sends may overtake
        self.signaled = self.starts = self.ends = self.verdicts = self.moved = self.grants = 0

    # ---- a worker's advance_clock --------------------------------------------------------------
    def update(self, began: list[np.ndarray], ended: list[np.ndarray]) -> None:
        """Windows that came near (`began`) and that are over (`ended`), each an array of keys: count
        them, then tell each manager the keys whose count left or reached 0 (one INTENT each)."""
        with self._lock:
            starts = _count(self.active, began, +1)
            ends = _count(self.active, ended, -1)
            self.starts += len(starts)
            if self._again:  # told as starts again: their managers grant the copies again
                again, self._again = np.concatenate(self._again), []
                starts = np.union1d(starts, again[self.active[again] > 0])
            self.ends += len(ends)
            self._seq += 1
            seq = self._seq
        if len(starts) or len(ends):
            self._send(starts, ends, seq)

    def _send(self, starts: np.ndarray, ends: np.ndarray, seq: int) -> None:
        st, ctx = self.state, self.ctx
        members = ctx.members
        before = members()
        ms, me = self._managers(starts, before), self._managers(ends, before)
        dests = np.union1d(ms, me).astype(np.int64)
        dests = dests[dests >= 0]
        told = time.monotonic()
        asked = {int(d): starts[ms == d] for d in dests}

        def answered(sender: int, reply) -> Credit:  # pskv-server (or a failed request: never called)
            pos = reply[1].positions
            keys = asked.get(sender)
            if keys is not None and pos is not None and len(pos):
                with self._lock:
                    self._moves.append((told, keys[np.asarray(pos, np.int64)]))
                    self.verdicts += len(pos)
            return Credit(1)

        done: set[int] = set()

        def retry() -> None:  # a membership change: a manager that died will not answer
            alive = set(members()) if members() else set(asked)
            for d in [d for d in asked if d not in alive and d not in done]:
                done.add(d)
                ctx.tracker.on_reply(rid, 1, d)

        rid, _ = ctx.tracker.new_request(
            len(dests), on_part=answered, retry=retry, desc=f"intents of table {st.spec.name!r}"
        )  # (a hint: nobody waits)
        for d, starting in asked.items():
            keys = np.concatenate([starting, ends[me == d]])
            ctx.endpoint.request(
                d, Kind.INTENT, st.spec.table_id, rid, part=len(starting), dim=seq & 0xFFFFFFFF, keys=keys
            )
        if members() != before:  # a membership change came while we sent: its retry may have run first
            retry()

    def _managers(self, keys: np.ndarray, alive: list[int]) -> np.ndarray:
        """(n,) the node to tell of each of `keys`: its manager; when that one died (backups: the ranges
        keep their managers), its range's head now, whose board counts the starts told from then on;
        -1 (no one) with no chains. Without a message to a dead node, nothing waits for its answer
        (a barrier drains the node's requests)."""
        dest = self.state.ranges.manager_of(keys)
        if not alive or not len(keys):
            return dest
        dead = ~np.isin(dest, alive)
        if dead.any():
            chains = self.ctx.chains()
            dest = np.array(dest, np.int64)
            dest[dead] = -1 if chains is None else chains.heads[self.state.ranges.range_of(keys[dead])]
        return dest

    def take_moves(self) -> tuple[float, np.ndarray]:
        """(when the oldest was told, keys) the managers said move here that are still intended and
        not here yet; empties the list."""
        with self._lock:
            moves, self._moves = self._moves, []
            if not moves:
                return 0.0, np.zeros(0, np.int64)
            keys = np.unique(np.concatenate([k for _, k in moves]))
            keys = keys[self.active[keys] > 0]
        keys = keys[self.state.shard.slot[keys] < 0]
        if self.state.declined_until is not None:  # their manager dropped the leases that declined them here
            self.state.declined_until[keys] = -np.inf
        return min(t for t, _ in moves), keys

    def granted(self, keys: np.ndarray) -> None:
        """pskv-server: a manager grants copies of `keys` (other nodes intend them too)."""
        with self._lock:
            self._grants.append(keys)
            self.grants += len(keys)

    def again(self, keys: np.ndarray) -> None:
        """A flush dropped the copies of `keys`: tell their managers of them as starts again at the next
        update (those still intended then), so that the copies come back while windows hold them."""
        if len(keys):
            with self._lock:
                self._again.append(keys)

    @property
    def pending(self) -> bool:
        """Starts to tell again (`again`)."""
        return bool(self._again)

    def take_grants(self) -> np.ndarray:
        """The keys granted a copy since the last call that are still intended here, sorted; empties the list."""
        with self._lock:
            grants, self._grants = self._grants, []
            if not grants:
                return np.zeros(0, np.int64)
            keys = np.unique(np.concatenate(grants))
            return keys[self.active[keys] > 0]

    def landed(self, told: float) -> None:
        """A localize of verdicts told at `told` completed: how long a move takes here."""
        took = time.monotonic() - told
        with self._lock:
            self.lead = took if self.lead == 0 else (1 - _EMA) * self.lead + _EMA * took

    def counters(self) -> dict:
        copies = self.state.copies
        return {
            "intent_windows": self.signaled,
            "intent_starts": self.starts,
            "intent_ends": self.ends,
            "intent_moves": self.verdicts,
            "intent_localized": self.moved,
            "intent_grants": self.grants,
            **(copies.counters() if copies is not None else {}),
        }

    def __repr__(self) -> str:
        return (
            f"<NodeIntents {self.state.spec.name!r} intended={int((self.active > 0).sum())} "
            f"lead={self.lead * 1e3:.1f}ms moves={self.verdicts}>"
        )


def _count(active: np.ndarray, windows: list[np.ndarray], step: int) -> np.ndarray:
    """Add `step` per window to each of its keys (a key once per window); the keys whose count left 0
    (step +1) or reached it (step -1), sorted."""
    if not windows:
        return np.zeros(0, np.int64)
    keys, times = np.unique(np.concatenate(windows), return_counts=True)
    before = active[keys]
    active[keys] = before + step * times
    return keys[before == 0] if step > 0 else keys[active[keys] == 0]


def granted(state: TableState, keys: np.ndarray) -> None:
    """pskv-server: a manager's grant of copies of `keys` of this table (server.intents); ignored when
    the table has no intents here or takes no copies (aggregated: client.path makes it none)."""
    if state.intents is not None and state.copies is not None:
        state.intents.granted(np.asarray(keys, np.int64))


def of(state: TableState, ctx: Context, h) -> NodeIntents | None:
    """The table's NodeIntents on this node, made at its first intent; None for a table whose keys
    do not move (its localize is refused: sparse, aggregated), whose intents have no effect."""
    node = state.intents
    if node is None:
        try:
            state.path.localize(h, np.zeros(0, np.int64), False)  # a refused localize raises its TableError
        except TableError:
            return None
        with _create:
            node = state.intents
            if node is None:
                node = state.intents = NodeIntents(state, ctx)
    assert isinstance(node, NodeIntents)  # (this function makes them all)
    return node


class WorkerIntents:
    """A worker's intent clock and its windows: waiting (not near yet) and active (told), by table."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.clock = 0
        self._waiting: list = []  # heap of (start, seq, end, NodeIntents, keys)
        self._active: list = []  # heap of (end, seq, NodeIntents, keys)
        self._seq = itertools.count()
        self._tick = 0.0  # seconds per tick (EMA; 0: not measured yet)
        self._last: float | None = None
        self._tables: dict[int, Table] = {}  # id(NodeIntents) -> the worker's Table handle (for localize)

    def signal(self, h, keys, start: int, end: int | None) -> None:
        """Table.intent: remember the window; nothing is sent before the next advance."""
        st = h.state
        keys = np.unique(check_keys(h.spec, keys, "intent"))
        start = int(start)
        end = start + 1 if end is None else int(end)
        if end <= start:
            raise TableError(f"intent on table {h.name!r}: the window [{start}, {end}) is empty; end must be > start")
        node = of(st, h.ctx, h)
        if node is None:
            return  # its keys do not move: nothing to do
        self._tables[id(node)] = h
        node.signaled += 1
        if end <= self.clock or not len(keys):
            return  # over already
        heapq.heappush(self._waiting, (start, next(self._seq), end, node, keys))

    def advance(self, ticks: int) -> int:
        """Move the clock on by `ticks` (0: act on what was signaled so far), tell the managers of the
        windows that came near or ended, and localize what they said move here. Returns the clock."""
        now = time.monotonic()
        if ticks > 0:
            if self._last is not None:
                per = (now - self._last) / ticks
                self._tick = per if self._tick == 0 else (1 - _EMA) * self._tick + _EMA * per
            self._last = now
            self.clock += ticks
        began: dict[int, list] = {}
        ended: dict[int, list] = {}
        nodes: dict[int, NodeIntents] = {}
        while self._active and self._active[0][0] <= self.clock:
            _, _, node, keys = heapq.heappop(self._active)
            ended.setdefault(id(node), []).append(keys)
            nodes[id(node)] = node
        while self._waiting and self._waiting[0][0] <= self.clock + self._ahead(self._waiting[0][3]):
            _, seq, end, node, keys = heapq.heappop(self._waiting)
            nodes[id(node)] = node
            if end <= self.clock:
                continue  # its window passed before it came near (a worker that ticks faster than moves land)
            began.setdefault(id(node), []).append(keys)
            heapq.heappush(self._active, (end, seq, node, keys))
        for key, h in self._tables.items():
            intents = h.state.intents
            if key not in nodes and isinstance(intents, NodeIntents) and intents.pending:
                nodes[key] = intents
        for key, node in nodes.items():
            node.update(began.get(key, []), ended.get(key, []))
        for h in self._tables.values():
            self._localize(h)
        return self.clock

    def _ahead(self, node: NodeIntents) -> int:
        """Ticks ahead of the clock at which a window is taken: the table's lead time in this worker's
        ticks, plus the tick the verdicts wait for (they are acted on at the next advance); at least 2."""
        if node.lead <= 0 or self._tick <= 0:
            return 2
        return max(2, min(_MAX_AHEAD, 1 + math.ceil(node.lead / self._tick)))

    def _localize(self, h) -> None:
        """Act on the managers' verdicts: localize the keys that move here, make the copies granted."""
        st = h.state
        node = st.intents
        told, keys = node.take_moves()
        if len(keys):
            node.moved += len(keys)
            h.localize(keys).add_done_callback(lambda f: f.exception() is None and node.landed(told))
        if st.copies is not None:
            keys = node.take_grants()
            if len(keys):
                st.copies.make(keys, node.active)

    def close(self) -> None:
        """The worker leaves: its windows end now (the managers hear of it; nothing waits for them)."""
        ended: dict[int, list] = {}
        nodes: dict[int, NodeIntents] = {}
        for _, _, node, keys in self._active:
            ended.setdefault(id(node), []).append(keys)
            nodes[id(node)] = node
        self._active, self._waiting = [], []
        for key, node in nodes.items():
            node.update([], ended[key])
        copied = [
            node for node in nodes.values() if node.state.copies is not None and node.state.copies.replicas is not None
        ]
        if copied and not any(node.active.any() for node in copied):  # the node's last windows: its copies go,
            self.worker.ctx.replica_sync.flush()  # their pushes reach the owners
