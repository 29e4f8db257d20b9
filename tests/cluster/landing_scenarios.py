"""Node programs for the short path of blocking pulls (client.route.Route._pull, net.replybox's
landing, issue 31): `python landing_scenarios.py NAME`.

Node 1 owns the upper half of table "w" (PSKV_SHARED_MEMORY=0, so node 0 reaches it by messages);
node 0 makes the calls and asserts exact rows; node 1 only serves. Row k starts as k * 1.0 in
every column, pushes add small integers: float32 sums are exact.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main

ROWS, DIM = 8_000, 64
UPPER = ROWS // 2  # node 1 owns [UPPER, ROWS)


def landed(node: pskv.Node, threads: int) -> None:
    """Blocking pulls of node 1's keys with out= land their rows in out (more than 64 KiB: 1,000 keys
    x 64 float32), smaller ones and default pulls take the usual path; every row is exact, also after
    pushes, with duplicate keys, and for a pull whose out= is a slice of a larger array."""
    node.table("w", rows=ROWS, dim=DIM, init=pskv.Constant(0.0))
    w = node.worker()
    t = w.table("w")
    if node.rank == 0:
        keys = np.arange(ROWS, dtype=np.int64)
        t.push(keys, np.repeat(keys.astype(np.float32)[:, None], DIM, 1)).wait(60)
    w.barrier(60)
    if node.rank == 0:
        rng = np.random.default_rng(5)
        box = t.ctx.endpoint._transport.reply_box()  # this thread's
        big = 0  # pulls with out= whose reply is more than a packed frame carries: they land
        total = np.zeros(ROWS, np.float64)  # what node 0 pushed after the first rows, per key
        for rnd in range(12):
            n = [1_000, 10, 3_000, 257][rnd % 4]
            k = rng.integers(UPPER, ROWS, n)  # duplicates allowed
            want = np.repeat((k + total[k]).astype(np.float32)[:, None], DIM, 1)
            out = np.full((n, DIM), -1.0, np.float32)
            got = t.pull(k, out=out, timeout=60)
            assert got is out and np.array_equal(out, want), (rnd, n)
            assert np.array_equal(t.pull(k, timeout=60), want), (rnd, n)  # default: adopted or copied
            wider = np.full((n + 2, DIM), -1.0, np.float32)
            t.pull(k, out=wider[1:-1], timeout=60)  # a C-contiguous slice of a larger array
            assert np.array_equal(wider[1:-1], want) and (wider[0] == -1).all() and (wider[-1] == -1).all()
            big += 2 if n * DIM * 4 > 64 << 10 else 0
            add = rng.integers(UPPER, ROWS, 500)
            t.push(add, np.ones((500, DIM), np.float32)).wait(60)
            np.add.at(total, add, 1.0)
        assert big == 18 and box.landed == big, (big, box.landed)  # (default pulls adopt or copy: never land)
        # a mixed pull (both nodes' keys) and one of local keys: not the short path, same rows
        k = np.array([3, UPPER + 3, 5, ROWS - 1], np.int64)
        want = np.repeat((k + total[k]).astype(np.float32)[:, None], DIM, 1)
        assert np.array_equal(t.pull(k, timeout=60), want)
        print("landed ok", flush=True)
    w.barrier(60)
    w.close()


if __name__ == "__main__":
    main(globals())
