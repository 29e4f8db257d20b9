"""One node of the soak (benchmarks/soak.py): push for `seconds` with backups, relocation and
replicated hot keys, while the main thread checkpoints every `every` seconds and prints its RSS.

    python soak_node.py OUT SECONDS EVERY

Each worker thread pushes +1 to random keys of two tables ("moved": Relocate(lease=0), with
localizes; "hot": 16 keys replicated) and counts what it pushed per key; at the end every node writes
its counts (OUT/counts-R.npy) and node 0 the final rows of both tables (OUT/final.npz), which the
harness compares exactly. Lines: `rss SECONDS BYTES`, `checkpoint STEP SECONDS`, `pushes N`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np

import pskv

ROWS, DIM, BATCH = 20_000, 8, 64
HOT = np.arange(0, ROWS, ROWS // 16)


def main() -> None:
    out, seconds, every = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    with pskv.init() as node:
        moved = node.table("moved", ROWS, DIM, placement=pskv.Relocate(lease=0))
        hot = node.table("hot", ROWS, DIM, replicate=pskv.Replicate(keys=HOT))
        counts = {name: np.zeros(ROWS, np.int64) for name in ("moved", "hot")}
        lock = threading.Lock()
        stop = time.monotonic() + seconds
        pushes = [0]

        def train(w: pskv.Worker) -> None:
            rng = np.random.default_rng([node.rank, w.thread])
            mine = {name: np.zeros(ROWS, np.int64) for name in counts}
            tables = {name: w.table(name) for name in counts}
            ones = np.ones((BATCH, DIM), np.float32)
            n = 0
            while time.monotonic() < stop:
                for name, t in tables.items():
                    keys = rng.integers(0, ROWS, BATCH)
                    if name == "hot":
                        keys[: BATCH // 2] = rng.choice(HOT, BATCH // 2)
                    t.push(keys, ones)
                    np.add.at(mine[name], keys, 1)
                if n % 16 == 0:
                    tables["moved"].localize(rng.integers(0, ROWS, 32))
                if n % 64 == 63:
                    w.wait_all()
                n += 1
            w.wait_all()
            with lock:
                for name in counts:
                    counts[name] += mine[name]
                pushes[0] += 2 * n

        threads = [threading.Thread(target=lambda: _worker(node, train), name=f"soak-{t}", daemon=True)
                   for t in range(node.config.threads)]
        start = time.monotonic()
        for t in threads:
            t.start()
        next_ckpt = start + every
        trace = os.environ.get("PSKV_SOAK_TRACE") == "1"  # soak.py --trace: where Python memory grows
        first = None
        if trace:
            tracemalloc.start(8)
        while any(t.is_alive() for t in threads):
            if trace and first is None and time.monotonic() - start >= seconds / 5:
                first = tracemalloc.take_snapshot()
            time.sleep(min(5.0, max(0.0, stop - time.monotonic())) or 0.5)
            print(f"rss {time.monotonic() - start:.0f} {node.stats()['rss_bytes']}", flush=True)
            if trace:
                print("state " + " | ".join(line.strip() for line in node.debug_state().splitlines()
                                           if "kept above" in line or "outstanding" in line), flush=True)
            if time.monotonic() >= next_ckpt and time.monotonic() < stop - 2:
                info = node.checkpoint(out / "ckpt", keep=2)
                print(f"checkpoint {info.step} {time.monotonic() - start:.0f}", flush=True)
                next_ckpt += every
        for t in threads:
            t.join()
        if first is not None:
            for stat in tracemalloc.take_snapshot().compare_to(first, "traceback")[:6]:
                print(f"grew {stat.size_diff / 2**10:+.0f} KiB in {stat.count_diff:+d} blocks at "
                      + " < ".join(f"{f.filename.split('/src/')[-1]}:{f.lineno}" for f in list(stat.traceback)[-5:]), flush=True)
        w = node.worker()
        w.wait_replica_sync()
        w.barrier()
        w.wait_replica_sync()
        w.barrier()
        np.save(out / f"counts-{node.rank}.npy", np.stack([counts["moved"], counts["hot"]]))
        if node.rank == 0:
            np.savez(out / "final.npz", moved=w.table("moved").pull(np.arange(ROWS)),
                     hot=w.table("hot").pull(np.arange(ROWS)))
        w.barrier()
        w.close()
        print(f"pushes {pushes[0]}", flush=True)


def _worker(node: pskv.Node, fn) -> None:
    w = node.worker()
    try:
        fn(w)
    finally:
        w.close()


if __name__ == "__main__":
    main()
