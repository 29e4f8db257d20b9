"""Node programs for the consistency tests: `python consistency_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values
itself and exits non-zero (with a traceback) when an assertion fails; it prints one JSON line
tagged RESULT for the test to check across nodes. Monotonic timestamps are comparable across
the processes of one machine (CLOCK_MONOTONIC is system-wide).
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

import pskv

CLOCKS = 8
SLOW = 0.3  # seconds the slow worker sleeps before each clock()


_PRINT = threading.Lock()  # worker threads print whole lines, never interleaved


def _emit(**fields) -> None:
    with _PRINT:
        sys.stdout.write("RESULT " + json.dumps(fields) + "\n")
        sys.stdout.flush()


class _ClockWaits:
    """Stands in for node.clocks.wait_for and notes, per thread, the global clock the last pull
    needed and whether the global clock was behind it when the pull got there: what a wait
    needs as its cause. Pulls that the row cache served in full never get here (and never wait)."""

    def __init__(self, clocks) -> None:
        self._clocks, self._wait_for = clocks, clocks.wait_for
        self._last = threading.local()
        self._lock = threading.Lock()  # guards behind
        self.behind = 0  # calls that found the global clock behind what they needed
        clocks.wait_for = self

    def __call__(self, needed: int, *args, **kwargs):
        behind = self._clocks.global_clock < needed  # G only grows: if not behind now, wait_for returns at once
        self._last.seen = (int(needed), behind)
        if behind:
            with self._lock:
                self.behind += 1
        return self._wait_for(needed, *args, **kwargs)

    def take(self) -> tuple[int, bool] | None:
        """(needed, behind) of this thread's last pull since the previous take(), or None."""
        seen, self._last.seen = getattr(self._last, "seen", None), None
        return seen


def ssp(node: pskv.Node, threads: int, staleness: str) -> None:
    """Every worker pushes 1 to its own (worker, clock) key each clock and pulls all keys; the
    last worker sleeps before each clock. Checks the SSP guarantee exactly and records, for each
    pull, which global clock it waited for and whether it had to. Under Async the slow worker,
    at its clock 1, waits until every other worker has pushed at all clocks (which proves that
    nobody waits for it)."""
    model = pskv.Async() if staleness == "async" else pskv.SSP(int(staleness))
    workers = node.num_nodes * threads
    node.table("stamps", rows=workers * CLOCKS, dim=1, dtype="float64", consistency=model)
    slow_id = workers - 1
    waits = _ClockWaits(node.clocks)

    def train(w: pskv.Worker) -> None:
        t = w.table("stamps")
        me = w.rank * threads + w.thread
        pulls = []  # (clock, needed, behind): the global clock the pull waited for (None: it asked for none)
        clocking = []  # monotonic time just before each clock() call
        for c in range(CLOCKS):
            assert w.current_clock == c
            t.push([me * CLOCKS + c], np.ones((1, 1)))
            waits.take()
            v = t.pull(np.arange(workers * CLOCKS))[:, 0].reshape(workers, CLOCKS)
            needed, behind = waits.take() or (None, False)
            pulls.append((c, needed, behind, time.monotonic()))
            assert np.array_equal(v[me, :c + 1], np.ones(c + 1)), f"read-my-writes broken at clock {c}: {v[me]}"
            if model.synchronous:
                bound = c - int(model.staleness)  # clocks 0..bound-1 of every worker must be in
                if bound > 0:
                    assert (v[:, :bound] == 1).all(), f"clock {c}: missing updates stamped < {bound}:\n{v}"
            assert set(np.unique(v)) <= {0.0, 1.0}, "an update was applied twice"
            if me == slow_id:
                if not model.synchronous and c == 1:  # the others must finish every clock without us
                    others = np.arange(workers) != me
                    deadline = time.monotonic() + 60
                    while not (t.pull(np.arange(workers * CLOCKS))[:, 0].reshape(workers, CLOCKS)[others] == 1).all():
                        assert time.monotonic() < deadline, "the fast workers did not finish while the slow one waited"
                        time.sleep(0.01)
                time.sleep(SLOW)
            clocking.append(time.monotonic())
            w.clock()
        w.barrier()
        v = t.pull(np.arange(workers * CLOCKS))
        assert (v == 1).all(), "after the barrier every update is in"
        _emit(worker=me, slow=me == slow_id, pulls=pulls, clocking=clocking)

    node.run(train, threads=threads)
    _emit(node=node.rank, clock_waits=node.stats()["clock_waits"], behind=waits.behind)


def _block_update(values: np.ndarray, own: np.ndarray, clock: int, worker: int) -> np.ndarray:
    """Integer-valued deltas of a worker's own keys from the other block's values (nonlinear)."""
    coef = np.random.default_rng([worker, clock]).integers(1, 5, (len(own), len(values)))
    return ((coef @ values.astype(np.int64)) % 7 - 3).astype(np.float64)


def bsp(node: pskv.Node, threads: int, clocks: int = 10, keys_per_worker: int = 3) -> None:
    """Alternating-block iteration under BSP equals its sequential schedule exactly: at even
    clocks every worker reads block B and updates its keys of block A; at odd clocks the reverse."""
    workers = node.num_nodes * threads
    half = workers * keys_per_worker
    node.table("x", rows=2 * half, dim=1, dtype="float64", consistency=pskv.BSP(), cache=pskv.Cache(rows=half // 2),
               init=pskv.Uniform(0, 10, seed=3))

    def own(worker: int, block: int) -> np.ndarray:
        return block * half + worker * keys_per_worker + np.arange(keys_per_worker)

    def train(w: pskv.Worker) -> None:
        t = w.table("x")
        me = w.rank * threads + w.thread
        for c in range(clocks):
            write, read = (0, 1) if c % 2 == 0 else (1, 0)
            values = t.pull(np.arange(read * half, (read + 1) * half))[:, 0]
            t.push(own(me, write), _block_update(values, own(me, write), c, me)[:, None])
            w.clock()
        w.barrier()
        got = t.pull(np.arange(2 * half))[:, 0]
        if w.thread == 0:
            _emit(node=w.rank, values=got.tolist())

    x0 = None

    def initial(w: pskv.Worker) -> None:
        nonlocal x0
        if w.thread == 0:
            x0 = w.table("x").pull(np.arange(2 * half))[:, 0].copy()
        w.barrier()

    node.run(initial, threads=threads)
    node.run(train, threads=threads)
    x = x0.copy()  # the sequential schedule, from the same start
    for c in range(clocks):
        write, read = (0, 1) if c % 2 == 0 else (1, 0)
        values = x[read * half:(read + 1) * half].copy()
        for worker in range(workers):
            keys = own(worker, write)
            x[keys] += _block_update(values, keys, c, worker)
    _emit(node=node.rank, expected=x.tolist(), stats=node.stats()["tables"]["x"])


def cache(node: pskv.Node, threads: int) -> None:
    """Row cache: hits send no message, read-my-writes through it, eviction at the bound; push
    coalescing: many small pushes become one message per flush, values exact."""
    node.table("c", rows=100, dim=2, consistency=pskv.SSP(3), cache=pskv.Cache(rows=8))
    node.table("g", rows=100, dim=2, consistency=pskv.SSP(3), updater=pskv.SGD(lr=0.5),
                     init=pskv.Constant(1.0))
    node.table("p", rows=100, dim=2)  # Async: no cache, no buffer
    other = 1 - node.rank
    remote = np.arange(other * 50, other * 50 + 20)  # rows owned by the other node
    w = node.worker()
    try:
        c, g, p = w.table("c"), w.table("g"), w.table("p")
        w.barrier()
        first = c.pull(remote[:4]).copy()
        # keys this node sent for the table (messages_sent also counts its server's answers to the other node)
        sent = node.stats()["tables"]["c"]["remote_keys"]
        again = c.pull(remote[:4])  # fresh enough for clock 0: from the cache
        hit_keys = node.stats()["tables"]["c"]["remote_keys"] - sent
        assert np.array_equal(first, again)
        c.push(remote[:4], np.full((4, 2), 2.0))  # buffered, and added to the cached copies
        mine = c.pull(remote[:4])
        assert np.array_equal(mine, first + 2.0), f"read-my-writes through the cache: {mine}"
        # a non-additive updater: the cached copy is dropped and the pull fetches after the push
        g.pull(remote[:2])
        g.push(remote[:2], np.ones((2, 2)))
        assert np.allclose(g.pull(remote[:2]), 0.5), "SGD row after our own push"
        # eviction: 20 distinct remote rows, one by one, through an 8-row cache
        for k in remote:
            c.pull([k])
        st = node.stats()["tables"]["c"]
        assert st["cache_rows"] == 8 and st["cache_evictions"] >= 12, st
        w.barrier()
        # coalescing: 200 pushes of 5 remote keys within one clock
        keys = remote[10:15]

        def sent_keys(name: str) -> int:  # keys this node sent for the table (not replies, not heartbeats)
            return node.stats()["tables"][name]["remote_keys"]

        before = sent_keys("c")
        for i in range(200):
            c.push(keys, np.ones((5, 2)))
        buffered_keys = sent_keys("c") - before
        w.clock()
        before, sent = sent_keys("p"), node.stats()["messages_sent"]
        for i in range(200):
            p.push(keys, np.ones((5, 2)))
        plain_keys, plain_messages = sent_keys("p") - before, node.stats()["messages_sent"] - sent
        w.barrier()
        # every node pushed 200 to the other's keys [10, 15) and 2 to its [0, 4)
        mine_lo = np.arange(node.rank * 50, node.rank * 50 + 20)
        got_c = c.pull(mine_lo)
        assert np.array_equal(got_c[10:15], np.full((5, 2), 200.0)), got_c
        assert np.array_equal(got_c[:4], np.full((4, 2), 2.0)), got_c
        assert np.array_equal(p.pull(mine_lo[10:15]), np.full((5, 2), 200.0))
        st = node.stats()["tables"]["c"]
        _emit(node=node.rank, hit_keys=hit_keys, buffered_keys=buffered_keys, plain_keys=plain_keys,
              plain_messages=plain_messages, flushes=st["flushes"], buffered_rows=st["buffered_rows"],
              flushed_rows=st["flushed_rows"], hits=st["cache_hits"])
        w.barrier()
    finally:
        w.close()


def barrier(node: pskv.Node, threads: int, rounds: int = 20) -> None:
    """Under SSP(5) with a cache, a pull after a barrier sees every update issued before it."""
    node.table("b", rows=64, dim=1, dtype="float64", consistency=pskv.SSP(5))

    def train(w: pskv.Worker) -> None:
        t = w.table("b")
        everyone = np.arange(64)
        for r in range(rounds):
            t.pull(everyone)  # fills the cache with copies that SSP(5) would let us keep
            t.push(everyone, np.ones((64, 1)))
            w.barrier()
            got = t.pull(everyone)[:, 0]
            want = (r + 1) * w.num_nodes * threads
            assert (got == want).all(), f"round {r}: {got[:4]} != {want}"
            w.barrier()

    node.run(train, threads=threads)
    _emit(node=node.rank, ok=True)


if __name__ == "__main__":
    from scenarios import main  # this file's folder is on sys.path when it runs as a script

    main(globals())
