"""Node programs for tests/cluster/test_replica_compose.py: hot-key replication (pskv.Replicate) with
checkpoints, joins and leaves (each runs as one node of a cluster).

    python replica_scenarios.py save OUT CKPT KEYS      # fill "a" and "g" with KEYS replicated, checkpoint
    python replica_scenarios.py restore OUT CKPT KEYS   # start from CKPT with KEYS replicated; push; save
    python replica_scenarios.py join OUT                # the nodes push hot keys; a node joins (PSKV_JOIN)
    python replica_scenarios.py leave OUT               # node 1 pushes a hot key and leaves; a node joins

KEYS: the replicated keys, "1,2" or "none". Tables: "a" (ROWS x 2, add) and "g" (ROWS x 2, Adagrad);
"h" (8 x 1, add, keys 0 and 3 replicated) for join and leave. Each node prints what it read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import pskv

ROWS = 11
ADAGRAD = pskv.Adagrad(lr=0.1, initial_accumulator=0.1)
HOT = [0, 3]


def _tables(node, keys: str):
    extra = {} if keys == "none" else {"replicate": pskv.Replicate(keys=[int(k) for k in keys.split(",")])}
    return node.table("a", ROWS, 2, **extra), node.table("g", ROWS, 2, updater=ADAGRAD, **extra)


def save(out: Path, ckpt: Path, keys: str) -> None:
    """Node r pushes (k + 1)(r + 1) to key k of "a", and (k + 1)(r + 1) / 4 twice to key k of "g"."""
    with pskv.init() as node:
        a, g = _tables(node, keys)
        worker = node.worker()
        worker.barrier()
        k = np.arange(ROWS, dtype=np.float32)[:, None]
        a.push(np.arange(ROWS), np.repeat((k + 1) * (node.rank + 1), 2, axis=1)).wait()
        for _ in range(2):
            g.push(np.arange(ROWS), np.repeat((k + 1) * (node.rank + 1) / 4, 2, axis=1)).wait()
        worker.wait_replica_sync()
        worker.barrier()
        node.checkpoint(ckpt)
        worker.close()


def restore(out: Path, ckpt: Path, keys: str) -> None:
    """Save what came back (OUT/NAME-restored-R.npy); node 0 pushes 1 to every key of "a" and 0.5 to
    every key of "g"; once synced, save what every node reads (OUT/NAME-after-R.npy) and checkpoint
    again (OUT/again)."""
    with pskv.init(restore=str(ckpt)) as node:
        tables = dict(zip("ag", _tables(node, keys)))
        worker = node.worker()
        worker.barrier()
        for name, t in tables.items():
            np.save(out / f"{name}-restored-{node.rank}.npy", t.pull(np.arange(ROWS)))
        worker.barrier()
        if node.rank == 0:
            tables["a"].push(np.arange(ROWS), np.ones((ROWS, 2), np.float32)).wait()
            tables["g"].push(np.arange(ROWS), np.full((ROWS, 2), 0.5, np.float32)).wait()
        worker.wait_replica_sync()
        worker.barrier()
        for name, t in tables.items():
            np.save(out / f"{name}-after-{node.rank}.npy", t.pull(np.arange(ROWS)))
        node.checkpoint(out / "again")
        worker.close()


def _wait_for(path: Path) -> None:
    for _ in range(1200):  # bounded: the test makes it within seconds
        if path.exists():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{path} never appeared")


def _final(node, worker, h) -> None:
    """Every member's changes reach every other, then each node prints what it reads."""
    worker.wait_replica_sync()
    worker.barrier()
    print(f"final {node.rank} {h.pull(np.arange(8))[:, 0].tolist()}", flush=True)
    worker.barrier()
    worker.close()


def join(out: Path) -> None:
    """Node 0 pushes 5 to hot key 0 and node 1 2 to hot key 3, synced; node 0 pushes 10 to key 3
    (maybe not synced yet) and touches OUT/ready. A node joins: it prints what it reads first, pushes
    100 to key 3 and touches OUT/joined; then node 0 pushes 1 to key 0. Every node prints the end."""
    one = lambda v: np.full((1, 1), v, np.float32)  # noqa: E731
    with pskv.init() as node:
        node.table("h", 8, 1, replicate=pskv.Replicate(keys=HOT, syncs_per_sec=5))
        worker = node.worker()
        h = worker.table("h")
        if node.config.join is None:
            worker.barrier()
            if node.rank < 2:
                h.push(np.array([3 * node.rank]), one((5, 2)[node.rank])).wait()
            worker.wait_replica_sync()
            worker.barrier()
            if node.rank == 0:
                h.push(np.array([3]), one(10)).wait()
                (out / "ready").touch()
            _wait_for(out / "joined")
            if node.rank == 0:
                h.push(np.array([0]), one(1)).wait()
        else:
            print(f"joined as node {node.rank}, members {node.members}, reads "
                  f"{h.pull(np.arange(8))[:, 0].tolist()}", flush=True)
            h.push(np.array([3]), one(100)).wait()
            (out / "joined").touch()
        _final(node, worker, h)


def leave(out: Path) -> None:
    """Replica syncs only when asked (syncs_per_sec=0). Node 1 pushes 7 to hot key 0 and leaves;
    node 0 prints what it reads then and touches OUT/left. A node joins, prints what it reads first,
    touches OUT/joined; node 0 pushes 1 to key 0. Every node prints the end."""
    with pskv.init() as node:
        node.table("h", 8, 1, replicate=pskv.Replicate(keys=HOT, syncs_per_sec=0))
        worker = node.worker()
        h = worker.table("h")
        if node.config.join is not None:
            print(f"joined as node {node.rank}, members {node.members}, reads "
                  f"{h.pull(np.arange(8))[:, 0].tolist()}", flush=True)
            (out / "joined").touch()
            _final(node, worker, h)
            return
        worker.barrier()
        if node.rank == 1:
            h.push(np.array([0]), np.full((1, 1), 7, np.float32)).wait()
            worker.close()
            node.leave()
            print("node 1 left", flush=True)
            return
        for _ in range(1200):
            if node.members == [0]:
                break
            time.sleep(0.05)
        print(f"after the leave node 0 reads {h.pull(np.arange(8))[:, 0].tolist()}", flush=True)
        (out / "left").touch()
        _wait_for(out / "joined")
        h.push(np.array([0]), np.full((1, 1), 1, np.float32)).wait()
        _final(node, worker, h)


if __name__ == "__main__":
    command, out = sys.argv[1], Path(sys.argv[2])
    {"save": save, "restore": restore, "join": join, "leave": leave}[command](out, *sys.argv[3:])
