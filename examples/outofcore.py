"""A table larger than its memory budget (Bösen's out-of-core tables): rows in files on disk.

    python examples/outofcore.py                         # 1 node
    pskv launch -n 2 -- python examples/outofcore.py    # 2 nodes, each with its rows in its own files

A 1,000,000 x 8 float32 table (32 MB) with at most 10,000 rows' pages (320 KB) kept in memory per
node: pushes land in memory-mapped files and pages beyond the budget are dropped; the sums are exact.
"""
import tempfile

import numpy as np
import pskv

rows, dim, pushes, batch = 1_000_000, 8, 100, 1_000

with pskv.init() as node, tempfile.TemporaryDirectory(prefix="pskv-rows-") as path:
    table = node.table("big", rows=rows, dim=dim, storage="disk", cache_rows=10_000, path=path)
    worker = node.worker()
    rng = np.random.default_rng(node.rank)
    for _ in range(pushes):                              # random rows all over the table
        table.push(rng.integers(0, rows, batch), np.ones((batch, dim), np.float32)).wait()
    worker.barrier()                                     # every node's pushes are in
    total = sum(float(table.pull(np.arange(lo, min(lo + 100_000, rows))).sum()) for lo in range(0, rows, 100_000))
    disk = node.stats()["tables"]["big"]
    print(f"node {node.rank}: sum {total:.0f} of {pushes * batch * dim * node.num_nodes} pushed; "
          f"{disk['disk_file_bytes'] >> 20} MiB of files, peak {disk['disk_peak_bytes'] >> 20} MiB resident")
    worker.barrier()                                     # nobody leaves while another still pulls
