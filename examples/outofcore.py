"""A table larger than its memory budget (Bösen's out-of-core tables): rows in files on disk.

    python examples/outofcore.py                         # 1 node
    pskv launch -n 2 -- python examples/outofcore.py    # 2 nodes, each with its rows in its own files

A 400,000 x 8 float32 table (12.8 MB) with at most 2,000 rows' pages (64 KB) kept in memory per node:
pushes land in memory-mapped files and pages beyond the budget are dropped; the sums are exact.
"""
import tempfile

import numpy as np
import pskv

rows, dim, pushes, batch = 400_000, 8, 100, 250

with pskv.init() as node, tempfile.TemporaryDirectory(prefix="pskv-rows-") as path:
    table = node.table("big", rows=rows, dim=dim, storage="disk", cache_rows=2_000, path=path)
    worker = node.worker()
    rng = np.random.default_rng(node.rank)
    for _ in range(pushes):                              # random rows all over the table
        table.push(rng.integers(0, rows, batch), np.ones((batch, dim), np.float32)).wait()
    worker.barrier()                                     # every node's pushes are in
    total = sum(float(table.pull(np.arange(lo, min(lo + 20_000, rows))).sum()) for lo in range(0, rows, 20_000))
    disk = node.stats()["tables"]["big"]
    print(f"node {node.rank}: sum {total:.0f} of {pushes * batch * dim * node.num_nodes} pushed; "
          f"{disk['disk_file_bytes'] >> 10} KiB of files, peak {disk['disk_peak_bytes'] >> 10} KiB resident")
    worker.barrier()                                     # nobody leaves while another still pulls
