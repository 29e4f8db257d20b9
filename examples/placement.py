"""Placement (Lapse / NuPS): relocation, replication of hot keys, sampling access, on a skewed workload.

    python examples/placement.py                         # 1 node
    pskv launch -n 2 -- python examples/placement.py    # 2 nodes: each localizes its part, hot keys everywhere
"""
import numpy as np
import pskv

rows, dim = 10_000, 8
counts = np.bincount(np.random.default_rng(0).zipf(1.5, 200_000) % rows, minlength=rows).astype(float)

with pskv.init() as node:
    t = node.table("emb", rows=rows, dim=dim,
                   placement=pskv.Relocate(location_caches=True),                        # keys move to their users
                   replicate=pskv.Replicate(hottest=100, frequencies=counts),            # hot keys on every node
                   sampling=pskv.Sampling(counts ** 0.75 + 1, scheme="pool", reuse=4))   # negatives, localized ahead
    w = node.worker()
    emb = w.table("emb")
    mine = np.arange(node.rank, rows, node.num_nodes)          # the rows this node trains
    emb.localize(mine).wait()                                  # pre-localize them: every access below is local
    local, _ = emb.pull_if_local(mine)
    w.barrier()                                                # (then the others' sampling may take some)
    h = emb.prepare_sample(1_000)                              # 1,000 draws: 250 keys localized, each used 4 times
    drawn = 0
    while True:
        keys, values = emb.pull_sample(h, 100)
        if not len(keys):
            break
        emb.push(keys, np.ones((len(keys), dim), np.float32)).wait()
        drawn += len(keys)
    emb.finish_sample(h)
    w.barrier()
    stats = node.stats()["tables"]["emb"]
    print(f"node {node.rank}: {int(local.sum())} of {len(mine)} rows local, {drawn} sampled, "
          f"{stats['localizes']} localized")
    w.barrier()
