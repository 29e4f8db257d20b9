"""Node programs for copies of intended keys (client.intent_sync): `python intent_copy_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values itself
and exits non-zero when an assertion fails; it prints `NAME ok` at the end.
"""

from __future__ import annotations

import faulthandler
import sys
import threading

import numpy as np
from intent_scenarios import ROWS, _until, _wait

import pskv
from pskv.client import intent_sync

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
        intent_sync.SYNCS_PER_SEC = 0.0  # (before the table is declared) no rounds: only flushes send
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
    intent_sync.SYNCS_PER_SEC = 0.0  # (before the table is declared) rounds only when this scenario runs one
    node.table("s", rows=ROWS, dim=2)
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


def main() -> None:
    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints every thread's stack, then exits
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
