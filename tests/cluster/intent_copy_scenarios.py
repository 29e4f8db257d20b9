"""Node programs for copies of intended keys (client.intent_sync): `python intent_copy_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values itself
and exits non-zero when an assertion fails; it prints `NAME ok` at the end.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import signal
import sys
import threading
import time

import numpy as np
from intent_scenarios import ROWS, _until, _wait

import pskv
from pskv import _hooks
from pskv.net.wire import Kind

SHARED = np.arange(3, ROWS, 20)  # 30 keys over every node's range: every worker of every node intends them


def copies(node: pskv.Node, threads: int, variant: str, ckpt: str = "") -> None:
    """Every worker of every node intends SHARED for the whole run: each node gets copies of those it
    does not own (the managers' grants) and serves their pulls and pushes from them; the pushes reach
    the owners exactly once: with syncs running (async, BSP, SSP), and with no sync but flushes while
    a checkpoint is taken (`checkpoint`: the copies hold every push of the first half unsent; the test
    reads the checkpoint's rows); copies come back after the checkpoint and go when the windows end."""
    kw = {}
    if variant == "bsp":
        kw["consistency"] = pskv.BSP()
    if variant == "ssp":
        kw["consistency"] = pskv.SSP(1)
    if variant == "checkpoint":
        kw["placement"] = pskv.Relocate(intent_sync=math.inf)  # no rounds: only flushes send
    node.table("c", rows=ROWS, dim=2, **kw)
    state = node.catalog.get("c")
    n, steps = node.num_nodes, 30
    own = SHARED[state.shard.slot[SHARED] >= 0]
    mine = SHARED[state.shard.slot[SHARED] < 0]  # not owned here: copies expected
    assert len(mine) == len(SHARED) - len(own) and len(own) == len(SHARED) // n, own

    def copied() -> bool:
        reps = state.copies.replicas
        return reps is not None and bool(reps.mask(mine).all())

    def work(w: pskv.Worker) -> None:
        t = w.table("c")
        t.intent(own, 0, steps + 1)  # first alone: the managers would move a key to the first node to intend it
        w.advance_clock(0)
        w.barrier()  # (every INTENT answered)
        t.intent(SHARED, 0, steps + 1)  # then each key by every node: copies, no move
        w.advance_clock(0)
        _until("copies of the shared keys", copied, w)  # (no barrier from here: a barrier drops every copy)
        reps = state.copies.replicas
        served = reps.served
        for _ in range(10):
            t.pull(mine)
        if variant in ("async", "checkpoint"):  # (BSP/SSP: the row cache serves pulls before the copies)
            assert reps.served >= served + 10 * len(mine), (reps.served, served)
            assert threads > 1 or reps.served == served + 10 * len(mine), (reps.served, served)
        for i in range(steps):
            t.push(SHARED, np.ones((len(SHARED), 2)))
            if i % 5 == 0:
                t.pull(SHARED)
            if variant in ("bsp", "ssp"):
                w.clock()
            w.advance_clock()
            if variant == "checkpoint" and i == steps // 2 - 1:  # (one thread: node.checkpoint's caller)
                assert reps.dirty[reps.index[mine]].all(), "no copy holds an unsent push"
                assert (t.pull(mine)[:, 0] >= steps // 2).all(), t.pull(mine)  # its own pushes (and those in the base)
                node.checkpoint(ckpt)
                assert reps.live == 0, reps  # the flush dropped them; the starts are told again:
                _until("the copies again", copied, w)
        if variant != "checkpoint":  # a sync round takes the last pushes while the windows still hold the copies
            _wait(lambda: reps.keys_synced > 0, f"node {node.rank}: no sync round took a push: {reps}", 30)
        w.advance_clock()  # the windows end: the copies linger, then go (with sync rounds; else at the barrier)
        if variant != "checkpoint":
            _wait(lambda: reps.live == 0, f"node {node.rank}: copies left after the windows ended: {reps} "
                  f"{state.copies._last}", 30)
        w.barrier()
        rows = t.pull(SHARED)
        assert (rows[:, 0] == steps * n * threads).all(), (rows[:, 0], node.stats()["tables"]["c"])
        assert (t.pull(np.setdiff1d(np.arange(ROWS), SHARED)) == 0).all()
        w.barrier()

    node.run(work, threads=threads)
    s = node.stats()["tables"]["c"]
    assert s["intent_copies_made"] >= len(mine) and s["intent_copies"] == 0, s
    assert s["intent_copy_rounds"] > 0 and (variant == "checkpoint" or s["intent_copy_keys_synced"] > 0), s
    print(f"copies ok {variant} {s}")


def copies_set(node: pskv.Node, threads: int) -> None:
    """A set of keys with copies here comes after every push made before it: node 0 pushes into its
    copies, another thread syncs them (a round takes the pushes), node 0 sets the keys at once and
    pushes again; the others only intend the keys. Exact: the set's value plus the pushes after it."""
    node.table("s", rows=ROWS, dim=2, placement=pskv.Relocate(intent_sync=math.inf))  # rounds: when this runs one
    state = node.catalog.get("s")
    keys = np.arange(ROWS // 2, ROWS // 2 + 40)  # node 1 owns them (2 nodes)
    w = node.worker()
    t = w.table("s")
    if node.rank == 1:  # the owner first (a key's first intending node would get it moved there)
        t.intent(keys, 0, 100)
        w.advance_clock(0)
    w.barrier()
    if node.rank == 0:
        t.intent(keys, 0, 100)
        w.advance_clock(0)
        _until("copies", lambda: state.copies.replicas is not None and bool(state.copies.replicas.mask(keys).all()), w)
        for _ in range(5):
            t.push(keys, np.ones((len(keys), 2)))
        other = threading.Thread(target=state.copies.round, args=(False,))
        other.start()  # its push_pull leaves from that thread...
        other.join()
        t.set(keys, np.full((len(keys), 2), 100.0))  # ...and this set after it, from this one
        for _ in range(3):
            t.push(keys, np.ones((len(keys), 2)))
    w.barrier()  # (drops every copy: the pulls below read the owner's rows)
    rows = t.pull(keys)
    assert (rows == 103).all(), rows[:, 0]
    w.barrier()
    w.close()
    print(f"copies_set ok {node.stats()['tables']['s']}")


def sync_rate(node: pskv.Node, threads: int) -> None:
    """2 nodes, PSKV_INTENT_SYNC=inf (the node's: no sync rounds). Node 1 owns 20 keys both nodes intend
    in two tables: "fast" (its own pskv.Relocate(intent_sync=0.02)) and "slow" (the node's); node 0 copies
    them. Node 1 pushes ones into both 5 times, one at a time: each push acknowledged, then announced
    through a third table, and the next only after node 0 saw it in its fast copies. Counted in rounds:
    node 0's fast copies show every push, each after a round of their own (5 pushes, >= 5 rounds: a
    round's pull shows one state), the slow ones none of them (0 rounds) until the barrier's flush;
    after it both tables hold 5 exactly."""
    assert node.config.intent_sync == math.inf, node.config
    n, me, steps = node.num_nodes, node.rank, 5
    node.table("fast", rows=ROWS, dim=2, placement=pskv.Relocate(intent_sync=0.02))
    node.table("slow", rows=ROWS, dim=2)
    node.table("flag", rows=n, dim=1)  # key r: node r's count (node 1: pushes made; node 0: pushes seen)
    copies = {name: node.catalog.get(name).copies for name in ("fast", "slow")}
    assert copies["fast"].rate == 50.0 and copies["slow"].rate == 0.0, copies
    keys = np.arange(ROWS // 2 + 7, ROWS, 15)[:20]  # node 1's
    w = node.worker()
    fast, slow, flag = w.table("fast"), w.table("slow"), w.table("flag")
    mine, other = np.array([me]), np.array([1 - me])
    if me == 1:  # the owner first (a key's first intending node would get it moved there)
        for t in (fast, slow):
            t.intent(keys, 0, 1000)
        w.advance_clock(0)
    w.barrier()
    if me == 0:
        for t in (fast, slow):
            t.intent(keys, 0, 1000)
        w.advance_clock(0)
        _until("copies", lambda: all(c.replicas is not None and c.replicas.mask(keys).all()
                                     for c in copies.values()), w)
        flag.push(mine, np.ones((1, 1))).wait(30)  # ready
        for i in range(1, steps + 1):
            _wait(lambda i=i: flag.pull(other)[0, 0] >= i, f"node 1's push {i}", 60)
            assert (slow.pull(keys) == 0).all(), slow.pull(keys)  # (read before and after: refreshed if rounds ran)
            _wait(lambda i=i: bool((fast.pull(keys) == i).all()), f"push {i} in the fast copies", 60)
            assert (slow.pull(keys) == 0).all(), slow.pull(keys)
            flag.push(mine, np.ones((1, 1))).wait(30)  # seen
        rounds = {name: c.replicas.rounds for name, c in copies.items()}
        assert rounds["fast"] >= steps and rounds["slow"] == 0, rounds
    else:
        _wait(lambda: flag.pull(other)[0, 0] >= 1, "node 0's copies", 60)
        for i in range(1, steps + 1):
            for t in (fast, slow):
                t.push(keys, np.ones((len(keys), 2))).wait(30)
            flag.push(mine, np.ones((1, 1))).wait(30)
            _wait(lambda i=i: flag.pull(other)[0, 0] >= i + 1, f"node 0 to see push {i}", 60)
    w.barrier()  # (drops every copy, their pushes sent: none here)
    for t in (fast, slow):
        assert (t.pull(keys) == steps).all(), t.pull(keys)
    w.barrier()
    w.close()
    print(f"sync_rate ok {node.stats()['tables']['fast']}")


def copies_failover(node: pskv.Node, threads: int, mode: str) -> None:
    """backups=1 on 3 nodes. Node 2 heads the range of 20 keys that every node intends; nodes 0 and 1
    copy them and push ones into their own column through the copies (a sync round every 0.02 s: rounds
    are in flight nearly all the time) until they saw the membership change and made 100 pushes more;
    node 2 pushes into its own column. Node 2 dies by SIGKILL: from the test (`test`), or from itself
    as its server takes node 1's 10th sync push, before applying it (`self`: a round left unanswered).
    After a barrier each survivor's column holds its pushes exactly: the promoted backup held every
    round its chain had answered, and the rest came again to the new head and were applied once. Then
    windows of more keys come and go (node 2's to their range's new head, no INTENT to the dead node,
    which nothing would answer: the barrier would wait for it), with pushes: exact again."""
    faulthandler.dump_traceback_later(150, exit=True)
    victim, n, me = 2, node.num_nodes, node.rank
    node.table("f", rows=ROWS, dim=n, placement=pskv.Relocate(intent_sync=0.02))
    state = node.catalog.get("f")
    per = ROWS // n
    keys = np.arange(victim * per + 3, (victim + 1) * per, 10)  # 20 keys of node 2's range
    changes: list = []
    node.on_membership_change(changes.append)
    w = node.worker()
    t = w.table("f")
    if me == victim:
        t.intent(keys, 0, 10**9)
        w.advance_clock(0)
    w.barrier()
    deadline = time.monotonic() + 120
    ones = np.zeros((len(keys), n))
    ones[:, me] = 1
    if me == victim:
        taken = []

        def die(node: int, header) -> None:  # pskv-server, before it handles the message
            if node == victim and header.kind == Kind.PUSH and header.origin == 1 and header.table == tid:
                taken.append(header)
                if len(taken) == 10:
                    os.kill(os.getpid(), signal.SIGKILL)

        tid = state.spec.table_id
        with _hooks.installed("server.handle", die) if mode == "self" else contextlib.nullcontext():
            print("copies running", flush=True)
            while True:  # until killed
                t.push(keys, ones)
                time.sleep(0.01)
                assert time.monotonic() < deadline, f"node {me} is still alive ({len(taken)} sync pushes taken)"
    t.intent(keys, 0, 10**9)
    w.advance_clock(0)
    _until("copies", lambda: state.copies.replicas is not None and bool(state.copies.replicas.mask(keys).all()), w)
    reps = state.copies.replicas
    pushes, after, synced = 0, 0, -1
    while after < 100:
        t.push(keys, ones)
        pushes += 1
        if pushes % 5 == 0:
            t.pull(keys)
        w.advance_clock()
        if pushes == 50:
            print("copies running", flush=True)
        if changes:
            after += 1
            synced = reps.keys_synced if synced < 0 else synced
        time.sleep(0.002)
        assert time.monotonic() < deadline, f"node {me}: no membership change after {pushes} pushes"
    w.barrier()  # every copy's pushes sent and answered
    rows = t.pull(keys)
    assert (rows[:, me] == pushes).all(), (pushes, rows[:, me], node.stats()["tables"]["f"])
    assert (t.pull(np.setdiff1d(np.arange(ROWS), keys))[:, me] == 0).all()
    # intents go on after the failover: windows of other keys of node 2's range (their manager is dead:
    # no verdict comes) and of node 0's (its manager alive), pushed while they come and go
    more = np.concatenate([np.arange(victim * per + 4, (victim + 1) * per, 10), np.arange(5, 25)])
    for i in range(20):
        if i % 4 == 0:
            t.intent(more, w.intent_clock + 1, w.intent_clock + 4)
        t.push(more, ones[:1].repeat(len(more), 0))
        w.advance_clock()
    w.barrier()
    assert (t.pull(more)[:, me] == 20).all(), t.pull(more)[:, me]
    assert (t.pull(keys)[:, me] == pushes).all()
    s = node.stats()["tables"]["f"]
    assert s["intent_copies_made"] >= len(keys) and s["intent_copy_keys_synced"] > 0, s
    w.barrier()
    w.close()
    print(f"copies_failover ok {mode} node {me}: {pushes} pushes, members {node.members}, synced "
          f"{synced} keys before the change and {reps.keys_synced} in all, {s}", flush=True)


def main() -> None:
    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints every thread's stack, then exits
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
