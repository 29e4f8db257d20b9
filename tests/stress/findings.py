"""Minimal reproductions of what the stress rounds found: `python findings.py NAME` on every node.

Each scenario exits non-zero (AssertionError) while its bug is there; test_stress.py runs them as
regression tests (all three are fixed). Their docstrings say what went wrong.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

import pskv


def replica_cache(node: pskv.Node) -> None:
    """Finding 1 (fixed in 7083ee9): on a BSP table with replicate=KEYS, a pull put a replicated row that
    this node does not manage into the row cache; the worker's push updated the replica, not the copy,
    and its next pull in the same clock returned the copy without the push."""
    node.table("t", rows=10, dim=1, consistency=pskv.BSP(), replicate=pskv.Replicate(keys=[0, 9]))

    def work(w: pskv.Worker) -> None:
        t = w.table("t")
        key = 9 if node.rank == 0 else 0  # replicated, managed by the other node
        before = t.pull([key])[0, 0]
        t.push([key], [[1.0]])
        after = t.pull([key])[0, 0]
        local = t.pull_if_local([key])[1][0, 0]
        w.barrier()
        assert after == before + 1, f"node {node.rank}: pull after own push of replicated key {key} gives " \
                                    f"{after} (before {before}, pull_if_local {local})"

    node.run(work, threads=1)


def cache_race(node: pskv.Node, pushes: int = 1500) -> None:
    """Finding 2 (fixed in 7083ee9): under SSP with 3 threads per node, each thread pushes 1 to its own
    column of remote rows and pulls them; a pull must include the thread's own pushes (read-my-writes),
    but the shared row cache kept copies that missed a push made while another thread's fetch was under way."""
    threads = 3
    node.table("t", rows=8, dim=threads, consistency=pskv.SSP(3))
    stale = []

    def work(w: pskv.Worker) -> None:
        t = w.table("t")
        remote = np.arange(4, 8) if node.rank == 0 else np.arange(0, 4)  # managed by the other node
        mine = np.zeros(8)  # this thread's pushes per row
        rng = np.random.default_rng([node.rank, w.thread])
        for i in range(2 * pushes):  # bounded
            keys = rng.choice(remote, 2)
            if rng.random() < 0.5:
                update = np.zeros((2, threads), np.float32)
                update[:, w.thread] = 1
                t.push(keys, update)
                np.add.at(mine, keys, 1)
            else:
                got = t.pull(keys)[:, w.thread]
                if (got < mine[keys]).any():
                    stale.append((w.thread, i, keys.tolist(), got.tolist(), mine[keys].tolist()))
            if i % 7 == 0:
                w.clock()
        w.barrier()

    node.run(work, threads=threads)
    assert not stale, f"node {node.rank}: {len(stale)} pulls missed the thread's own pushes, e.g. " \
                      f"(thread, op, keys, read, own pushes) {stale[:3]}"


def set_then_push(node: pskv.Node, rounds: int = 150) -> None:
    """Finding 3 (fixed in 80518b2): under BSP a worker sets a block of remote rows, then pushes one of
    them; the set goes out on the worker's socket, the push waits in the node's buffer, and another
    thread's pull flushes it on that thread's socket. The push could reach the owner before the set,
    which overwrote it: a lost update (the row stayed at the set value)."""
    block_rows, dim = 2000, 8
    node.table("t", rows=2 * block_rows, dim=dim, consistency=pskv.BSP(), cache=pskv.Cache(rows=0))
    done = [threading.Event() for _ in range(rounds)]
    lost = []

    def work(w: pskv.Worker) -> None:
        t = w.table("t")
        base = (1 - node.rank) * block_rows  # rows of the other node
        block = np.arange(base, base + block_rows)
        for i in range(rounds):
            key = base + (i * 7919) % block_rows
            if w.thread == 0:
                t.set(block, np.full((block_rows, dim), 5.0, np.float32))  # a big message
                t.push([key], np.ones((1, dim), np.float32))  # a small one, buffered
                time.sleep(0.005)  # some work before the next call; meanwhile the other threads pull
                w.wait_all(30)
                done[i].set()
                w.clock()
                w.barrier(30)
                if t.pull([key])[0, 0] != 6.0:
                    lost.append(key)
            else:
                for _ in range(10_000):  # bounded: until the writer is done with this round
                    if done[i].wait(0) or not t.pull([base + 1]).size:  # each pull flushes the buffer
                        break
                w.clock()
                w.barrier(30)

    node.run(work, threads=3)
    assert not lost, f"node {node.rank}: {len(lost)} of {rounds} pushes made after a set were lost, " \
                     f"e.g. rows {lost[:5]}"


def main() -> None:
    node = pskv.init()
    globals()[sys.argv[1]](node)
    print(f"{sys.argv[1]} ok", flush=True)
    node.shutdown()


if __name__ == "__main__":
    main()
