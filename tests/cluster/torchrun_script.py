"""Started by torchrun in tests/cluster/test_torch.py: pskv.init() finds the cluster from torchrun's variables."""

import numpy as np

import pskv

with pskv.init() as node:
    node.table("t", rows=8, dim=1)
    worker = node.worker()
    worker.table("t").push(np.arange(8), np.full((8, 1), node.rank + 1.0, np.float32)).wait()
    worker.barrier()
    print(f"rank {node.rank} of {node.num_nodes}: {worker.table('t').pull(np.arange(8))[:, 0].tolist()}", flush=True)
    worker.close()
