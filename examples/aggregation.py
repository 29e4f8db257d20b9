"""Two-level aggregation (mshadow-ps): the node sums its worker threads' pushes, the owner applies one update.

    python examples/aggregation.py                         # 1 node x 2 threads: [-2. -2.]
    pskv launch -n 2 -- python examples/aggregation.py    # 2 nodes x 2 threads: [-5. -5.]
"""
import numpy as np
import pskv

with pskv.init(consistency=pskv.BSP()) as node:       # level 2 follows the table's model
    table = node.table("w", rows=4, dim=1, aggregate=pskv.NodeAggregate(), updater=pskv.SGD(lr=0.5),
                       init=pskv.Constant(1.0))

    def train(w: pskv.Worker) -> None:
        t = w.table("w")
        for step in range(3):
            t.push([0, 1], np.ones((2, 1), np.float32))   # once per key and round
            fut = t.pull_async([0, 1], callback=lambda rows: print("round", step, rows.ravel()))
            fut.wait()                                     # after every local thread pushed

    node.run(train, threads=2)
    print(table.pull([0, 1]).ravel())   # each round: w -= 0.5 * (1 + 1) -> [-2. -2.]
