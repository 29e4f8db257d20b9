"""Node programs for tests/cluster/test_server_gil.py: `python server_gil_scenarios.py NAME [ARGS]`.

Requests storm a node's server from every thread of every node with many outstanding at once, so
the server takes bursts of them and serves runs of plain requests in one step (server.serve,
issue 31). Everything is seeded; every node computes the expected rows itself and asserts them.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
import scenarios  # noqa: E402

ROWS = 4000
WINDOW = 8  # requests outstanding per thread


def _batch(rank: int, thread: int, step: int):
    """Keys (with duplicates, both nodes' ranges) and small-integer rows that (rank, thread) pushes at `step`."""
    rng = np.random.default_rng([rank, thread, step])
    n = 1000 if step % 2 == 0 else 10
    keys = rng.integers(0, ROWS, n)
    keys[-1] = keys[0]
    return keys, rng.integers(-3, 4, (n, 2)).astype(np.float32)


def storm(node: pskv.Node, threads: int, steps: int = 200) -> None:
    """Pushes of 1,000 and 10 keys with pulls between, WINDOW outstanding per thread: exact sums.
    Then per-sender order: a thread's unwaited push, pull, set, pull of its own keys see each other
    exactly in the order sent."""
    node.table("a", rows=ROWS, dim=2)
    node.table("o", rows=ROWS, dim=1, dtype="float64")
    expected = np.zeros((ROWS, 2))
    for r in range(node.num_nodes):
        for t in range(threads):
            for step in range(steps):
                keys, vals = _batch(r, t, step)
                np.add.at(expected, keys, vals)

    def work(w: pskv.Worker) -> None:
        a, o = w.table("a"), w.table("o")
        pending: collections.deque = collections.deque()
        for step in range(steps):
            keys, vals = _batch(w.rank, w.thread, step)
            pending.append(a.push(keys, vals))
            pending.append(a.pull_async(keys[:10]))
            while len(pending) > WINDOW:
                pending.popleft().wait()
        while pending:
            pending.popleft().wait()
        # order: keys of the other node's range, one per worker, only this worker writes them
        me = w.rank * threads + w.thread
        add_key, set_key = (1 - w.rank) * (ROWS // 2) + 2 * me, (1 - w.rank) * (ROWS // 2) + 2 * me + 1
        reads = []
        for i in range(1, 101):
            o.push([add_key], [[1.0]])
            reads.append((i, o.pull_async([add_key])))
            o.set([set_key], [[float(i)]])
            reads.append((i, o.pull_async([set_key])))
        for i, future in reads:
            got = float(future.wait()[0, 0])
            assert got == i, f"worker {me}: read {got} after write {i} of its own key"
        w.barrier()
        order = np.random.default_rng(me).permutation(ROWS)
        assert np.array_equal(a.pull(order), expected[order]), "table a: sums differ"
        w.barrier()

    node.run(work, threads=threads)
    print(f"storm ok node={node.rank} runs={node.server.runs} served={node.server.requests}", flush=True)


if __name__ == "__main__":
    scenarios.main(globals())
