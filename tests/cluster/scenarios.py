"""Node programs for the cluster and fault tests: `python scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values
itself and exits non-zero (with a traceback) when an assertion fails. The tests check the exit
status and the lines the nodes print. Everything is seeded, so every node can compute the
expected result of the whole cluster locally.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import pskv

ROWS = 1000


def _updates(rank: int, thread: int, step: int, dim: int, n: int = 16):
    """The keys and rows that (rank, thread) pushes at `step`: overlapping, with duplicates."""
    rng = np.random.default_rng([rank, thread, step])
    keys = rng.integers(0, ROWS, n)
    keys[-1] = keys[0]  # always one duplicate key
    vals = rng.integers(-3, 4, (n, dim)).astype(np.float32)  # small integers: float32 sums are exact
    return keys, vals


def sums(node: pskv.Node, threads: int, steps: int = 1500) -> None:
    """Thousands of concurrent async pushes from every thread of every node end in exact sums."""
    node.table("a", rows=ROWS, dim=3)
    node.table("b", rows=ROWS, dim=1, dtype="float64", init=pskv.Constant(2.0))
    expected = np.zeros((ROWS, 3))  # every push of every thread of every node, once per node
    for r in range(node.num_nodes):
        for t in range(threads):
            for step in range(steps):
                keys, vals = _updates(r, t, step, 3)
                np.add.at(expected, keys, vals)

    def train(w: pskv.Worker) -> None:
        a, b = w.table("a"), w.table("b")
        for step in range(steps):
            keys, vals = _updates(w.rank, w.thread, step, 3)
            a.push(keys, vals)
            b.push(keys, vals[:, :1].astype(np.float64))
            if step % 100 == 0:
                a.pull_async(keys)  # reads in flight with the pushes
        w.barrier()
        order = np.random.default_rng(w.thread).permutation(ROWS)
        assert np.array_equal(a.pull(order), expected[order]), "table a: sums differ"
        assert np.array_equal(b.pull(np.arange(ROWS))[:, 0], expected[:, 0] + 2.0), "table b: sums differ"
        w.barrier()

    node.run(train, threads=threads)
    print(f"sums ok node={node.rank} stats={node.stats()['tables']['a']}")


def semantics(node: pskv.Node, threads: int) -> None:
    """Pull after a waited push, set (last wins), duplicates in pulls and pushes, barriers."""
    t = node.table("s", rows=ROWS, dim=2, init=pskv.Constant(1.0))

    def work(w: pskv.Worker) -> None:
        s = w.table("s")
        me = w.rank * threads + w.thread
        # pull-after-waited-push on a key owned by the next node
        key = ((w.rank + 1) % w.num_nodes) * (ROWS // w.num_nodes) + me
        s.push([key], [[5.0, 7.0]]).wait()
        assert np.array_equal(s.pull([key]), [[6.0, 8.0]])
        w.barrier()
        # duplicates: a pull returns a row per key, in order; a push sums duplicate rows
        keys = np.array([999, 0, 999, 500, 0, 0])
        s.push(keys, np.ones((6, 2))).wait()
        w.barrier()
        total = w.num_nodes * threads
        got = s.pull(keys)
        assert np.array_equal(got[:, 0], [1 + 2 * total, 1 + 3 * total, 1 + 2 * total, 1 + total,
                                          1 + 3 * total, 1 + 3 * total]), got
        w.barrier()
        # set overwrites; with duplicate keys in one call the last one wins
        if me == 0:
            s.set([10, 990, 10], [[1, 1], [2, 2], [3, 3]]).wait()
        w.barrier()
        assert np.array_equal(s.pull([990, 10]), [[2, 2], [3, 3]])
        # barrier rounds: every worker increments a counter row per round
        for rnd in range(5):
            s.push([700 + rnd], [[1.0, 0.0]])
            w.barrier()
            assert s.pull([700 + rnd])[0, 0] == 1 + total, f"round {rnd}"

    node.run(work, threads=threads)
    assert t.pull([990])[0, 0] == 2.0
    print(f"semantics ok node={node.rank}")


def _clip_rule(rows, updates, state):
    state[:, 0] += 1
    rows -= 0.5 * np.clip(updates, -1.0, 1.0)


UPDATERS = {
    "assign": lambda: "assign",
    "sgd": lambda: pskv.SGD(lr=0.1),
    "adagrad": lambda: pskv.Adagrad(lr=0.1, initial_accumulator=0.1),
    "adam": lambda: pskv.Adam(lr=0.05),
    "custom": lambda: pskv.updaters.Custom(_clip_rule, state_width=1, name="clip"),
}


def _reference(name: str, w: np.ndarray, keys: np.ndarray, g: np.ndarray, st: dict) -> None:
    """Apply updater `name` to float64 rows `w` with numpy (duplicates summed first)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    gs = np.zeros((len(uniq), w.shape[1]))
    np.add.at(gs, inv, g)
    for k, gk in zip(uniq, gs):
        if name == "assign":
            w[k] = gk
        elif name == "sgd":
            w[k] -= 0.1 * gk
        elif name == "adagrad":
            acc = st.setdefault(k, np.full(w.shape[1], 0.1))
            acc += gk * gk
            w[k] -= 0.1 * gk / (np.sqrt(acc) + 1e-10)
        elif name == "adam":
            m, v, t = st.get(k, (np.zeros(w.shape[1]), np.zeros(w.shape[1]), 0))
            t += 1
            m = 0.9 * m + 0.1 * gk
            v = 0.999 * v + 0.001 * gk * gk
            st[k] = (m, v, t)
            w[k] -= 0.05 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        elif name == "custom":
            w[k] -= 0.5 * np.clip(gk, -1.0, 1.0)


def updaters(node: pskv.Node, threads: int, rounds: int = 6) -> None:
    """Every updater over the network equals its numpy reference, on single and duplicate keys."""
    init = pskv.Uniform(-1, 1, seed=3)
    for name, make in UPDATERS.items():
        node.table(name, rows=ROWS, dim=4, updater=make(), init=init)

    def work(w: pskv.Worker) -> None:
        for name in UPDATERS:
            t = w.table(name)
            ref = t.pull(np.arange(ROWS)).astype(np.float64)
            w.barrier()  # nobody pushes before everyone has its reference copy
            state: dict = {}
            for rnd in range(rounds):
                rng = np.random.default_rng([rnd, 7])
                keys = rng.integers(0, ROWS, 64)
                keys[:8] = keys[8:16]  # duplicates, spread over every node's range
                g = rng.normal(size=(64, 4)).astype(np.float32)
                if (w.rank, w.thread) == (rnd % w.num_nodes, 0):
                    t.push(keys, g).wait()
                _reference(name, ref, keys, g, state)
                w.barrier()
            got = t.pull(np.arange(ROWS))
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=name)

    node.run(work, threads=threads)
    print(f"updaters ok node={node.rank}")


def failure(node: pskv.Node, threads: int, victim: int, how: str) -> None:
    """Node `victim` dies (SIGKILL) or hangs (SIGSTOP); the others must raise NodeFailure in time."""
    t = node.table("f", rows=ROWS, dim=1)
    w = node.worker()
    w.barrier()
    if node.rank == victim:
        print("victim ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        time.sleep(60)
    start = time.monotonic()
    try:
        for _ in range(100_000):  # bounded: pulls keys of every node until the failure shows up
            t.pull(np.arange(0, ROWS, 7))
            time.sleep(0.001)
        print("no failure seen")
        sys.exit(2)
    except pskv.NodeFailure as exc:
        print(f"NodeFailure node_id={exc.node_id} after={time.monotonic() - start:.2f} msg={exc}", flush=True)
        sys.exit(17)


def main(scenarios: dict | None = None) -> None:
    """Run scenario argv[1] of `scenarios` (default: this module's) with argv[2:] (digits as ints)."""
    name, args = sys.argv[1], [int(a) if a.isdigit() else a for a in sys.argv[2:]]
    node = pskv.init()
    try:
        (scenarios or globals())[name](node, node.config.threads, *args)
    except pskv.NodeFailure as exc:
        print(f"NodeFailure node_id={exc.node_id} msg={exc}", flush=True)
        sys.exit(17)
    node.shutdown()


if __name__ == "__main__":
    main()
