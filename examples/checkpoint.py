"""Save a table, start a new cluster from it, and read it without any cluster.

    python examples/checkpoint.py /tmp/ckpt                       # 1 node: save, restore, read
    pskv launch -n 2 -- python examples/checkpoint.py /tmp/ckpt   # 2 nodes save; then
    pskv launch -n 3 --restore /tmp/ckpt -- python examples/checkpoint.py /tmp/ckpt   # 3 restore
"""

import os
import sys

import numpy as np

import pskv

directory = sys.argv[1] if len(sys.argv) > 1 else "checkpoints"
spec = dict(rows=1000, dim=8, updater=pskv.Adagrad(lr=0.1))

if not os.environ.get("PSKV_RESTORE"):
    with pskv.init() as node:                                 # train a little, then save
        emb = node.table("emb", **spec)
        rng = np.random.default_rng(node.rank)
        for _ in range(100):
            keys = rng.choice(1000, 32, replace=False)
            emb.push(keys, rng.normal(size=(32, 8)).astype(np.float32))
        info = node.checkpoint(directory, keep=3, extra={"epoch": 1})  # every node calls it
        print(f"node {node.rank}: saved {info.path.name} (step {info.step})")

if os.environ.get("PSKV_RESTORE") or "PSKV_COORDINATOR" not in os.environ:
    with pskv.init(restore=directory) as node:                # a new cluster from the newest checkpoint
        emb = node.table("emb", **spec)                       # the same spec: its rows and state come back
        print(f"node {node.rank}/{node.num_nodes}: restored, extra {node.restored}")

tables = pskv.load_checkpoint(directory)                      # a plain process: numpy arrays
emb = tables["emb"]
print(f"{emb.values.shape} values, state {sorted(emb.state)}, mean |row| {np.abs(emb.values).mean():.4f}")
