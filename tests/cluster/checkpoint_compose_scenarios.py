"""Node programs for tests/cluster/test_checkpoint_compose.py (each runs as one node of a cluster).

    python checkpoint_compose_scenarios.py relocate CKPT      # checkpoints while a thread per node localizes
    python checkpoint_compose_scenarios.py aggregate CKPT MODE  # checkpoints while workers push rounds (bsp|async)
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np

import pskv
from pskv import _hooks

ROWS = 2000
CHECKPOINTS = 8


def relocate(ckpt: Path) -> None:
    """Every row i holds i (pushed once, by node 0). Then one thread per node localizes 200 random
    keys every millisecond (every other time through a preloc sample handle) while the main thread
    checkpoints 8 times: rows only move, so every checkpoint must hold every row exactly once,
    with its value i."""
    with pskv.init() as node:
        table = node.table("w", ROWS, 2, placement=pskv.Relocate(lease=0),
                           sampling=pskv.Sampling(np.ones(ROWS), scheme="preloc"))
        if node.rank == 0:
            table.push(np.arange(ROWS), np.repeat(np.arange(ROWS, dtype=np.float32)[:, None], 2, axis=1)).wait(60)
        node.worker().barrier()
        stop, moved = threading.Event(), [0]

        def mover() -> None:
            worker = node.worker()
            t = worker.table("w")
            rng = np.random.default_rng(node.rank)
            while not stop.is_set():
                if moved[0] % 2:
                    t.finish_sample(t.prepare_sample(200))  # preloc: localizes the keys it draws
                else:
                    t.localize(rng.choice(ROWS, 200, replace=False)).wait(60)
                moved[0] += 1
                time.sleep(0.001)
            worker.close()

        thread = threading.Thread(target=mover)
        thread.start()
        try:
            for i in range(CHECKPOINTS):
                while moved[0] < 3 * (i + 1):  # moves between any two checkpoints
                    time.sleep(0.001)
                info = node.checkpoint(ckpt)
                print(f"checkpoint {info.step}", flush=True)
        finally:
            stop.set()
            thread.join()
        print(f"moves {moved[0]}", flush=True)


if __name__ == "__main__":
    globals()[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
