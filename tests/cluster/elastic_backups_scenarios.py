"""Node programs for tests/cluster/test_elastic_backups.py: a push storm in a cluster with backups while
a node joins (PSKV_JOIN), and then one dies or leaves.

    python elastic_backups_scenarios.py storm OUT_DIR ROWS UPDATER COLUMNS LOCALIZE

Every node pushes ones into its own column (its rank) of a (ROWS, COLUMNS) table, to 16 distinct
random keys at a time with up to 8 pushes in flight, logging the keys of each push to OUT_DIR/sent-R
before sending it and to OUT_DIR/acked-R once its Future completed (raw int64: a node killed by
SIGKILL leaves both exact up to its last push). With LOCALIZE = 1 it localizes 20 random keys every
25 pushes (it becomes their reader: server.readers). The test drives the rest through files:

    OUT_DIR/running-R     R made 100 pushes (a joiner: after its table() returned, in the chains)
    OUT_DIR/seen-K-R      R made 100 pushes since it saw its K-th membership change (counted from
                          when its storm started)
    OUT_DIR/leave-R       (the test) R completes its pushes and leaves (node.leave())
    OUT_DIR/stop          (the test) every member completes its pushes, meets the others in a
                          barrier (a joiner's first), and writes the whole table as it pulls it
                          (final-R.npy), the keys it reads and its copies of them (reader-R-*.npy),
                          and its backup copies (backup-R-RANGE.npy); then all meet once more
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import numpy as np

import pskv

_MAX_PUSHES = 200_000


class _Pushes:
    """Pushes of ones into this node's column, up to 8 in flight, logged before and after."""

    def __init__(self, out: Path, table, rank: int, columns: int) -> None:
        self.table, self.rows = table, table.rows
        self.rng = np.random.default_rng(rank)
        self.sent = os.open(out / f"sent-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.acked = os.open(out / f"acked-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.values = np.zeros((16, columns), np.float32)
        self.values[:, rank] = 1.0
        self.pending: collections.deque = collections.deque()

    def push(self) -> None:
        keys = self.rng.choice(self.rows, 16, replace=False)
        os.write(self.sent, keys.astype(np.int64).tobytes())
        self.pending.append((self.table.push(keys, self.values), keys))
        self.complete(False)

    def complete(self, all_of_them: bool) -> None:
        while len(self.pending) > (0 if all_of_them else 8) or (self.pending and self.pending[0][0].done()):
            fut, keys = self.pending.popleft()
            fut.wait(60)
            os.write(self.acked, keys.astype(np.int64).tobytes())


def _save(out: Path, node, worker, table) -> None:
    """After the storm: every member's view of the table, the keys it reads, its backup copies."""
    worker.barrier()
    rank, rows = node.rank, table.rows
    np.save(out / f"final-{rank}.npy", table.pull(np.arange(rows), timeout=60))
    held, copies = table.pull_if_local(np.arange(rows))
    np.save(out / f"reader-{rank}-keys.npy", np.flatnonzero(held))
    np.save(out / f"reader-{rank}-rows.npy", copies[held])
    copies, chains = node.server.backups.copies, node.view.chains
    for (_, r), copy in copies.backup.items():
        if rank in chains.chain(r):  # (a copy of a range it heads is its store's, not a backup)
            np.save(out / f"backup-{rank}-{r}.npy", copy.read(np.arange(copy.start, copy.stop))[0])
    worker.barrier()


def storm(out: Path, rows: int, updater: str, columns: int, localize: int) -> None:
    with pskv.init() as node:
        joined = node.config.join is not None
        node.table("w", rows, columns, updater=updater)  # a joiner: returns once its copies are whole
        worker = node.worker()
        table = worker.table("w")
        if not joined:
            worker.barrier()
        changes: list = []
        node.on_membership_change(changes.append)
        chains = node.view.chains
        ends = [r for r in range(chains.num_nodes) if node.rank in chains.chain(r)[1:]]
        print(f"storm started as node {node.rank}, members {node.members}, backs up key ranges {ends}", flush=True)
        pushes, seen, since = _Pushes(out, table, node.rank, columns), 0, 0
        rng, localizes = np.random.default_rng(100 + node.rank), []
        for i in range(_MAX_PUSHES):
            if len(changes) != seen:
                seen, since = len(changes), i
            if i - since == 100:
                (out / f"seen-{seen}-{node.rank}").touch()
            if i == 100:
                (out / f"running-{node.rank}").touch()
            if i % 20 == 0 and (out / f"leave-{node.rank}").exists():
                pushes.complete(True)
                worker.close()
                node.leave()
                print(f"node {node.rank} left after {i} pushes", flush=True)
                return
            if i % 20 == 0 and (out / "stop").exists():
                break
            if localize and i % 25 == 0:
                localizes.append(table.localize(rng.choice(rows, 20, replace=False)))
            pushes.push()
        pushes.complete(True)
        for fut in localizes:
            fut.wait(60)
        print(f"storm done after {i} pushes, members {node.members}", flush=True)
        _save(out, node, worker, table)
        worker.close()
        print("storm finished", flush=True)


if __name__ == "__main__":
    if sys.argv[1] != "storm":
        raise SystemExit(f"unknown scenario {sys.argv[1]!r}")
    storm(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
