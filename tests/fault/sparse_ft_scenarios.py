"""Node programs for tests/fault/test_sparse_backups.py: a sparse table (key_space="uint64") on a
cluster with backups.

    python sparse_ft_scenarios.py storm OUT_DIR UPDATER     # a node is SIGKILLed meanwhile (by the test)
    python sparse_ft_scenarios.py restore OUT_DIR UPDATER   # restores OUT_DIR/ckpt, compares with the storm's

storm: every node pushes ones into its own column of a sparse (POOL keys used, dim num_nodes)
table, to 16 distinct keys of a pool of POOL random uint64 ids (the same pool on every node, over
every key range) at a time, with up to 8 pushes in flight; it appends the pool indices of each push
to OUT_DIR/sent-R before sending it and to OUT_DIR/acked-R once its Future completed (raw int64,
so a node killed by SIGKILL leaves both exact up to its last push). It goes on until it saw one
membership change and made 300 more pushes. Then the survivors meet; the lowest live rank saves
the pool's rows (final.npy) and `pull_range(0, 2**64)` (range-keys.npy, range-rows.npy); every
survivor saves the keys and rows of each copy it holds as a backup (backup-R-RANGE-{keys,rows}.npy),
and all take a checkpoint (OUT_DIR/ckpt).

restore: a cluster with backups restores OUT_DIR/ckpt: pull_range, pulls and every backup copy
equal what the storm saved.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import numpy as np

import pskv

POOL = 600
_MAX_PUSHES = 200_000
_AFTER_CHANGE = 300


def pool() -> np.ndarray:
    """(POOL,) distinct random uint64 ids, the same on every node."""
    keys = np.unique(np.random.default_rng(2024).integers(0, 2**64 - 1, POOL + 50, dtype=np.uint64, endpoint=True))
    return np.random.default_rng(7).permutation(keys)[:POOL]


def _save_copies(node: pskv.Node, out: Path) -> None:
    for (_, r), copy in sorted(node.server.backups.copies.backup.items()):
        keys, rows, _ = copy.snapshot()
        np.save(out / f"backup-{node.rank}-{r}-keys.npy", keys)
        np.save(out / f"backup-{node.rank}-{r}-rows.npy", rows)


def storm(out: Path, updater: str) -> None:
    keys_of = pool()
    with pskv.init() as node:
        n = node.num_nodes
        table = node.table("s", rows=None, dim=n, key_space="uint64", updater=updater)
        worker = node.worker()
        table = worker.table("s")
        assert table._state.path.describe()["push"] == "gate > clock > held ranges > heads", table._state.path
        worker.barrier()
        changes = []
        node.on_membership_change(changes.append)
        rng = np.random.default_rng(node.rank)
        sent = os.open(out / f"sent-{node.rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        acked = os.open(out / f"acked-{node.rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        values = np.zeros((16, n), np.float32)
        values[:, node.rank] = 1.0
        pending: collections.deque = collections.deque()
        after = 0
        for i in range(_MAX_PUSHES):
            if changes:
                after += 1
                if after > _AFTER_CHANGE:
                    break
            idx = rng.choice(POOL, 16, replace=False)
            os.write(sent, idx.astype(np.int64).tobytes())
            pending.append((table.push(keys_of[idx], values), idx))
            if i == 200:
                print("storm running", flush=True)
            while len(pending) > 8 or (pending and pending[0][0].done()):
                fut, k = pending.popleft()
                fut.wait()
                os.write(acked, k.astype(np.int64).tobytes())
        while pending:
            fut, k = pending.popleft()
            fut.wait()
            os.write(acked, k.astype(np.int64).tobytes())
        print(f"storm done after {i + 1} pushes, members {node.members}", flush=True)
        worker.barrier()
        if node.rank == min(node.members):
            np.save(out / "final.npy", table.pull(keys_of))
            keys, rows = table.pull_range(0, 2**64)
            np.save(out / "range-keys.npy", keys)
            np.save(out / "range-rows.npy", rows)
        _save_copies(node, out)
        worker.barrier()
        node.checkpoint(out / "ckpt")
        worker.close()
        print("storm finished", flush=True)


def restore(out: Path, updater: str) -> None:
    keys, rows = np.load(out / "range-keys.npy"), np.load(out / "range-rows.npy")
    with pskv.init() as node:
        node.table("s", rows=None, dim=rows.shape[1], key_space="uint64", updater=updater)
        worker = node.worker()
        table = worker.table("s")
        got_keys, got = table.pull_range(0, 2**64)
        assert np.array_equal(got_keys, keys) and np.array_equal(got, rows), "restored rows differ"
        assert np.array_equal(table.pull(keys), rows), "pulls of the restored rows differ"
        for (_, r), copy in sorted(node.server.backups.copies.backup.items()):
            ck, cr, _ = copy.snapshot()
            lo, hi = node.catalog.get("s").ranges.range_bounds(r)
            inside = (keys >= np.uint64(lo)) & (keys <= np.uint64(hi - 1))
            assert np.array_equal(ck, keys[inside]) and np.array_equal(cr, rows[inside]), f"copy of range {r} differs"
        worker.barrier()
        worker.close()
        print(f"restored node={node.rank}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "storm":
        storm(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "restore":
        restore(Path(sys.argv[2]), sys.argv[3])
    else:
        raise SystemExit(f"unknown scenario {sys.argv[1]!r}")
