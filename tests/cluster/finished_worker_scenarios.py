"""Node programs of tests/cluster/test_finished_worker.py: `python finished_worker_scenarios.py NAME`.

Node 1 pushes +1 to 50 rows of node 0's range 200 times without waiting for any push, through
one kind of handle that then finishes (a node.run() worker that returns, a worker that closes,
the main thread's handle); then each node's main thread makes a new worker and calls barrier().
Every node must then read exactly 200 in each of those rows (issue 30, F0): a barrier covers
every push its node issued before it, whichever handle issued it.
"""

from __future__ import annotations

import sys

import numpy as np

import pskv

ROWS = 100  # node 0 manages [0, 50)
KEYS = np.arange(50)
PUSHES = 200


def _check(node: pskv.Node, name: str, how: str) -> None:
    """A new worker's barrier, then an exact read of node 0's 50 rows on every node."""
    w = node.worker()
    w.barrier()
    got = w.table(name).pull(KEYS)[:, 0]
    assert np.array_equal(got, np.full(50, PUSHES, np.float32)), f"{how}: rows {got.tolist()} after the barrier"
    w.barrier()  # nobody pushes to the next table before every node read this one
    w.close()
    print(f"{how} ok node={node.rank} value={int(got[0])}", flush=True)


def _push_all(table) -> None:
    ones = np.ones((len(KEYS), 1), np.float32)
    for _ in range(PUSHES):
        table.push(KEYS, ones)  # never waited for


def _run_returns(node: pskv.Node, name: str) -> None:
    def train(w: pskv.Worker) -> None:
        if w.rank == 1:
            _push_all(w.table(name))

    node.run(train, threads=1)


def _close(node: pskv.Node, name: str) -> None:
    w = node.worker()
    if node.rank == 1:
        _push_all(w.table(name))
    w.close()


def _main_handle(node: pskv.Node, name: str, table) -> None:
    if node.rank == 1:
        _push_all(table)


def handles(node: pskv.Node, threads: int) -> None:
    """Asynchronous tables: node.run() returns, worker.close(), the main thread's handle."""
    for how in ("run", "close", "main"):
        table = node.table(how, rows=ROWS, dim=1)
        if how == "run":
            _run_returns(node, how)
        elif how == "close":
            _close(node, how)
        else:
            _main_handle(node, how, table)
        _check(node, how, how)


def buffered(node: pskv.Node, threads: int) -> None:
    """BSP and SSP tables (node 1's pushes wait in the node's push buffer) through a worker of
    node.run() that returns and through the main thread's handle; a NodeAggregate table whose
    last round two threads of node 1 push and return without pulling."""
    for how, consistency in (("bsp", pskv.BSP()), ("ssp", pskv.SSP(2))):
        table = node.table(how, rows=ROWS, dim=1, consistency=consistency)
        _run_returns(node, how)
        _check(node, how, how)
        main = f"{how}-main"
        table = node.table(main, rows=ROWS, dim=1, consistency=consistency)
        _main_handle(node, main, table)
        _check(node, main, main)
    node.table("agg", rows=ROWS, dim=1, aggregate=pskv.NodeAggregate())

    def rounds(w: pskv.Worker) -> None:
        if w.rank != 1:
            return
        t = w.table("agg")
        ones = np.ones((len(KEYS), 1), np.float32)
        for r in range(PUSHES // 2):  # 2 threads: each round adds 2
            t.push(KEYS, ones)
            if r < PUSHES // 2 - 1:
                t.pull(KEYS)  # the round's result; the last round is pushed and never pulled

    node.run(rounds, threads=2)
    _check(node, "agg", "aggregate")


def main() -> None:
    node = pskv.init()
    globals()[sys.argv[1]](node, node.config.threads)
    node.shutdown()


if __name__ == "__main__":
    main()
