"""Sparse tables, range operations and filters (Li et al.'s parameter server), on any node count:

    python examples/sparse.py
    pskv launch -n 2 -- python examples/sparse.py

Hashed features (any uint64) index a sparse table whose rows appear on first push; each worker
trains a logistic regression on its examples with push_pull (gradients out, fresh weights back
in one exchange) through the server-side proximal updater (L1 soft-thresholding), with the KKT
filter and the wire filters on; then pull_range reads the whole model back.
"""

import hashlib

import numpy as np

import pskv

L1, LR, STEPS, BATCH = 5e-3, 8.0, 300, 256  # (with batches of 64, SGD's last weights were so noisy that a
# noise feature passed 0.5 in one 2-node CI run; with 256 they stayed below 0.06 in 9 runs, informative ones >= 0.42)


def feature(name: str) -> int:  # a 64-bit hashed feature key
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


WORDS = [f"word{i}" for i in range(500)] + ["bias"]  # every example has the bias feature
KEYS = np.array([feature(w) for w in WORDS], np.uint64)
TRUE = np.where(np.arange(501) < 25, 3.0, 0.0)  # 25 informative features, the rest noise
TRUE[-1] = -2.0

with pskv.init() as node:
    node.table("w", rows=None, dim=1, key_space="uint64", updater=pskv.updaters.Prox(lr=LR, l1=L1))
    filters = pskv.filters.parse("kkt,keycache,zstd,fp16")

    def train(w: pskv.Worker) -> None:
        table, rng = w.table("w"), np.random.default_rng([w.rank, w.thread])
        chain = pskv.filters.Chain(filters, l1=L1)
        weights = np.zeros(len(KEYS))  # this worker's copy of every weight
        for _ in range(STEPS):
            x = np.zeros((BATCH, len(KEYS)))
            np.put_along_axis(x, rng.integers(0, len(KEYS) - 1, (BATCH, 8)), 1.0, axis=1)  # an example: 8 features
            x[:, -1] = 1.0
            y = (rng.random(BATCH) < 1 / (1 + np.exp(-(x @ TRUE)))).astype(float)
            p = 1 / (1 + np.exp(-(x @ weights)))
            grad = x.T @ (p - y) / BATCH
            cols = np.flatnonzero(x.any(axis=0))
            cols, g = chain.select(KEYS, cols, grad[cols], weights)
            if len(cols):
                fresh = table.push_pull(KEYS[cols], g[:, None], filters=chain.wire).wait()
                weights[cols] = fresh[:, 0]
        w.barrier()

    node.run(train)
    reader = node.worker()
    keys, rows = reader.table("w").pull_range(0, 2**64)  # every weight written, sorted by key
    reader.close()
    if node.rank == 0:
        found = {WORDS[i] for i in np.flatnonzero(np.isin(KEYS, keys[rows[:, 0] > 0.25]))} - {"bias"}
        hits = len(found & set(WORDS[:25]))
        print(f"{node.num_nodes} node(s): {len(keys)} weights written, {int((rows != 0).sum())} non-zero; "
              f"{hits} of the 25 informative features found, {len(found) - hits} others")
