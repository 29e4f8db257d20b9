"""Copies of keys that several nodes intend (AdaPM's replicas, issue 35), on one node, while its windows hold them.

A key's manager grants each node that intends a key another node intends too a copy (server.intents);
client.intent_sync makes and syncs them. This module holds the rows, no I/O:

    install(keys, rows)          the rows pulled from the keys' owners: copies from now on
    serve(kind, keys, ...)       a pull, push or set of the keys that have a copy here, in it; the rest miss
    take()                       a sync round: each copy's pushes since the last round (summed), the copies to
                                 refresh (read since the last round, or not refreshed for STALE rounds)
    refresh(round, keys, rows)   the owner's rows after that round: the copies' new base
    drop(keys)                   no copy any more: their unsent pushes wait in `leftover` for the next round

Exactness: every push to a copy is added to its slot's `pending` under `_lock`, and each pending sum
leaves exactly once, by `take`, `drop` or `evict`, to be pushed to the key's owner (a plain push, applied
once wherever the key is). Every later push of a dropped key goes the usual way. So the owner applies
every push once, whichever copies it went through; a copy's rows are only a view. A copy reads as its
owner's row at the last refresh, with this node's pushes since applied on top (for an updater with
state, by a local state that starts at init: a view only, the owner's state is the one that counts).

Threads and ownership: any thread serves (a worker's request stage); the pskv-replica thread takes,
drops and refreshes; a reply's thread installs and refreshes. Everything runs under `_lock`; `live` is
read without it to skip the lock when there is no copy.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .. import kernels, updaters
from .spec import TableSpec

_ADD = updaters.get("add")  # sums pushes into `pending` (duplicates summed)
STALE = 8  # rounds after which a copy nobody used since is refreshed all the same


class IntentReplicas:
    """One table's copies on this node: slots of rows, by key."""

    def __init__(self, spec: TableSpec, capacity: int = 64) -> None:
        self.spec = spec
        self.index = np.full(spec.rows, -1, np.int32)  # (rows,) key -> slot, -1: no copy here
        self._width = spec.updater.state_width(spec.dim)
        self._alloc(max(1, capacity))
        self.live = 0  # copies now
        self._round = 0  # numbers the sync rounds (`take`)
        self.leftover: list[tuple[np.ndarray, np.ndarray]] = []  # (keys, summed pushes) of dropped copies, unsent
        self.flushes = 0  # drop_all calls: rows pulled before one are not installed after it
        self._lock = threading.Lock()  # guards everything here
        self.installed = self.dropped = self.rounds = self.keys_synced = self.keys_refreshed = self.served = 0

    def _alloc(self, cap: int) -> None:
        spec = self.spec
        self.keys = np.full(cap, -1, np.int64)  # (cap,) slot -> key, -1 free
        self.data = np.zeros((cap, spec.dim), spec.dtype)  # (cap, dim) the copies' rows
        self.pending = np.zeros((cap, spec.dim), spec.dtype)  # (cap, dim) pushes since the last take, summed
        self.dirty = np.zeros(cap, bool)  # (cap,) pending holds a push
        self.used = np.zeros(cap, bool)  # (cap,) pulled or pushed since the last round
        self.since = np.full(cap, -1, np.int64)  # (cap,) the round of its last refresh (requested), or install
        self.wanted = np.zeros(cap)  # (cap,) when its node last intended the key (a round's look; monotonic seconds)
        self.state = None if not self._width else np.zeros((cap, self._width), spec.dtype)
        self._free = list(range(cap - 1, -1, -1))  # free slots, lowest last

    def _grow(self, need: int) -> None:
        """Room for `need` more copies (under _lock): every array doubled until they fit."""
        cap = len(self.keys)
        new = cap
        while len(self._free) + (new - cap) < need:
            new *= 2
        if new == cap:
            return
        old = (self.keys, self.data, self.pending, self.dirty, self.used, self.since, self.wanted, self.state)
        self._alloc(new)
        for a, b in zip(
            (self.keys, self.data, self.pending, self.dirty, self.used, self.since, self.wanted, self.state),
            old,
            strict=True,
        ):
            if a is not None and b is not None:
                a[:cap] = b
        self._free = list(range(new - 1, cap - 1, -1)) + [s for s in range(cap - 1, -1, -1) if old[0][s] < 0]

    # ---- copies come and go -----------------------------------------------------------------------
    def install(self, keys: np.ndarray, rows: np.ndarray, flushes: int) -> np.ndarray:
        """Make copies of `keys` (distinct) from their owners' `rows`, pulled when `flushes` was the
        count of drop_all calls (none if another came since); keys that have one already keep theirs.
        Returns the keys installed."""
        with self._lock:
            if flushes != self.flushes:
                return keys[:0]
            new = self.index[keys] < 0
            keys, rows = keys[new], rows[new]
            if not len(keys):
                return keys
            self._grow(len(keys))
            slots = np.array([self._free.pop() for _ in range(len(keys))], np.int64)
            self.index[keys] = slots
            self.keys[slots] = keys
            self.data[slots] = rows
            self.pending[slots] = 0
            self.dirty[slots] = False
            self.used[slots] = False
            self.since[slots] = self._round
            self.wanted[slots] = time.monotonic()
            if self.state is not None:  # (a local state for the view: it starts at init)
                fresh = np.empty((len(slots), self._width), self.spec.dtype)
                self.spec.updater.init_state(fresh)
                self.state[slots] = fresh
            self.live += len(keys)
            self.installed += len(keys)
            return keys

    def drop(self, keys: np.ndarray) -> int:
        """No copies of `keys` any more (those without one are skipped); their unsent pushes go to
        `leftover`. Returns how many were dropped."""
        with self._lock:
            return len(self._drop(keys))

    def _drop(self, keys: np.ndarray) -> np.ndarray:
        """(under _lock) Drop the copies of `keys`; returns the slots freed, and puts their pending
        pushes into `leftover`."""
        slots = self.index[keys]
        slots = slots[slots >= 0].astype(np.int64)
        if not len(slots):
            return slots
        sent = slots[self.dirty[slots]]
        if len(sent):
            self.leftover.append((self.keys[sent].copy(), self.pending[sent].copy()))
        self.index[self.keys[slots]] = -1
        self.keys[slots] = -1
        self.dirty[slots] = False
        self._free.extend(slots.tolist())
        self.live -= len(slots)
        self.dropped += len(slots)
        return slots

    def drop_all(self) -> np.ndarray:
        """Drop every copy (a flush); their unsent pushes go to `leftover`. Returns the keys dropped."""
        with self._lock:
            self.flushes += 1
            keys = self.keys[self.keys >= 0].copy()
            self._drop(keys)
            return keys

    def evict(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Drop the copies of `keys` now and return every unsent push of them, leftovers included, as
        (keys, summed pushes), for the caller to send before what it sends next (a set: the pushes
        before it must reach the owner first)."""
        with self._lock:
            self._drop(keys)
            return self._take_leftover(keys)

    def take_leftover(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, summed pushes) of the copies dropped since the last call: to send (each leaves once)."""
        with self._lock:
            return self._take_leftover(None)

    def _take_leftover(self, only) -> tuple[np.ndarray, np.ndarray]:
        keep, out = [], []
        for k, u in self.leftover:
            if only is None:
                out.append((k, u))
                continue
            mine = np.isin(k, only)
            if mine.any():
                out.append((k[mine], u[mine]))
            if not mine.all():
                keep.append((k[~mine], u[~mine]))
        self.leftover = keep
        if not out:
            return np.zeros(0, np.int64), np.zeros((0, self.spec.dim), self.spec.dtype)
        return np.concatenate([k for k, _ in out]), np.concatenate([u for _, u in out])

    def idle(self, keys: np.ndarray, intended: np.ndarray, before: float) -> np.ndarray:
        """Which of `keys` (with copies) their node has not intended since `before`: `intended` says
        which it intends now (their time is noted), the others' last noted time is compared."""
        with self._lock:
            slots = self.index[keys].astype(np.int64)
            ok = slots >= 0
            self.wanted[slots[ok & intended]] = time.monotonic()
            return ok & ~intended & (self.wanted[np.where(ok, slots, 0)] < before)

    def held(self) -> np.ndarray:
        """(live,) the keys with a copy here now, sorted."""
        with self._lock:
            return np.sort(self.keys[self.keys >= 0])

    def mask(self, keys: np.ndarray) -> np.ndarray:
        """Which of `keys` have a copy here now (a hint: a copy may go at once)."""
        return self.index[keys] >= 0

    # ---- the request stage ------------------------------------------------------------------------
    def serve(self, kind: str, keys: np.ndarray, values, out, pos, rows: bool) -> np.ndarray | None:
        """A pull ("pull"), push ("push", with `rows`: and read after it) of `keys` in the copies that
        are here; returns the indices of the keys without one (None: none had one)."""
        with self._lock:
            slots = self.index[keys]
            hit = slots >= 0
            if not hit.any():
                return None
            at = np.flatnonzero(hit)
            s = slots[at].astype(np.int64)
            self.served += len(at)
            self.used[s] = True
            if kind == "push":
                upd = values[at]
                _ADD.apply(self.pending, None, s, upd)
                self.dirty[s] = True
                self.spec.updater.apply(self.data, self.state, s, upd)
            if kind == "pull" or rows:
                p = at if pos is None else pos[at]
                kernels.gather_slots(self.data, s, out, p, True)
            return np.flatnonzero(~hit)

    # ---- sync rounds --------------------------------------------------------------------------------
    def take(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """A sync round: (its number, keys with pushes since the last round, their summed pushes, keys to
        refresh without: read since the last round, or not refreshed for STALE rounds). Both key sets wait
        for `refresh` with the owners' rows after the pushes; a copy nobody used keeps its rows (a read
        of it is then at most STALE rounds older than the owner's row, and refreshed at the next round)."""
        with self._lock:
            self._round += 1
            live = np.flatnonzero(self.keys >= 0)
            changed = live[self.dirty[live]]
            rest = live[~self.dirty[live]]
            same = rest[self.used[rest] | (self.since[rest] <= self._round - STALE)]
            updates = self.pending[changed].copy()
            self.pending[changed] = 0
            self.dirty[changed] = False
            self.used[live] = False
            self.since[changed] = self._round
            self.since[same] = self._round
            self.rounds += 1
            self.keys_synced += len(changed)
            self.keys_refreshed += len(same)
            return self._round, self.keys[changed].copy(), updates, self.keys[same].copy()

    def refresh(self, round_: int, keys: np.ndarray, rows: np.ndarray) -> None:
        """The owners' `rows` of `keys` after round `round_`'s pushes: the copies' new base, with this
        node's pushes since applied on top (an updater with state: the rows alone). A copy dropped, or
        taken by a later round meanwhile, keeps what it has."""
        with self._lock:
            slots = self.index[keys].astype(np.int64)
            ok = slots >= 0
            ok[ok] = self.since[slots[ok]] == round_
            s = slots[ok]
            self.data[s] = rows[ok]
            again = s[self.dirty[s]]
            if len(again) and self.state is None:
                self.spec.updater.apply(self.data, None, again, self.pending[again])

    def __repr__(self) -> str:
        return f"<IntentReplicas {self.spec.name!r} live={self.live} rounds={self.rounds} dropped={self.dropped}>"
