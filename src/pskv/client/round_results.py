"""The round results of an aggregated table on one node, and the pulls waiting for them (client.aggregate).

`Results` holds the rows after each round that level 2 applied, per key (two slots: a key's rounds r
and r + 1 may both be in flight), and the pulls that wait for them; a level-2 failure fails them
all and every later call of the table. It shares the `Aggregator`'s lock (see client.aggregate on
threads and lock order): `deliver`, `read_done` and `fail` take it; `try_finish` and `part_done`
expect it held. No Future resolves under it.
"""

from __future__ import annotations

import threading

import numpy as np

from ..net.future import Future


class ThreadRounds:
    """One worker thread's position in the rounds of every key of a table."""

    def __init__(self, start: np.ndarray) -> None:
        self.round = start.copy()  # (rows,) int64 the round this thread is in, per key
        self.pushed = np.zeros(len(start), bool)  # (rows,) pushed in its current round
        self.pulling = np.zeros(len(start), bool)  # (rows,) a round pull is outstanding


class Pull:
    """A pull waiting for its round results (and perhaps for a plain read of other keys)."""

    __slots__ = ("thread", "keys", "rounds", "pos", "index", "out", "future", "parts", "error", "copied")

    def __init__(self, thread, keys, rounds, pos, index, out, future, parts) -> None:
        self.thread = thread  # ThreadRounds of the puller
        self.keys = keys  # (m,) distinct keys whose round results it waits for
        self.rounds = rounds  # (m,) the round of each
        self.pos = pos  # (j,) rows of out that get a round result
        self.index = index  # (j,) which of `keys` each of those rows is
        self.out = out  # (n, dim) the caller's result
        self.future = future
        self.parts = parts  # 1 (round results) + 1 if a plain read runs alongside
        self.error: BaseException | None = None
        self.copied = False  # its round results are in `out`


class Results:
    """The rows after the applied rounds of one aggregated table's keys, and the pulls waiting for them."""

    def __init__(self, rows: int, dim: int, dtype, lock: threading.Lock) -> None:
        self._result = np.zeros((2, rows, dim), dtype)  # rows after round r was applied, in [r % 2]
        self._result_round = np.full((2, rows), -1, np.int64)  # which round each result slot holds
        self.waiting: list[Pull] = []  # (under the lock)
        self.error: BaseException | None = None  # a level-2 failure; every later call raises it
        self._lock = lock  # the Aggregator's

    def deliver(self, keys: np.ndarray, rounds: np.ndarray, values: np.ndarray) -> None:
        """The rounds of `keys` were applied at the owner; `values` (n, dim) are the rows after them."""
        slot = rounds & 1
        with self._lock:
            self._result[slot, keys] = values
            self._result_round[slot, keys] = rounds
            ready = [p for p in self.waiting if self.try_finish(p)]
            if ready:
                self.waiting = [p for p in self.waiting if p not in ready]
        for p in ready:
            self.resolve(p)

    def try_finish(self, p: Pull) -> bool:
        """Under the lock: copy p's round results into its `out` if all are here; True if p is complete."""
        if p.copied or not len(p.keys):
            return False  # nothing (more) to copy: it waits for its plain read only
        slot = p.rounds & 1
        if not (self._result_round[slot, p.keys] == p.rounds).all():
            return False
        p.out[p.pos] = self._result[slot[p.index], p.keys[p.index]]  # (j, dim)
        p.thread.pulling[p.keys] = False
        p.copied = True
        return self.part_done(p)

    @staticmethod
    def part_done(p: Pull) -> bool:
        """Under the lock: one part of p is here; True if it was the last."""
        p.parts -= 1
        return p.parts == 0

    def read_done(self, p: Pull, error: BaseException | None) -> None:
        """p's plain read of the keys it did not push completed (with `error`, or None)."""
        with self._lock:
            if error is not None and p.error is None:
                p.error = error
            finished = self.part_done(p)
            if finished and p in self.waiting:
                self.waiting.remove(p)
        if finished:
            self.resolve(p)

    @staticmethod
    def resolve(p: Pull) -> None:
        p.future.resolve(None if p.error else p.out, p.error)

    def on_request_done(self, fut: Future) -> None:
        """A level-2 request failed (owner's ERROR, node failure): fail every waiting pull with it."""
        error = fut.exception()
        if error is not None:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
            failed, self.waiting = self.waiting, []
        for p in failed:
            p.future.resolve(None, error)

    def raise_error(self) -> None:
        """Under the lock: raise the level-2 failure, if one came."""
        if self.error is not None:
            raise self.error
