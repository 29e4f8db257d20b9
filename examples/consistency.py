"""The README's consistency example: two threads per node under SSP(1).

    python examples/consistency.py
    pskv launch -n 2 -- python examples/consistency.py
"""

import numpy as np
import pskv

with pskv.init(consistency=pskv.SSP(staleness=1)) as node:
    table = node.table("w", rows=8, dim=1, dtype="float64")

    def train(w: pskv.Worker) -> None:
        t = w.table("w")
        for c in range(5):
            seen = t.pull(np.arange(8))        # holds every update stamped <= c - 2
            t.push([w.thread], np.ones((1, 1)))
            w.clock()                          # never blocks
        w.barrier()                            # afterwards every pull sees every update

    node.run(train, threads=2)
    print(table.pull([0, 1]).ravel())          # [5. 5.]
