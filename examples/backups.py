"""Backups: each key range on a chain of B + 1 nodes; the survivors go on when a node dies.

    pskv launch -n 3 --backups 1 -- python examples/backups.py
"""
import numpy as np
import pskv

with pskv.init(backups=1) as node:                  # pskv launch -n 3 --backups 1 -- python this.py
    table = node.table("emb", rows=1000, dim=8, updater=pskv.Adagrad(lr=0.1))
    node.on_membership_change(lambda members: print("members now", members))
    table.push(np.arange(10), np.ones((10, 8), np.float32)).wait()  # on every copy when this returns
    print(node.members)
