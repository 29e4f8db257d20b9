"""Node programs for tests/fault/test_backups.py: each runs as one node of a cluster with backups.

    python ft_scenarios.py storm OUT_DIR ROWS UPDATER CHANGES [HOT [LOCALIZE [LEAVER]]]  # nodes die (or leave) meanwhile
    python ft_scenarios.py checkpoint OUT_DIR ROWS                # node 2 dies while writing a checkpoint
    python ft_scenarios.py aggregate OUT_DIR ROWS CHANGES [VICTIM [ACKED]] # an aggregated table; a node dies
    # meanwhile (with VICTIM: BSP, node VICTIM dies; ACKED = N: it kills itself when the tail acknowledged
    # the N-th round write it headed, before it answers the nodes: server.rounds)

Every node pushes ones into its own column of a (ROWS, num_nodes) table, to 16 distinct random
keys of every key range at a time (so a row's column is a function of how many pushes reached
it, also under Adagrad), with up to 8 pushes in flight, and appends the keys of each push to OUT_DIR/sent-R
before sending it and to OUT_DIR/acked-R once its Future completed (raw int64, flushed at once:
a node killed by SIGKILL leaves both files exact up to its last push). A node goes on until it
saw CHANGES membership changes and made 300 more pushes (bounded: at most 200,000 in all). Then the
survivors meet in a barrier, and the lowest live rank writes the whole table to OUT_DIR/final.npy
and each survivor its rows' copies held as a backup (OUT_DIR/backup-R-RANGE.npy). With HOT > 0,
every (ROWS // HOT)-th row is replicated on every node (pskv.Replicate); after a last replica sync
each survivor writes its replicas of them (OUT_DIR/replica-R.npy). With LOCALIZE = 1 every node
localizes 20 random keys every 25 pushes (server.readers: it becomes their reader, or is declined),
and each survivor writes the keys it reads and its copies of them (OUT_DIR/reader-R-{keys,rows}.npy).
Node LEAVER (if >= 0) waits for its pushes after its 301st and calls node.leave().
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import numpy as np

import pskv

_MAX_PUSHES = 200_000
_BSP_ROUNDS = 400
_AFTER_CHANGE = 300


def table_id(node, name: str) -> int:
    return node.catalog.get(name).spec.table_id


def hot_keys(rows: int, hot: int) -> np.ndarray:
    return np.arange(0, rows, rows // hot, dtype=np.int64) if hot else np.zeros(0, np.int64)


def storm(out: Path, rows: int, updater: str, expected: int, hot: int = 0, localize: int = 0, leaver: int = -1) -> None:
    with pskv.init() as node:
        n = node.num_nodes
        extra = {"replicate": pskv.Replicate(keys=hot_keys(rows, hot))} if hot else {}
        node.table("w", rows, n, updater=updater, **extra)
        worker = node.worker()
        table = worker.table("w")
        worker.barrier()
        changes = []
        node.on_membership_change(changes.append)
        rng = np.random.default_rng(node.rank)
        sent = os.open(out / f"sent-{node.rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        acked = os.open(out / f"acked-{node.rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        values = np.zeros((16, n), np.float32)
        values[:, node.rank] = 1.0
        pending: collections.deque = collections.deque()
        localizes = []
        print("storm started", flush=True)
        after = 0
        for i in range(_MAX_PUSHES):
            if len(changes) >= expected:
                after += 1
                if after > _AFTER_CHANGE:
                    break
            keys = rng.choice(rows, 16, replace=False)
            if localize and i % 25 == 0:
                localizes.append(table.localize(rng.choice(rows, 20, replace=False)))
            os.write(sent, keys.astype(np.int64).tobytes())
            pending.append((table.push(keys, values), keys))
            if i == 200:
                print("storm running", flush=True)
            if node.rank == leaver and i == 300:  # node.leave(): its pushes complete, then it is out
                while pending:
                    fut, k = pending.popleft()
                    fut.wait()
                    os.write(acked, k.astype(np.int64).tobytes())
                worker.close()
                node.leave()
                print(f"node {node.rank} left after {i + 1} pushes", flush=True)
                return
            while len(pending) > 8 or (pending and pending[0][0].done()):
                fut, k = pending.popleft()
                fut.wait()
                os.write(acked, k.astype(np.int64).tobytes())
        while pending:
            fut, k = pending.popleft()
            fut.wait()
            os.write(acked, k.astype(np.int64).tobytes())
        for fut in localizes:
            fut.wait()
        print(f"storm done after {i + 1} pushes, members {node.members}", flush=True)
        worker.barrier()
        if hot:
            worker.wait_replica_sync()
            worker.barrier()
            np.save(out / f"replica-{node.rank}.npy", table.pull(hot_keys(rows, hot)))
        if localize:
            held, copies = table.pull_if_local(np.arange(rows))  # its range(s) and the keys it reads
            np.save(out / f"reader-{node.rank}-keys.npy", np.flatnonzero(held))
            np.save(out / f"reader-{node.rank}-rows.npy", copies[held])
        if node.rank == min(node.members):
            np.save(out / "final.npy", table.pull(np.arange(rows)))
        backups = node.server.backups
        for (t, r), copy in (backups.copies.backup.items() if backups is not None else ()):
            keys = np.arange(copy.start, copy.stop)
            np.save(out / f"backup-{node.rank}-{r}.npy", copy.read(keys)[0])
        worker.barrier()
        worker.close()
        print("storm finished", flush=True)


def aggregate(out: Path, rows: int, expected: int, victim: int = -1, kill_after: int = 0) -> None:
    """An aggregated table (pskv.NodeAggregate, async) with backups: 2 threads per node push ones
    into the node's column of the same 16 keys each round (the node's sum: 2 per key and round),
    then pull them; a pulled row's own column must be exactly 2 x the rounds of this node that
    included the key. Thread 0 logs each round's keys (sent-R, acked-R once its pull returned).
    Rounds go on until CHANGES membership changes were seen and 150 more rounds ran; then the
    survivors save the table halved (final.npy) and their backup copies, as `storm` does.
    With `victim` >= 0 the table is BSP: every node pushes the same keys each round (a round of a
    key completes with every live node's sum), for _BSP_ROUNDS rounds; a pulled row's columns of
    every node but the victim must be exactly 2 x this node's rounds of the key."""
    import signal
    import threading

    from pskv import _hooks

    bsp = victim >= 0
    written = []

    def die(node: int, keys) -> None:
        written.append(node)
        if node == victim and len(written) == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    with _hooks.installed("rounds.written", die), pskv.init() as node:
        n, rank = node.num_nodes, node.rank
        node.table("w", rows, n, aggregate=pskv.NodeAggregate(), consistency=pskv.BSP() if bsp else pskv.Async())
        others = [r for r in range(n) if r != victim]
        changes = []
        node.on_membership_change(changes.append)
        sent = os.open(out / f"sent-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        acked = os.open(out / f"acked-{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        meet = threading.Barrier(2, timeout=120)
        plan = {"stop": False, "seen_at": None, "wrong": 0, "rounds": 0}

        def work(worker) -> None:
            table = worker.table("w")
            rng = np.random.default_rng(0 if bsp else rank)  # the same keys in both threads (BSP: all nodes)
            counts = np.zeros(rows, np.int64)
            values = np.zeros((16, n), np.float32)
            values[:, rank] = 1.0
            for i in range(_BSP_ROUNDS if bsp else _MAX_PUSHES):
                if not bsp and i % 50 == 0:  # both threads stop at the same round (else one would wait for the other)
                    if worker.thread == 0:
                        if plan["seen_at"] is None and len(changes) >= expected:
                            plan["seen_at"] = i
                        plan["stop"] = plan["seen_at"] is not None and i - plan["seen_at"] >= 150
                    meet.wait()
                    if plan["stop"]:
                        break
                keys = rng.choice(rows, 16, replace=False)
                if worker.thread == 0:
                    os.write(sent, keys.astype(np.int64).tobytes())
                table.push(keys, values)
                got = table.pull(keys)
                counts[keys] += 1
                if worker.thread == 0:
                    os.write(acked, keys.astype(np.int64).tobytes())
                    plan["wrong"] += int((got[:, others if bsp else [rank]] != 2 * counts[keys, None]).sum())
                    plan["rounds"] = i + 1
                if i == 200 and worker.thread == 0:
                    print("storm running", flush=True)

        node.run(work, threads=2)
        print(f"aggregated rounds {plan['rounds']}, wrong rows pulled {plan['wrong']}, members {node.members}",
              flush=True)
        level2 = getattr(node.server.aggregators[table_id(node, "w")], "__self__", None)
        print(f"level 2: {level2!r}", flush=True)
        worker = node.worker()
        worker.barrier()
        table = worker.table("w")
        if rank == min(node.members):
            np.save(out / "final.npy", table.pull(np.arange(rows)) / 2)
        for (t, r), copy in node.server.backups.copies.backup.items():
            np.save(out / f"backup-{rank}-{r}.npy", copy.read(np.arange(copy.start, copy.stop))[0] / 2)
        worker.barrier()
        worker.close()
        print("storm finished", flush=True)


def checkpoint(out: Path, rows: int) -> None:
    """Every node pushes, then checkpoints; node 2 is SIGKILLed while writing its files. The others
    take the checkpoint again without it; the lowest live node saves the table as it was then."""
    import signal

    from pskv import _hooks

    with pskv.init() as node:
        table = node.table("w", rows, node.num_nodes, updater=pskv.Adagrad(lr=0.1))
        rng = np.random.default_rng(node.rank)
        values = np.ones((16, node.num_nodes), np.float32)
        for _ in range(200):
            table.push(rng.choice(rows, 16, replace=False), values)
        table.pull(np.arange(rows))
        worker = node.worker()
        worker.barrier()

        def die(node: int, step: int, path) -> None:
            if node == 2:
                os.kill(os.getpid(), signal.SIGKILL)

        with _hooks.installed("checkpoint.writing", die):
            info = node.checkpoint(out / "ckpt")
        print(f"checkpoint {info.path.name}, members {node.members}", flush=True)
        if node.rank == min(node.members):
            np.save(out / "at-checkpoint.npy", table.pull(np.arange(rows)))
        worker.barrier()
        worker.close()


if __name__ == "__main__":
    if sys.argv[1] == "checkpoint":
        checkpoint(Path(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "aggregate":
        aggregate(Path(sys.argv[2]), int(sys.argv[3]), *map(int, sys.argv[4:7]))
    elif sys.argv[1] == "storm":
        storm(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), *map(int, sys.argv[6:9]))
    else:
        raise SystemExit(f"unknown scenario {sys.argv[1]!r}")
