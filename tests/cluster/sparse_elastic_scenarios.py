"""Node programs for tests/cluster/test_sparse_elastic.py: a sparse table (key_space="uint64") while
nodes leave and join (no backups).

    python sparse_elastic_scenarios.py storm OUT_DIR UPDATER CHANGES LEAVER [CKPT]
    python sparse_elastic_scenarios.py restore OUT_DIR UPDATER CKPT

Every node pushes ones into its own column (its rank) of a sparse table of COLUMNS columns, to 16
distinct keys at a time drawn from a pool of uint64 keys spread over the whole key space (range
borders and extremes included), with up to 8 pushes in flight; it logs the pool indices of each
push to OUT_DIR/sent-R before sending it and to OUT_DIR/acked-R once its Future completed. A node
that started with the cluster pushes until it saw CHANGES membership changes and made 300 more
pushes; node LEAVER leaves (node.leave()) after 300 pushes once it saw CHANGES - 1 changes (and,
when a node joins, once OUT_DIR/joined exists). A node that joined (PSKV_JOIN) pushes until it saw
the leave and made 300 more. Then every member meets in a barrier, the lowest saves
pull_range(0, 2**64) to OUT_DIR/final-keys.npy and final-rows.npy, every node prints the keys it
holds and the ranges it manages, and with CKPT all take a checkpoint there.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import numpy as np

import pskv

COLUMNS = 4
_AFTER = 300
_MAX_PUSHES = 200_000


def pool() -> np.ndarray:
    """(about 2000,) uint64 distinct keys, sorted, all over the uint64 space, the borders of 2 and 3 ranges and the extremes."""
    edges = [0, 1, 2**63 - 1, 2**63, 2**64 // 3 - 1, 2**64 // 3, 2 * 2**64 // 3 - 1, 2 * 2**64 // 3, 2**64 - 1]
    rng = np.random.default_rng(7)
    return np.unique(np.concatenate([np.array(edges, np.uint64),
                                     rng.integers(0, 2**64 - 1, 2000 - len(edges), dtype=np.uint64, endpoint=True)]))


class _Pushes:
    """Ones into column `rank` of 16 pool keys at a time, up to 8 in flight, logged (pool indices)."""

    def __init__(self, out: Path, table, rank: int) -> None:
        self.table, self.keys = table, pool()
        self.rng = np.random.default_rng(rank)
        self.sent = os.open(out / f"sent-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.acked = os.open(out / f"acked-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.values = np.zeros((16, COLUMNS), np.float32)
        self.values[:, rank] = 1.0
        self.pending: collections.deque = collections.deque()

    def push(self) -> None:
        at = self.rng.choice(len(self.keys), 16, replace=False)
        os.write(self.sent, at.astype(np.int64).tobytes())
        self.pending.append((self.table.push(self.keys[at], self.values), at))
        self.complete(False)

    def complete(self, all_of_them: bool) -> None:
        while len(self.pending) > (0 if all_of_them else 8) or (self.pending and self.pending[0][0].done()):
            fut, at = self.pending.popleft()
            fut.wait()
            os.write(self.acked, at.astype(np.int64).tobytes())


def _declare(node: pskv.Node, updater: str):
    return node.table("w", rows=None, dim=COLUMNS, key_space="uint64", updater=updater)


def storm(out: Path, updater: str, expected: int, leaver: int, ckpt: str | None) -> None:
    with pskv.init() as node:
        joined = node.config.join is not None
        _declare(node, updater)
        worker = node.worker()
        table = worker.table("w")
        if not joined:
            worker.barrier()
        changes: list = []
        node.on_membership_change(changes.append)
        pushes = _Pushes(out, table, node.rank)
        held = len(node.catalog.get("w").shard)
        print(f"storm started as node {node.rank}, members {node.members}, holds {held} keys, "
              f"manages {table.local_ranges()}", flush=True)
        if joined:
            (out / "joined").touch()
        after = 0
        waits_for_joiner = expected == 2
        for i in range(_MAX_PUSHES):
            if len(changes) >= (1 if joined else expected - (node.rank == leaver)):
                after += 1
            if node.rank == leaver and after >= _AFTER and (not waits_for_joiner or (out / "joined").exists()):
                pushes.complete(True)
                worker.close()
                node.leave()
                print(f"node {node.rank} left after {i} pushes", flush=True)
                return
            if node.rank != leaver and after > _AFTER:
                break
            pushes.push()
            if i == 200:
                print("storm running", flush=True)
        pushes.complete(True)
        worker.barrier()
        if node.rank == min(node.members):
            keys, rows = table.pull_range(0, 2**64)
            np.save(out / "final-keys.npy", keys)
            np.save(out / "final-rows.npy", rows)
        print(f"storm done node {node.rank}: members {node.members}, holds {len(node.catalog.get('w').shard)} "
              f"keys, manages {table.local_ranges()}", flush=True)
        worker.barrier()
        if ckpt:
            node.checkpoint(ckpt)
            print(f"checkpoint taken by node {node.rank}", flush=True)
        worker.close()


def restore(out: Path, updater: str, ckpt: str) -> None:
    """Restored (restore=CKPT): pull_range equals the saved table; node 0 pushes a one into column 0 of
    every key, and the rows equal a replay of one more push (the updater state came back too)."""
    with pskv.init() as node:
        _declare(node, updater)
        worker = node.worker()
        table = worker.table("w")
        keys, rows = table.pull_range(0, 2**64)
        assert np.array_equal(keys, np.load(out / "final-keys.npy")), "restored keys differ"
        assert np.array_equal(rows, np.load(out / "final-rows.npy")), "restored rows differ"
        worker.barrier()
        if node.rank == 0:
            one = np.zeros((len(keys), COLUMNS), np.float32)
            one[:, 0] = 1.0
            table.push(keys, one).wait()
        worker.barrier()
        if node.rank == 0:
            np.save(out / "after-keys.npy", keys)
            np.save(out / "after-rows.npy", table.pull(keys))
        print(f"restored node {node.rank}: {len(keys)} keys, holds {len(node.catalog.get('w').shard)}", flush=True)
        worker.barrier()
        worker.close()


if __name__ == "__main__":
    if sys.argv[1] == "storm":
        storm(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
              sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        restore(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
