"""Node programs for tests/cluster/test_shared_memory.py: `python shm_scenarios.py NAME`.

Every node computes the cluster's expected result itself, asserts it exactly and prints how many
keys it served from memory (its own shard or a co-located node's) and how many it sent."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import pskv

ROWS, DIM, STEPS = 400, 2, 300


def _keys(rank: int, thread: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([rank, thread, step])
    return rng.integers(0, ROWS, 24)  # both nodes' ranges, with duplicates


def _expected(node: pskv.Node, threads: int) -> np.ndarray:
    """(ROWS,) what every thread of every node pushing 1.0 to its `_keys` adds up to."""
    expected = np.zeros(ROWS)
    for r in range(node.num_nodes):
        for t in range(threads):
            for s in range(STEPS):
                np.add.at(expected, _keys(r, t, s), 1.0)
    return expected


def sums(node: pskv.Node, threads: int) -> None:
    """Every thread of every node pushes 1.0 and push_pulls; all end exact, and every node's reads
    see the others' writes. (An Adagrad table takes the same pushes beside it, through the row
    kernels of another rule; its state staying in one place is tests/unit/store/test_shm.py's.)"""
    node.table("a", rows=ROWS, dim=DIM)
    node.table("g", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1))
    expected = _expected(node, threads)

    def train(w: pskv.Worker) -> None:
        a, g = w.table("a"), w.table("g")
        for s in range(STEPS):
            keys = _keys(w.rank, w.thread, s)
            ones = np.ones((len(keys), DIM), np.float32)
            a.push(keys, ones)
            g.push(keys, ones)
            if s % 50 == 0:
                a.push_pull(keys, ones * 0)
        w.barrier()
        got = a.pull(np.arange(ROWS))
        assert np.array_equal(got[:, 0], expected), (got[:5, 0], expected[:5])

    node.run(train, threads=threads)
    st = node.catalog.get("a")
    print(f"sums ok local={st.local_keys} remote={st.remote_keys}", flush=True)


def relocate(node: pskv.Node, threads: int) -> None:
    """Keys move between the nodes (localize) while both push to them through shared memory and
    messages: exact sums, nothing lost in a move."""
    node.table("r", rows=ROWS, dim=1, placement=pskv.Relocate())
    expected = _expected(node, threads)

    def train(w: pskv.Worker) -> None:
        t = w.table("r")
        for s in range(STEPS):
            keys = _keys(w.rank, w.thread, s)
            if s % 10 == w.rank:
                t.localize(np.unique(keys))
            t.push(keys, np.ones((len(keys), 1), np.float32))
        w.barrier()
        got = t.pull(np.arange(ROWS))[:, 0]
        assert np.array_equal(got, expected), np.flatnonzero(got != expected)[:10]

    node.run(train, threads=threads)
    st = node.catalog.get("r")
    print(f"relocate ok local={st.local_keys} remote={st.remote_keys} moved_in={st.shard.relocated_in}", flush=True)


def hold(node: pskv.Node, threads: int) -> None:
    """Declare a table, say where its files are, and wait to be killed."""
    node.table("h", rows=ROWS, dim=DIM)
    print(f"holding pid={os.getpid()} dir={node.store.segments.dir}", flush=True)
    time.sleep(120)


if __name__ == "__main__":
    name = sys.argv[1]
    node = pskv.init()
    try:
        globals()[name](node, node.config.threads)
    finally:
        node.close()
