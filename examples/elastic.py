"""A node joins a running cluster and takes its share of the table while the others train.

    pskv launch -n 2 -- python examples/elastic.py        # prints the coordinator's HOST:PORT; then
    pskv launch -n 1 --join HOST:PORT -- python examples/elastic.py
"""

import time

import numpy as np
import pskv

with pskv.init() as node:                  # 2 nodes train until a third joins (at most a minute)
    node.table("emb", rows=1000, dim=8, updater=pskv.Adagrad(lr=0.1))  # the joiner: its share moves here
    worker = node.worker()
    emb = worker.table("emb")
    rng = np.random.default_rng(node.rank)
    deadline = time.monotonic() + 60
    while node.num_nodes < 3 and time.monotonic() < deadline:
        emb.push(rng.choice(1000, 16, replace=False), np.ones((16, 8), np.float32)).wait()
    worker.barrier()                       # a joiner takes part from the first barrier after it came
    owned = int(emb.pull_if_local(np.arange(1000))[0].sum())
    print(f"node {node.rank} of {node.members} owns {owned} rows")
    worker.close()
