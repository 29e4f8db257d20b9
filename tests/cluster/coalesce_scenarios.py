"""Node programs for the coalescing tests (client.coalesce): `python coalesce_scenarios.py NAME`.

Node 1 owns the upper half of table "w" (PSKV_SHARED_MEMORY=0, so node 0 reaches it by messages);
node 0 makes the calls and asserts exact rows; node 1 only serves. Row k starts as k * 1.0 in
every column, pushes add small integers: float32 sums are exact.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main  # noqa: E402

ROWS, DIM = 2_000, 4
UPPER = ROWS // 2  # node 1 owns [UPPER, ROWS)


def _table(node: pskv.Node):
    node.table("w", rows=ROWS, dim=DIM, init=pskv.Constant(0.0))
    w = node.worker()
    t = w.table("w")
    if node.rank == 0:
        keys = np.arange(ROWS, dtype=np.int64)
        t.push(keys, np.repeat(keys.astype(np.float32)[:, None], DIM, 1)).wait(60)
    w.barrier(60)
    return w, t


def _hold(t):
    return t._ctx.endpoint.held(t.spec.table_id, 1)


def _row(k, extra=0.0):
    return np.full(DIM, float(k) + extra, np.float32)


def merged(node: pskv.Node, threads: int) -> None:
    """Many pull_async of remote keys, outstanding together: each gets exactly its rows (duplicates,
    any order, with and without out=, some keys local), and some leave merged."""
    w, t = _table(node)
    if node.rank == 0:
        rng = np.random.default_rng(3)
        calls = []
        for i in range(200):
            n = int(rng.integers(1, 40))
            keys = rng.integers(UPPER, ROWS, n)
            if i % 5 == 0:
                keys[0] = int(rng.integers(0, UPPER))  # one local key: served here, the rest remote
            out = np.full((n, DIM), -1, np.float32) if i % 2 else None
            calls.append((keys, out, t.pull_async(keys, out=out)))
        for keys, out, fut in calls:
            got = fut.wait(60)
            assert out is None or got is out
            assert np.array_equal(got, np.repeat(keys.astype(np.float32)[:, None], DIM, 1)), f"rows of {keys}"
        hold = _hold(t)
        assert hold.merged > 0 and hold.sent < 200, (hold.merged, hold.sent)
        assert len(node.tracker) == 0  # nothing left in flight
        print(f"merged ok sent={hold.sent} merged={hold.merged}", flush=True)
    w.barrier(60)
    w.close()


def ordered(node: pskv.Node, threads: int) -> None:
    """A held pull leaves before the same thread's later push to that node: it never sees the
    push; a pull after the push sees it."""
    w, t = _table(node)
    if node.rank == 0:
        k = np.array([UPPER + 5], np.int64)
        holds = 0
        for step in range(50):
            first = t.pull_async(k)  # sent at once (nothing in flight)
            held = t.pull_async(k)  # held while `first` is in flight
            holds += len(_hold(t).calls)
            t.push(k, np.ones((1, DIM), np.float32))  # the held pull leaves first, then the push
            after = t.pull(k)
            assert np.array_equal(first.wait(60)[0], _row(UPPER + 5, step)), step
            assert np.array_equal(held.wait(60)[0], _row(UPPER + 5, step)), f"a held pull saw a later push at {step}"
            assert np.array_equal(after[0], _row(UPPER + 5, step + 1)), step
        assert holds > 0, "no pull was ever held"  # (one round trip is far longer than two calls)
        print(f"ordered ok held={holds}", flush=True)
    w.barrier(60)
    w.close()


def callbacks(node: pskv.Node, threads: int) -> None:
    """A pull_async with a callback is never held: its callback runs though nobody waits; plain ones
    held behind an in-flight pull leave when it completes, without any wait."""
    w, t = _table(node)
    if node.rank == 0:
        k = np.array([UPPER + 1], np.int64)
        seen: list = []
        done = threading.Event()
        first = t.pull_async(k)
        t.pull_async(k, callback=lambda rows: (seen.append(rows.copy()), done.set()))  # not held
        assert done.wait(30), "a callback-only pull_async was held"
        assert np.array_equal(seen[0][0], _row(UPPER + 1))
        # no wait at all: held ones leave when `first`'s successor lands (bounded by its round trip)
        later = [t.pull_async(k) for _ in range(5)]
        deadline = time.monotonic() + 30
        while not all(f.done() for f in later) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(f.done() for f in later), "held pulls stayed held without a wait"
        assert first.done() and all(np.array_equal(f.wait(0)[0], _row(UPPER + 1)) for f in later)
        print("callbacks ok", flush=True)
    w.barrier(60)
    w.close()


def waiters(node: pskv.Node, threads: int) -> None:
    """A thread that waits on any Future sends its held pulls first; another thread that waits on a
    held pull's Future sends it too."""
    w, t = _table(node)
    if node.rank == 0:
        k = np.array([UPPER + 2], np.int64)
        for _ in range(20):
            a = t.pull_async(k)
            b = t.pull_async(k)  # held
            a.wait(60)
            assert np.array_equal(b.wait(60)[0], _row(UPPER + 2))
        # another thread waits on a held pull of this one
        a = t.pull_async(k)
        b = t.pull_async(k)
        box: list = []
        other = threading.Thread(target=lambda: box.append(b.wait(60)))
        other.start()
        other.join(60)
        assert box and np.array_equal(box[0][0], _row(UPPER + 2)) and a.wait(60) is not None
        print("waiters ok", flush=True)
    w.barrier(60)
    w.close()


if __name__ == "__main__":
    main(globals())
