"""Node programs for tests/cluster/test_backup_records.py: each runs as one node of a cluster with backups.

    python backups_scenarios.py records PUSHES   # node 0 pushes to keys it reads (localized from node 1)

records: 2 nodes, backups=1. Node 0 localizes 10 keys of node 1's range (it becomes their reader,
server.readers) and pushes a 1 to them PUSHES times, up to 50 in flight. Node 0 is also the tail
of node 1's range, so each write passes its reader copy and leaves an id in that copy's record.
Once every push completed, each node waits (up to 60 s) until the low-watermark floors of the
coordinator's TICKs pruned every id kept, and prints `RESULT {"node": R, "kept": [ranges, readers],
"sum": ...}` (node 0: the first column of its keys, which must be PUSHES each).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import pskv


def records(pushes: int) -> None:
    with pskv.init() as node:
        node.table("w", 100, 2)
        worker = node.worker()
        table = worker.table("w")
        worker.barrier()
        keys = np.arange(60, 70, dtype=np.int64)  # of node 1's range [50, 100)
        copies = node.server.backups.copies
        if node.rank == 0:
            table.localize(keys).wait(60)
            assert copies.readers.count() == 10, node.debug_state()
            ones = np.ones((10, 2), np.float32)
            futures = []
            for i in range(pushes):
                futures.append(table.push(keys, ones))
                if len(futures) == 50:
                    for fut in futures:
                        fut.wait(60)
                    futures.clear()
            for fut in futures:
                fut.wait(60)
        worker.barrier()  # every push is on every copy
        deadline = time.monotonic() + 60
        while copies.kept() != (0, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        total = int(table.pull(keys)[:, 0].sum()) if node.rank == 0 else 0
        print("RESULT " + json.dumps({"node": node.rank, "kept": list(copies.kept()), "sum": total}), flush=True)
        worker.barrier()
        worker.close()


if __name__ == "__main__":
    if sys.argv[1] == "records":
        records(int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown scenario {sys.argv[1]!r}")
