"""Node programs for tests/cluster/test_elastic.py: a push storm while nodes join and leave (no backups).

    python elastic_scenarios.py storm OUT_DIR ROWS UPDATER CHANGES LEAVER COLUMNS
    python elastic_scenarios.py cycle OUT_DIR ROWS UPDATER COLUMNS     (see `cycle`)
    python elastic_scenarios.py clocks OUT_DIR ROWS COLUMNS bsp|ssp    (see `clocks`)

Every node pushes ones into its own column (its rank) of a (ROWS, COLUMNS) table, to 16 distinct
random keys at a time with up to 8 pushes in flight, logging the keys of each push to OUT_DIR/sent-R
before sending it and to OUT_DIR/acked-R once its Future completed. A node that started with the
cluster goes on until it saw CHANGES membership changes and made 300 more pushes; node LEAVER (if
>= 0) leaves (node.leave()) once it saw the first change and made 300 more pushes. A node that joined
(PSKV_JOIN) makes 300 pushes. Then every member meets in a barrier (the joiner's first), the lowest
writes the whole table to OUT_DIR/final.npy, and all meet once more.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

import numpy as np

import pskv

_MAX_PUSHES = 200_000
_AFTER = 300


def _write(path: Path, number: int) -> None:
    """Write a number that other processes poll for: whole or not at all (a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(number))
    os.replace(tmp, path)


def _save_final(out: Path, node, worker, table) -> None:
    """Every member meets in a barrier; the lowest writes the whole table to OUT_DIR/final.npy."""
    worker.barrier()
    if node.rank == min(node.members):
        np.save(out / "final.npy", table.pull(np.arange(table.rows)))
    worker.barrier()
    worker.close()


class _Pushes:
    """Node `rank` pushes ones into its column to 16 random keys at a time, up to 8 in flight,
    logging each push's keys to OUT_DIR/sent-R before sending and to OUT_DIR/acked-R once done."""

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
            fut, k = self.pending.popleft()
            fut.wait()
            os.write(self.acked, k.astype(np.int64).tobytes())


def storm(out: Path, rows: int, updater: str, expected: int, leaver: int, columns: int) -> None:
    with pskv.init() as node:
        joined = node.config.join is not None
        node.table("w", rows, columns, updater=updater)
        worker = node.worker()
        table = worker.table("w")
        owned = int(table.pull_if_local(np.arange(rows))[0].sum())  # a joiner: its share, moved to it
        if not joined:
            worker.barrier()
        changes: list = []
        node.on_membership_change(changes.append)
        pushes = _Pushes(out, table, node.rank, columns)
        print(f"storm started as node {node.rank}, members {node.members}, owns {owned} rows", flush=True)
        if joined:
            (out / "joined").touch()  # the leaver waits for it: the share above is the joiner's alone
        after = 0
        for i in range(_MAX_PUSHES):
            if joined and i == _AFTER:
                break
            if not joined and len(changes) >= (1 if node.rank == leaver else expected):
                after += 1
                if after > _AFTER and node.rank != leaver:
                    break
            if node.rank == leaver and after >= _AFTER and (out / "joined").exists():
                pushes.complete(True)
                worker.close()
                node.leave()
                print(f"node {node.rank} left after {i} pushes", flush=True)
                return
            pushes.push()
            if i == 200:
                print("storm running", flush=True)
        pushes.complete(True)
        print(f"storm done after {i} pushes, members {node.members}", flush=True)
        _save_final(out, node, worker, table)
        print("storm finished", flush=True)




def cycle(out: Path, rows: int, updater: str, columns: int) -> None:
    """Push until OUT_DIR/stop exists; leave (node.leave()) once OUT_DIR/leave-R exists. A node that
    joined touches OUT_DIR/joined-R once it holds its share. The test drives who joins and leaves."""
    with pskv.init() as node:
        joined = node.config.join is not None
        node.table("w", rows, columns, updater=updater)
        worker = node.worker()
        table = worker.table("w")
        owned = int(table.pull_if_local(np.arange(rows))[0].sum())
        if not joined:
            worker.barrier()
        pushes = _Pushes(out, table, node.rank, columns)
        print(f"cycle started as node {node.rank}, members {node.members}, owns {owned} rows", flush=True)
        if joined:
            (out / f"joined-{node.rank}").touch()
        for i in range(_MAX_PUSHES):
            if i % 20 == 0 and (out / f"leave-{node.rank}").exists():
                pushes.complete(True)
                worker.close()
                node.leave()
                print(f"node {node.rank} left after {i} pushes", flush=True)
                return
            if i % 20 == 0 and (out / "stop").exists():
                break
            pushes.push()
            if i == 100:
                (out / f"running-{node.rank}").touch()
        pushes.complete(True)
        print(f"cycle done after {i} pushes, members {node.members}, {node.num_nodes} nodes", flush=True)
        _save_final(out, node, worker, table)


def clocks(out: Path, rows: int, columns: int, model: str) -> None:
    """Under BSP or SSP(1) (`model`): each clock, push a one into this node's column of row
    (clock % ROWS), end the clock, and pull every row, which must hold every push of this node
    (BSP), or all but the last clock's (SSP(1)), and as many of every other member's (that started
    at clock S: one per clock since S). Until OUT_DIR/stop; leave once OUT_DIR/leave-R
    exists; touch OUT_DIR/running-R after 20 clocks. Writes the clocks it ended to OUT_DIR/count-R."""
    consistency = pskv.BSP() if model == "bsp" else pskv.SSP(1)
    with pskv.init() as node:
        joined = node.config.join is not None
        main = node.table("c", rows, columns, consistency=consistency)
        worker = node.worker()
        table = worker.table("c")
        if not joined:
            worker.barrier()
        start = worker.current_clock
        print(f"clocks start at {start} on node {node.rank}", flush=True)
        _write(out / f"start-{node.rank}", start)
        one = np.zeros((1, columns), np.float32)
        one[0, node.rank] = 1.0
        slack = 0 if model == "bsp" else 1
        n = 0
        for _ in range(_MAX_PUSHES):
            if (out / f"leave-{node.rank}").exists():
                worker.wait_all()
                _write(out / f"count-{node.rank}", n)  # before close(): from then on its column
                worker.close()  # stops growing, and the others' checks must know it
                node.leave()
                print(f"node {node.rank} left after {n} clocks", flush=True)
                return
            if (out / "stop").exists():
                break
            table.push(np.array([(start + n) % rows]), one)
            worker.clock()
            n += 1
            starts = {r: int(f.read_text()) for r in range(columns) if (f := out / f"start-{r}").exists()}
            got = table.pull(np.arange(rows), timeout=60).sum(axis=0)
            assert n - slack <= got[node.rank] <= n, f"node {node.rank} after {n} clocks sees {got} of its own pushes"
            for r, s in starts.items():  # the clocks of every member count, a joiner's from when it came
                if not (out / f"count-{r}").exists():  # (a node that stopped or left holds nobody back)
                    assert got[r] >= start + n - slack - s, f"node {node.rank} at clock {start + n} sees {got}"
            if n == 20:
                (out / f"running-{node.rank}").touch()
        print(f"clocks done after {n} clocks, members {node.members}", flush=True)
        worker.wait_all()  # every push of it is applied
        _write(out / f"count-{node.rank}", n)  # before close(), as for a leave
        worker.close()  # a node sees the stop a clock before another: it must not hold that one back
        for _ in range(600):  # bounded: the test touches `counted` once every member wrote its count
            if (out / "counted").exists():
                break
            time.sleep(0.1)
        if node.rank == min(node.members):  # the main thread's handle: no clock of its own to wait for
            np.save(out / "final.npy", main.pull(np.arange(rows)))


if __name__ == "__main__":
    if sys.argv[1] == "storm":
        storm(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], *map(int, sys.argv[5:8]))
    elif sys.argv[1] == "cycle":
        cycle(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "clocks":
        clocks(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
