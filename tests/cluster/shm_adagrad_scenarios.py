"""Node program of tests/cluster/test_shm_adagrad.py: `python shm_adagrad_scenarios.py`.

Node 0's one worker pushes seeded Adagrad gradients, keys with duplicates across both nodes' ranges
(a batch of thousands and a small one, as KGE pushes), with shared memory on; node 1 only waits.
The table must equal, bit for bit, one unshared shard that took the same pushes in one process.
"""

from __future__ import annotations

import numpy as np

import pskv
from pskv import updaters
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, as_init

ROWS, DIM, STEPS = 3000, 8, 40


def _batches():
    rng = np.random.default_rng(7)
    for s in range(STEPS):
        n = 5000 if s % 2 else 37  # (below WHOLE_FROM distinct keys both: the row kernels)
        keys = rng.integers(0, ROWS, n).astype(np.int64)
        yield keys, rng.normal(0, 1, (n, DIM)).astype(np.float32)


def main() -> None:
    with pskv.init() as node:
        node.table("g", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1), init=0.5)

        def train(w: pskv.Worker) -> None:
            if w.rank == 0:
                g = w.table("g")
                for keys, grads in _batches():
                    g.push(keys, grads).wait()
            w.barrier()
            if w.rank == 0:
                got = w.table("g").pull(np.arange(ROWS))
                spec = TableSpec("ref", ROWS, DIM, np.dtype(np.float32), updaters.get(pskv.Adagrad(lr=0.1)),
                                 as_init(0.5))
                ref = Shard(spec, 0, ROWS, rank=0)
                for keys, grads in _batches():
                    ref.push(keys, grads)
                want = np.empty((ROWS, DIM), np.float32)
                ref.pull(np.arange(ROWS), want)
                st = node.catalog.get("g")
                print(f"adagrad equal {np.array_equal(got, want)} shared {st.shared_keys > 0} "
                      f"remote {st.remote_keys}", flush=True)
            w.barrier()

        node.run(train, threads=1)


if __name__ == "__main__":
    main()
