"""Node programs for tests/cluster/test_checkpoint.py (each runs as one node of a cluster).

    python checkpoint_scenarios.py save OUT CKPT         # fill two tables, checkpoint, push more
    python checkpoint_scenarios.py restore OUT CKPT      # start from CKPT (-: PSKV_RESTORE), save what came back, checkpoint again
    python checkpoint_scenarios.py cut OUT CKPT          # a thread per node pushes while the main thread checkpoints
    python checkpoint_scenarios.py die OUT CKPT          # checkpoint twice; node 1 is SIGKILLed while writing the 2nd
    python checkpoint_scenarios.py mismatch OUT CKPT     # start from CKPT, declare "w" with another updater

Tables: "w" (ROWS x 4, Adagrad: rows and state) and "c" (ROWS x 8, add). Node 0 writes what the
test compares to OUT/*.npy.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np

import pskv
from pskv import _hooks

ROWS = 997  # not a multiple of any node count: ranges differ between 2, 3 and 4 nodes
ADAGRAD = pskv.Adagrad(lr=0.1, initial_accumulator=0.1)


def _tables(node):
    return node.table("w", ROWS, 4, updater=ADAGRAD), node.table("c", ROWS, 8)


def _fill(node, w, c, rounds: int, salt: int) -> None:
    rng = np.random.default_rng([node.rank, salt])
    for _ in range(rounds):
        keys = rng.choice(ROWS, 50, replace=False)
        w.push(keys, rng.normal(size=(50, 4)).astype(np.float32))
        c.push(keys, np.full((50, 8), node.rank + 1, np.float32))
    w.pull(np.arange(ROWS))  # every push of this node answered


def save(out: Path, ckpt: Path) -> None:
    with pskv.init() as node:
        w, c = _tables(node)
        _fill(node, w, c, 40, 1)
        worker = node.worker()
        worker.barrier()
        if node.rank == 0:
            np.save(out / "w.npy", w.pull(np.arange(ROWS)))
            np.save(out / "c.npy", c.pull(np.arange(ROWS)))
        worker.barrier()
        info = node.checkpoint(ckpt, extra={"epoch": 7})
        print(f"checkpoint {info.path.name} step {info.step}", flush=True)
        _fill(node, w, c, 10, 2)  # after the cut: in no checkpoint
        worker.close()


def restore(out: Path, ckpt: Path) -> None:
    with pskv.init(**({} if str(ckpt) == "-" else {"restore": str(ckpt)})) as node:  # "-": PSKV_RESTORE
        w, c = _tables(node)
        worker = node.worker()
        worker.barrier()
        if node.rank == 0:
            np.save(out / f"w-restored-{node.num_nodes}.npy", w.pull(np.arange(ROWS)))
            np.save(out / f"c-restored-{node.num_nodes}.npy", c.pull(np.arange(ROWS)))
            print(f"extra {node.restored}", flush=True)
        worker.barrier()
        info = node.checkpoint(out / f"again-{node.num_nodes}")
        print(f"checkpoint again {info.path}", flush=True)
        worker.close()


def cut(out: Path, ckpt: Path) -> None:
    """Node r's thread pushes 1 to column r of key i % ROWS, one push at a time, while the main
    thread checkpoints: the checkpoint holds a prefix of each node's pushes, at least those made
    before the call and at most those made before it returned."""
    with pskv.init() as node:
        _, c = _tables(node)
        stop, done = threading.Event(), [0]
        ones = np.zeros((1, 8), np.float32)
        ones[0, node.rank] = 1

        def pusher():
            worker = node.worker()
            table = worker.table("c")
            i = 0
            while not stop.is_set() and i < 200_000:
                table.push(np.array([i % ROWS]), ones).wait()
                i += 1
                done[0] = i
            worker.close()

        thread = threading.Thread(target=pusher)
        thread.start()
        while done[0] < 300:
            stop.wait(0.01)
        before = done[0]
        node.checkpoint(ckpt)
        after = done[0]
        stop.set()
        thread.join()
        (out / f"cut-{node.rank}.txt").write_text(f"{before} {after}")


def die(out: Path, ckpt: Path) -> None:
    with pskv.init() as node:
        w, c = _tables(node)
        _fill(node, w, c, 20, 1)
        first = node.checkpoint(ckpt)
        print(f"first {first.path.name}", flush=True)
        _fill(node, w, c, 20, 2)

        def kill(node: int, step: int, path) -> None:
            if node == 1 and step == 2:
                (path / "partial").write_text("node 1 dies now")
                os.kill(os.getpid(), signal.SIGKILL)

        with _hooks.installed("checkpoint.writing", kill):
            node.checkpoint(ckpt)


def mismatch(out: Path, ckpt: Path) -> None:
    with pskv.init(restore=str(ckpt)) as node:
        try:
            node.table("w", ROWS, 4, updater="add")
        except pskv.TableMismatch as exc:
            print(f"TableMismatch: {exc}", flush=True)
            sys.exit(5)


if __name__ == "__main__":
    globals()[sys.argv[1]](Path(sys.argv[2]), Path(sys.argv[3]))
