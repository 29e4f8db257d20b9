"""Quickstart: a sparse linear model trained by every worker thread of every node.

    python examples/quickstart.py                              # a private 1-node cluster
    pskv launch -n 2 --threads 2 -- python examples/quickstart.py
"""

import numpy as np

import pskv

FEATURES, DIM = 1_000, 1

with pskv.init() as node:  # joins the cluster `pskv launch` describes, or starts a 1-node one
    weights = node.table("weights", rows=FEATURES, dim=DIM, updater=pskv.SGD(lr=0.5))  # collective

    rng = np.random.default_rng(0)
    true_w = rng.normal(size=FEATURES).astype(np.float32)

    def train(w: pskv.Worker) -> None:
        table = w.table("weights")
        rng = np.random.default_rng([w.rank, w.thread])
        for step in range(2_000):
            keys = rng.choice(FEATURES, 64, replace=False)  # a sparse example touches 64 features
            x = rng.normal(size=64).astype(np.float32)
            y = x @ true_w[keys]
            pred = x @ table.pull(keys)[:, 0]  # blocking pull: (64, 1) float32
            table.push(keys, ((pred - y) * x / 64)[:, None])  # async: server-side SGD applies it
        w.barrier()  # every push of every worker is applied after this

    node.run(train, threads=node.config.threads)
    error = np.abs(weights.pull(np.arange(FEATURES))[:, 0] - true_w).mean()
    if node.rank == 0:
        print(f"{node.num_nodes} node(s): mean |w - w_true| = {error:.3f} (started at {np.abs(true_w).mean():.3f})")
