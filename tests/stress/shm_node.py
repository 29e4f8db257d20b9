"""Node program for tests/stress/test_shm_stress.py: `python shm_node.py storm OUT ROWS` on every
node of a cluster whose nodes share one host, so that each reads and writes the others' shards in
shared memory (store.shm, store.peer) while the test SIGKILLs or SIGSTOPs one of them.

Every node runs THREADS workers; worker g (= rank * THREADS + thread) pushes ones into column g of
a (ROWS, G) table (updater add: store.rowlock's row kernels), to 16 distinct keys of one node's
range at a time (the ranges in turn, so one shard serves a push whole), and waits for each push
before the next: it appends the keys to OUT/sent-g before sending and to OUT/acked-g once the push
completed (raw int64), so at most one push of a worker is in flight. Every 4th step it pulls 16
keys and checks its own column exactly (read-my-writes: only it writes column g, and nothing of
its is in flight).

With backups the workers go on until the node saw the membership change and 300 more steps; the
survivors meet, the lowest rank writes the whole table to OUT/final.npy, and each prints how many
keys it served through shared memory. Without backups the victim's failure ends the cluster: a
worker stops at its first NodeFailure (Fenced on the victim, once woken), and each survivor reads
its own shard's rows from memory (a stripe the victim held is freed after a second: store.spin);
the test reads every shard's final rows from its files, mapped before the signal. Either way each node prints `files dir=D table=T range=A,B pid=P` first
and `storm running` once every worker made 100 pushes.

    python shm_node.py storm OUT ROWS VICTIM kill|stop    node VICTIM's worker 0, once OUT/die
        exists, takes stripe 0's spinlock of node VICTIM + 1's shard (its files) and SIGKILLs or
        SIGSTOPs its own process while holding it (a signal from outside rarely meets a holder);
        stopped, it lets go once woken

    python shm_node.py idle        declare a table and close (a node's start sweeps dead processes' files)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import pskv
from pskv.store import shm, spin

THREADS = 2
_AFTER_CHANGE = 300
_MAX_SECONDS = 60.0  # a storm that neither saw a change nor failed by then stops (the test then fails)


def _hold(node: pskv.Node, spec, owner: int, how: str) -> None:
    """Take stripe 0's word of node `owner`'s shard (mapped from its files) and SIGKILL or SIGSTOP
    this process; woken, let go."""
    found = shm.find_meta(node.store.segments.dir, owner, spec.table_id)
    assert found is not None, f"node {owner}'s shard is not in shared memory"
    words = shm.split_meta(found[1])[1]
    spin.acquire(words, 1, np.int32(os.getpid()))
    print(f"{how} holding stripe 0 of node {owner}'s shard", flush=True)
    os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    spin.release(words, 1)
    print("woken: let go of the stripe", flush=True)


def storm(out: Path, rows: int, holder: int = -1, how: str = "kill") -> None:
    node = pskv.init()
    n, backups = node.num_nodes, node.config.backups > 0
    if not backups:  # (the launcher stops a failed cluster's survivors 5 s after the death, with SIGKILL
        # 3 s after that: under load they may need longer to show that they stop by themselves)
        signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM from the launcher (noted)", flush=True))
    columns = n * THREADS
    node.table("w", rows, columns)
    st = node.catalog.get("w")
    bounds = [r * rows // n for r in range(n + 1)]
    print(f"files dir={node.store.segments.dir if node.store.segments else None} table={st.spec.table_id} "
          f"range={st.shard.start},{st.shard.stop} pid={os.getpid()}", flush=True)
    changes: list = []
    node.on_membership_change(changes.append)
    started = time.monotonic()
    failures: list[str] = []

    def train(w: pskv.Worker) -> None:
        g = w.rank * THREADS + w.thread
        table = w.table("w")
        rng = np.random.default_rng([w.rank, w.thread])
        sent = os.open(out / f"sent-{g}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        acked = os.open(out / f"acked-{g}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        mine = np.zeros(rows, np.int64)  # this worker's acknowledged pushes per key
        values = np.zeros((16, columns), np.float32)
        values[:, g] = 1.0
        w.barrier()
        after, step = 0, 0
        try:
            while time.monotonic() - started < _MAX_SECONDS:
                if changes:
                    after += 1
                    if after > _AFTER_CHANGE:
                        break
                r = step % n
                keys = rng.choice(np.arange(bounds[r], bounds[r + 1]), 16, replace=False)
                os.write(sent, keys.astype(np.int64).tobytes())
                table.push(keys, values).wait(60)
                os.write(acked, keys.astype(np.int64).tobytes())
                mine[keys] += 1
                if step % 4 == 3:
                    look = rng.choice(rows, 16, replace=False)
                    got = table.pull(look, timeout=60)[:, g]
                    if not np.array_equal(got, mine[look]):
                        bad = np.flatnonzero(got != mine[look])[0]
                        failures.append(f"worker {g}: key {look[bad]} reads {got[bad]}, its own pushes {mine[look[bad]]}")
                        return
                step += 1
                if w.rank == holder and w.thread == 0 and step > 100 and (out / "die").exists():
                    _hold(node, st.spec, (holder + 1) % n, how)
                if step == 100 and w.thread == 0:
                    print("storm running", flush=True)
        except pskv.NodeFailure as exc:
            print(f"worker {g} stopped after {step} pushes: {type(exc).__name__}", flush=True)
            if backups:
                raise
        print(f"worker {g} done after {step} pushes", flush=True)

    try:
        node.run(train, threads=THREADS)
    except pskv.NodeFailure as exc:
        if backups:
            raise
        print(f"node {node.rank}: the cluster failed: {exc}", flush=True)
    assert not failures, failures
    if backups:
        w = node.worker()
        w.barrier()
        if node.rank == min(node.members):
            np.save(out / "final.npy", w.table("w").pull(np.arange(rows), timeout=60))
        print(f"storm ok node={node.rank} members={node.members} shared={st.shared_keys}", flush=True)
        w.barrier()
        w.close()
        node.close()
        return
    keys = np.arange(st.shard.start, st.shard.stop)
    rows_out = np.zeros((len(keys), columns), np.float32)
    t0 = time.monotonic()
    try:
        miss = st.shard.pull(keys, rows_out)
        assert not len(miss), f"node {node.rank}: its shard lacks keys {keys[miss][:5]}"
        how = f"read own rows in {time.monotonic() - t0:.2f}s"
    except pskv.NodeFailure:  # a stopped victim holds a stripe of this shard: the wait ends (store.spin.watch)
        how = f"own rows held by the stopped node: the wait ended with this node's failure in {time.monotonic() - t0:.2f}s"
    print(f"storm ok node={node.rank} failed shared={st.shared_keys} {how}", flush=True)
    try:
        node.close()
    except pskv.PskvError:
        pass


def idle() -> None:
    with pskv.init() as node:
        node.table("i", 8, 1)
        print("idle ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "storm":
        storm(Path(sys.argv[2]), int(sys.argv[3]), *((int(sys.argv[4]), sys.argv[5]) if len(sys.argv) > 4 else ()))
    else:
        idle()
