"""Node programs for tests/cluster/test_exchange.py (Table.exchange): `python exchange_scenarios.py NAME KIND`.

Every worker of every node exchanges STEPS times: it pushes 1.0 to its `_pushes` (keys only it pushes:
k % W == its index, with duplicates) and pulls `_pulls` (any keys, some of its own). Read-my-writes:
a pulled row of its own key is exactly the count of its pushes to that key so far, this one included
(`exact`; under relocation only at most that: a key that lands here while its push is on the way is read
before the push reaches it, as with a push and a pull); any other row at most the key's final total. After
a barrier every row is its final total exactly. Each node prints `NAME ok` and how many messages it sent
fused (net.endpoint).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main  # noqa: E402

ROWS, DIM, STEPS = 600, 2, 120
SPREAD = 1 << 54  # a sparse table's key k is k * SPREAD: its keys fall in every node's range of the uint64 space


def _pushes(me: int, workers: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([me, step, 1])
    return rng.choice(np.arange(me, ROWS, workers), 20)  # with duplicates


def _pulls(me: int, workers: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([me, step, 2])
    return np.concatenate([rng.integers(0, ROWS, 30), _pushes(me, workers, step)[:5]])


def _totals(workers: int) -> np.ndarray:
    """(ROWS,) the pushes of every worker to each key."""
    total = np.zeros(ROWS)
    for me in range(workers):
        for s in range(STEPS):
            np.add.at(total, _pushes(me, workers, s), 1.0)
    return total


def _declare(node: pskv.Node, kind: str):
    if kind == "sparse":
        return node.table("x", rows=None, dim=DIM, key_space="uint64")
    extra = {"dense": {}, "replicate": {"replicate": pskv.Replicate(keys=np.arange(0, ROWS, 7))},
             "ssp": {"consistency": pskv.SSP(2)}, "relocate": {"placement": pskv.Relocate()}}[kind]
    return node.table("x", rows=ROWS, dim=DIM, **extra)


def exchange(node: pskv.Node, threads: int, kind: str = "dense") -> None:
    """Every worker exchanges; read-my-writes on every step, exact totals after a barrier."""
    _declare(node, kind)
    workers = node.num_nodes * threads
    total = _totals(workers)
    key = (lambda k: np.asarray(k, np.uint64) * np.uint64(SPREAD)) if kind == "sparse" else (lambda k: k)
    exact = kind != "relocate"

    def train(w: pskv.Worker) -> None:
        t = w.table("x")
        me = w.rank * threads + w.thread
        mine = np.zeros(ROWS)
        for s in range(STEPS):
            pushes, pulls = _pushes(me, workers, s), _pulls(me, workers, s)
            np.add.at(mine, pushes, 1.0)
            if kind == "relocate" and s % 10 == w.rank:
                t.localize(np.unique(pulls))
            out = np.full((len(pulls), DIM), -1, np.float32) if s % 2 else None
            got = t.exchange(key(pushes), np.ones((len(pushes), DIM), np.float32), key(pulls), out=out).wait(60)
            assert out is None or got is out
            own = pulls % workers == me
            seen = got[:, 0]
            assert np.array_equal(seen[own], mine[pulls[own]]) if exact else (seen[own] <= mine[pulls[own]]).all(), \
                (s, pulls[own], seen[own], mine[pulls[own]])
            assert (seen >= 0).all() and (seen <= total[pulls]).all(), (s, pulls, seen)
            if kind == "ssp":
                w.clock()
        if kind == "replicate":  # every node's changes of replicated keys applied everywhere
            w.wait_replica_sync()
        w.barrier()
        final = t.pull(key(np.arange(ROWS)))[:, 0]
        assert np.array_equal(final, total), np.flatnonzero(final != total)[:10]

    node.run(train, threads=threads)
    print(f"exchange ok fused={node.endpoint.fused}", flush=True)


if __name__ == "__main__":
    main(globals())
