"""Node programs for tests/cluster/test_checkpoint_compose.py (each runs as one node of a cluster).

    python checkpoint_compose_scenarios.py relocate CKPT      # checkpoints while a thread per node localizes
    python checkpoint_compose_scenarios.py aggregate CKPT MODE  # checkpoints while workers push rounds (bsp|async)
    python checkpoint_compose_scenarios.py readers CKPT         # backups: localized keys (readers' copies) checkpointed
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
AGG_ROWS, THREADS, ROUNDS = 16, 2, 150


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


def aggregate(ckpt: Path, mode: str) -> None:
    """NodeAggregate table (add): each of THREADS workers per node pushes 1 to every row, then pulls,
    ROUNDS times, while the main thread checkpoints once after 5 rounds. The checkpoint's writing
    pauses 0.5 s (a hook) and saves what this node's rows were when it began: the files must hold
    exactly those (no round applied while writing). Prints the rounds every worker had completed
    before the call ("before N") and the rows at the start of writing go to CKPT/../start-R.npy."""
    model = {"bsp": pskv.BSP, "async": pskv.Async}[mode]
    with pskv.init() as node:
        node.table("g", AGG_ROWS, 1, aggregate=pskv.NodeAggregate(), consistency=model())
        done = [0] * THREADS
        ones = np.ones((AGG_ROWS, 1), np.float32)

        def train(w: pskv.Worker) -> None:
            g = w.table("g")
            for _ in range(ROUNDS):
                g.push(np.arange(AGG_ROWS), ones)
                g.pull(np.arange(AGG_ROWS), timeout=60)
                done[w.thread] += 1

        runner = threading.Thread(target=node.run, args=(train,), kwargs={"threads": THREADS})
        runner.start()
        while min(done) < 5 and runner.is_alive():
            time.sleep(0.001)
        before = min(done)

        def writing(node: int, step: int, path: Path) -> None:
            shard = state.shard
            keys = np.flatnonzero(shard.slot >= 0)
            np.save(ckpt.parent / f"start-{node}.npy", np.c_[keys, shard.data[shard.slot[keys], 0]])
            time.sleep(0.5)  # rounds that went on now would be in the files

        state = node.catalog.get("g")
        with _hooks.installed("checkpoint.writing", writing):
            node.checkpoint(ckpt)
        runner.join()
        print(f"before {before}", flush=True)


def reader_pushes(rank: int) -> np.ndarray:
    """(50, 20) the keys node `rank` pushes 1 to, 50 times 20 distinct keys."""
    rng = np.random.default_rng([7, rank])
    return np.stack([rng.choice(AGG_ROWS * 10, 20, replace=False) for _ in range(50)])


def readers(ckpt: Path) -> None:
    """Backups: each node pushes 1 to known keys and localizes half the table (it becomes a reader of
    keys it does not head: a copy of their rows in its shard); the checkpoint holds every row once."""
    with pskv.init() as node:
        table = node.table("w", AGG_ROWS * 10, 1, placement=pskv.Relocate(lease=0))
        for keys in reader_pushes(node.rank):
            table.push(keys, np.ones((len(keys), 1), np.float32))
            if node.rank == 1:
                table.localize(keys[:10])
        table.localize(np.arange(node.rank, AGG_ROWS * 10, 2)).wait(60)
        node.worker().barrier()
        info = node.checkpoint(ckpt)
        print(f"checkpoint {info.step}", flush=True)


if __name__ == "__main__":
    globals()[sys.argv[1]](Path(sys.argv[2]), *sys.argv[3:])
