"""Started by tests/cluster/test_launchers.py under a fake srun, a fake Indexed Job or Ray: pskv.init()
finds the cluster from the launcher's variables alone; each node pushes rank + 1 to every row."""

import sys

import numpy as np

import pskv

with pskv.init() as node:
    node.table("t", rows=8, dim=1)
    worker = node.worker()
    worker.table("t").push(np.arange(8), np.full((8, 1), node.rank + 1.0, np.float32)).wait()
    worker.barrier()
    rows = worker.table("t").pull(np.arange(8))[:, 0].tolist()
    print(f"rank {node.rank} of {node.num_nodes} at {node.config.coordinator}: {rows}", flush=True)
    want = [node.num_nodes * (node.num_nodes + 1) / 2] * 8  # 1 + 2 + ... + N, exact in float32
    worker.close()
if rows != want:
    sys.exit(f"the rows are {rows}, not {want}: the sum of every node's pushes")
