"""Node programs for intent signaling: `python intent_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values itself
and exits non-zero when an assertion fails; it prints `NAME ok` at the end.
"""

from __future__ import annotations

import faulthandler
import sys
import time

import numpy as np

import pskv

ROWS = 600


def _until(what: str, done, w: pskv.Worker, seconds: float = 30.0) -> None:
    """Advance (act on verdicts) and wait for this worker's moves until done(); AssertionError after `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s"
        w.advance_clock(0)
        w.wait_all(30)
        time.sleep(0.005)


def decide(node: pskv.Node, threads: int) -> None:
    """Keys one node intends move to it (also past another node's lease); a key several intend stays
    with the first; windows that end leave no intent at the managers; values stay exact."""
    n, me = node.num_nodes, node.rank
    t = node.table("d", rows=ROWS, dim=2, placement=pskv.Relocate(lease=60.0))  # long leases: intents pass them
    per = ROWS // n
    w = node.worker()
    h = w.table("d")
    state = node.catalog.get("d")
    board = node.server.intents
    mine = np.arange(((me + 1) % n) * per + 5, ((me + 1) % n) * per + 25)  # 20 keys the next node manages
    shared = np.arange(2 * per - 12, 2 * per - 2) if n > 2 else np.arange(per - 12, per - 2)  # managed by node 1 or 0
    # a lease: node n-1 localizes node 0's keys first (60 s: a plain localize by another node is declined)
    leased = np.arange(40, 50)
    if me == n - 1:
        h.localize(leased).wait(30)
    w.barrier()
    if me == 0:
        assert not h.pull_if_local(leased)[0].any()
        h.localize(leased).wait(30)  # declined: node n-1's lease holds them
        assert not h.pull_if_local(leased)[0].any(), "a plain localize passed another node's lease"
    w.barrier()
    # 1. the shared keys: node 0 first, alone, so they move to it; then every other node intends them too
    if me == 0:
        h.intent(shared, 1, 6)
        h.intent(leased, 1, 6)  # only node 0 intends these: they move, lease or not
        w.advance_clock(0)
        _until("node 0's sole intents", lambda: h.pull_if_local(np.concatenate([shared, leased]))[0].all(), w)
    w.barrier()
    h.intent(mine, 1, 6)
    if me != 0:
        h.intent(shared, 1, 6)
    w.advance_clock(0)
    _until("this node's own keys", lambda: h.pull_if_local(mine)[0].all(), w)
    w.barrier()  # every INTENT answered (a barrier drains the node's requests)
    local = h.pull_if_local(shared)[0]
    assert local.all() if me == 0 else not local.any(), f"node {me}: shared keys local {local.tolist()}"
    manager_of = state.ranges.manager_of
    all_mine = np.concatenate([np.arange(((r + 1) % n) * per + 5, ((r + 1) % n) * per + 25) for r in range(n)])
    for keys, count in ((all_mine, 1), (shared, n)):
        here = keys[manager_of(keys) == me]
        assert (board.intending(state.spec.table_id, here) == count).all(), (keys, board)
    stats = node.stats()["tables"]["d"]
    assert stats["intent_moves"] == len(mine) + (len(shared) + len(leased) if me == 0 else 0), stats
    # pulls of this node's intended keys send no message
    sent = node.stats()["messages_sent"]
    for _ in range(20):
        h.pull(mine)
    assert node.stats()["messages_sent"] == sent, "a pull of keys moved here by intents sent a message"
    # every node pushes every key it intends and the shared ones: exact sums wherever they are
    for _ in range(10):
        h.push(np.concatenate([mine, shared]), np.ones((len(mine) + len(shared), 2)))
    # 2. the windows end at clock 6: the managers hear of it, the keys stay where they are
    for _ in range(6):
        w.advance_clock()
    assert w.intent_clock == 6
    w.barrier()
    for keys in (all_mine, shared, leased):
        here = keys[manager_of(keys) == me]
        assert (board.intending(state.spec.table_id, here) == 0).all(), board
    assert h.pull_if_local(mine)[0].all(), "a key moved by an intent left when its window ended"
    rows = h.pull(np.concatenate([mine, shared]))
    assert (h.pull(all_mine) == 10).all()
    assert (rows[len(mine):] == 10 * n).all(), rows[len(mine):]
    w.barrier()
    w.close()
    print(f"decide ok {stats}")


def exact(node: pskv.Node, threads: int, variant: str) -> None:
    """Every thread intends random keys for short windows, pushes ones to them and pulls them, with
    intents moving keys all the while; the sums are exact (async, BSP, static replicas, backups)."""
    kw = {}
    if variant == "bsp":
        kw["consistency"] = pskv.BSP()
    if variant == "replicate":
        kw["replicate"] = pskv.Replicate(keys=[0, 1, 300])
    node.table("e", rows=ROWS, dim=2, **kw)
    steps = 120

    def work(w: pskv.Worker) -> None:
        t = w.table("e")
        rng = np.random.default_rng([w.rank, w.thread, 7])
        batches = [rng.choice(ROWS, 12, replace=False) for _ in range(steps)]
        for i in range(min(4, steps)):
            t.intent(batches[i], i)
        w.advance_clock(0)
        for i, keys in enumerate(batches):
            if i + 4 < steps:
                t.intent(batches[i + 4], i + 4, i + 6)
            t.push(keys, np.ones((len(keys), 2)))
            if i % 3 == 0:
                t.pull(keys)
            if variant == "bsp":
                w.clock()
            w.advance_clock()
        w.wait_replica_sync()
        w.barrier()
        total = t.pull(np.arange(ROWS))[:, 0].sum()
        assert total == steps * 12 * w.num_nodes * threads, (total, node.stats()["tables"]["e"])
        w.barrier()

    node.run(work, threads=threads)
    s = node.stats()["tables"]["e"]
    assert s["intent_starts"] > 0 and s["intent_ends"] == s["intent_starts"], s
    if variant not in ("backups", "replicate") or node.num_nodes > 1:
        assert s["intent_moves"] > 0, s
    print(f"exact ok {variant} {s}")


def main() -> None:
    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints every thread's stack, then exits
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
