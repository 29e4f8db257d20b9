"""Node programs for tests/cluster/test_slices.py (client.slices): `python slices_scenarios.py NAME`.

`adagrad`: node 0's one worker pushes seeded Adagrad gradients (keys with duplicates, unsorted, across
every node's range: summed here, then sent as one slice per range) and, every other step, pulls sorted
keys of every range (one slice each, into `out` or a fresh array), with exchange and without; the other
nodes only serve. The table must equal, bit for bit, one unshared shard that took the same pushes in one
process, and each pull the rows that shard had then. `sums`: every worker of every node pushes ones to
sorted keys of every range and pulls sorted keys; exact totals after a barrier."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pskv
from pskv import updaters
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, as_init

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main  # noqa: E402

ROWS, DIM, STEPS = 3000, 8, 40


def _steps():
    rng = np.random.default_rng(7)
    for s in range(STEPS):
        n = 700 if s % 2 else 37
        keys = rng.integers(0, ROWS, n).astype(np.int64)
        yield s, keys, rng.normal(0, 1, (n, DIM)).astype(np.float32), np.unique(rng.integers(0, ROWS, 300))


def adagrad(node: pskv.Node, threads: int) -> None:
    node.table("g", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1), init=0.5)

    def train(w: pskv.Worker) -> None:
        if w.rank == 0:
            g = w.table("g")
            spec = TableSpec("ref", ROWS, DIM, np.dtype(np.float32), updaters.get(pskv.Adagrad(lr=0.1)), as_init(0.5))
            ref = Shard(spec, 0, ROWS, rank=0)
            for s, keys, grads, pulls in _steps():
                ref.push(keys, grads)
                want = np.empty((len(pulls), DIM), np.float32)
                ref.pull(pulls, want)
                out = np.empty((len(pulls), DIM), np.float32) if s % 4 < 2 else None
                if s % 2:
                    got = g.exchange(keys, grads, pulls, out=out).wait(60)
                else:
                    g.push(keys, grads).wait(60)
                    got = g.pull(pulls, out=out)
                assert out is None or got is out
                assert np.array_equal(got, want), (s, np.flatnonzero((got != want).any(1))[:10])
            every = np.empty((ROWS, DIM), np.float32)
            ref.pull(np.arange(ROWS), every)
            assert np.array_equal(g.pull(np.arange(ROWS)), every)
            st = node.catalog.get("g")
            print(f"adagrad ok remote={st.remote_keys} fused={node.endpoint.fused}", flush=True)
        w.barrier()

    node.run(train, threads=1)


def sums(node: pskv.Node, threads: int) -> None:
    node.table("a", rows=ROWS, dim=DIM)
    workers = node.num_nodes * threads
    total = np.zeros(ROWS)
    for me in range(workers):
        for s in range(STEPS):
            total[np.unique(np.random.default_rng([me, s]).integers(0, ROWS, 400))] += 1

    def train(w: pskv.Worker) -> None:
        a, me = w.table("a"), w.rank * threads + w.thread
        for s in range(STEPS):
            keys = np.unique(np.random.default_rng([me, s]).integers(0, ROWS, 400))
            a.push(keys, np.ones((len(keys), DIM), np.float32))
            got = a.pull(keys[::3])[:, 0]
            assert (got >= 1).all() and (got <= total[keys[::3]]).all(), s
        w.barrier()
        assert np.array_equal(a.pull(np.arange(ROWS))[:, 0], total)

    node.run(train, threads=threads)
    st = node.catalog.get("a")
    print(f"sums ok local={st.local_keys} shared={st.shared_keys} remote={st.remote_keys}", flush=True)


if __name__ == "__main__":
    main(globals())
