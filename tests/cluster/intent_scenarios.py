"""Node programs for intent signaling: `python intent_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values itself
and exits non-zero when an assertion fails; it prints `NAME ok` at the end.
"""

from __future__ import annotations

import faulthandler
import sys
import time
from pathlib import Path

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
    node.table("d", rows=ROWS, dim=2, placement=pskv.Relocate(lease=60.0))  # long leases: intents pass them
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
        both = np.concatenate([shared, leased])
        _until("node 0's sole intents", lambda: h.pull_if_local(both)[0].all(), w)  # noqa: PLW0108 (read each time)
    w.barrier()
    h.intent(mine, 1, 6)
    if me != 0:
        h.intent(shared, 1, 6)
    w.advance_clock(0)
    _until("this node's own keys", lambda: h.pull_if_local(mine)[0].all(), w)  # noqa: PLW0108 (read each time)
    w.barrier()  # every INTENT answered (a barrier drains the node's requests)
    local = h.pull_if_local(shared)[0]
    assert local.all() if me == 0 else not local.any(), f"node {me}: shared keys local {local.tolist()}"
    manager_of = state.ranges.manager_of
    all_mine = np.concatenate([np.arange(((r + 1) % n) * per + 5, ((r + 1) % n) * per + 25) for r in range(n)])
    for keys, count in ((all_mine, 1), (shared, n)):
        here = keys[manager_of(keys) == me]
        counted = board.intending(state.spec.table_id, here)
        assert (counted == count).all(), (here, counted, count, board)
    stats = node.stats()["tables"]["d"]
    assert stats["intent_moves"] == len(mine) + (len(shared) + len(leased) if me == 0 else 0), stats
    # pulls of this node's intended keys send no message
    sent = node.stats()["tables"]["d"]["remote_keys"]  # (not the node's messages: heartbeats go meanwhile)
    for _ in range(20):
        h.pull(mine)
    assert node.stats()["tables"]["d"]["remote_keys"] == sent, "a pull of keys moved here by intents sent a message"
    # every node pushes every key it intends and the shared ones: exact sums wherever they are
    for _ in range(10):
        h.push(np.concatenate([mine, shared]), np.ones((len(mine) + len(shared), 2)))
    # 2. the windows end at clock 6: the managers hear of it, the keys stay where they are. (Not before every
    # node read its board above: a node that ended its windows first made another's manager count 0 there.)
    w.barrier()
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


OPTIONS = {  # table -> node.table() keywords (where: the run's directory, for disk tables)
    "dense": lambda where, rank: {},
    "disk": lambda where, rank: {"storage": "disk", "cache_rows": 16, "path": where / f"rows-{rank}"},
    "caches": lambda where, rank: {"placement": pskv.Relocate(location_caches=True)},
    "replicate": lambda where, rank: {"replicate": pskv.Replicate(keys=[1, 2, 400], syncs_per_sec=20)},
    "sampling": lambda where, rank: {"sampling": pskv.Sampling(np.ones(ROWS), scheme="pool", reuse=2)},
    "bsp": lambda where, rank: {"consistency": pskv.BSP(), "cache": pskv.Cache(rows=32, buffer_rows=16)},
    "filters": lambda where, rank: {"filters": "keycache,fp16"},  # (ones: fp16 holds them exactly)
}
STEPS = 40


def _train(w: pskv.Worker, names, steps: range) -> int:
    """Every table: intents two steps ahead, pushes of ones in column 0 (push_pull on dense, draws
    on sampling); returns the ones this worker pushed per table."""
    rng = np.random.default_rng([w.rank, w.thread, steps.start])
    keys = [rng.choice(ROWS, 6, replace=False) for _ in steps]
    pushed = 0
    for name in names:
        t = w.table(name)
        t.intent(keys[0], steps.start)
        t.intent(keys[1], steps.start + 1)
    w.advance_clock(0)
    for i, step in enumerate(steps):
        for name in names:
            t = w.table(name)
            if i + 2 < len(keys):
                t.intent(keys[i + 2], step + 2, step + 3)
            if name == "sampling":
                h = t.prepare_sample(6)
                drawn, _ = t.pull_sample(h, 6)
                t.finish_sample(h)
                t.push(drawn, np.column_stack([np.ones(6), np.zeros(6)]))
            elif name == "dense" and i % 4 == 0:
                rows = t.push_pull(keys[i], np.column_stack([np.ones(6), np.zeros(6)])).wait(60)
                assert (rows[:, 0] >= 1).all(), rows
            else:
                t.push(keys[i], np.column_stack([np.ones(6), np.zeros(6)]))
            if i % 3 == 0:
                t.pull(keys[i])
        pushed += 6
        w.clock()  # (the BSP table's; the others' clock only counts)
        w.advance_clock()
    return pushed


def _totals(w: pskv.Worker, names) -> dict:
    return {name: float(w.table(name).pull(np.arange(ROWS))[:, 0].sum()) for name in names}


def compose(node: pskv.Node, threads: int, where: str, ckpt: str) -> None:
    """Intents on a table per option, trained by every thread of every node with exact sums; intents on
    a sparse and an aggregated table are taken and ignored; then a checkpoint (restored by `restored`)."""
    where_ = Path(where)
    for name, kw in OPTIONS.items():
        node.table(name, rows=ROWS, dim=2, **kw(where_, node.rank))
    node.table("sparse", rows=None, dim=2, key_space="uint64")
    node.table("agg", rows=ROWS, dim=2, aggregate=pskv.NodeAggregate())

    def work(w: pskv.Worker) -> None:
        w.table("sparse").intent(np.array([2**40, 7], np.uint64), 0, 3)  # no effect: sparse keys stay
        w.table("agg").intent(np.array([1, 2]), 0, 3)  # nor do an aggregated table's
        w.barrier()
        _train(w, list(OPTIONS), range(STEPS))
        w.wait_replica_sync()
        w.barrier()
        expected = STEPS * 6 * w.num_nodes * threads
        totals = _totals(w, OPTIONS)
        assert all(v == expected for v in totals.values()), (expected, totals)
        w.barrier()

    node.run(work, threads=threads)
    stats = node.stats()["tables"]
    assert node.catalog.get("sparse").intents is None and node.catalog.get("agg").intents is None
    moved = {name: stats[name].get("intent_localized", 0) for name in OPTIONS}
    assert all(stats[name]["intent_starts"] == stats[name]["intent_ends"] > 0 for name in OPTIONS), stats
    shared = sum(node.catalog.get(name).shared_keys for name in OPTIONS)
    assert shared > 0, "no key was served from a co-located node's shard"
    node.checkpoint(ckpt)
    print(f"compose ok moved={moved} shared={shared}")


def restored(node: pskv.Node, threads: int, where: str, ckpt: str, saved: str) -> None:
    """The checkpoint of `compose` restored onto this cluster (another node count): the sums are there;
    intents and pushes go on, exactly."""
    names = list(OPTIONS)
    for name, kw in OPTIONS.items():
        node.table(name, rows=ROWS, dim=2, **kw(Path(where), node.rank))
    before = int(saved) * STEPS * 6

    def work(w: pskv.Worker) -> None:
        w.barrier()
        assert all(v == before for v in _totals(w, names).values()), (before, _totals(w, names))
        w.barrier()
        _train(w, names, range(STEPS, 2 * STEPS))
        w.barrier()
        expected = before + STEPS * 6 * w.num_nodes * threads
        assert all(v == expected for v in _totals(w, names).values()), (expected, _totals(w, names))
        w.barrier()

    node.run(work, threads=threads)
    print(f"restored ok {node.stats()['tables']['dense'].get('intent_localized', 0)}")


def elastic(node: pskv.Node, threads: int, out: str) -> None:
    """Intents on nodes 0 and 1; node 2 joins and all three train with intents; node 1 leaves (it hands
    its keys over); nodes 0 and 2 read exact sums and go on with intents."""
    out_dir = Path(out)
    joined = node.config.join is not None
    node.table("e", rows=ROWS, dim=2)
    w = node.worker()
    a, b = range(STEPS), range(STEPS, 2 * STEPS)
    if not joined:
        w.barrier()
        _train(w, ["e"], a)
        (out_dir / f"ready-{node.rank}").touch()
        _wait((out_dir / "joined").exists, f"node {node.rank}: no node joined")
    else:
        (out_dir / "joined").touch()
    _train(w, ["e"], b)
    w.barrier()
    if node.rank == 1:
        w.close()
        node.leave()
        print("node 1 left", flush=True)
        return
    _wait(lambda: 1 not in node.members, f"node {node.rank}: node 1 never left ({node.members})")
    expected = (2 * len(a) + 3 * len(b)) * 6
    assert _totals(w, ["e"])["e"] == expected, (expected, _totals(w, ["e"]))
    w.barrier()
    _train(w, ["e"], range(2 * STEPS, 3 * STEPS))  # intents after the leave: the managers of its ranges changed
    w.barrier()
    assert _totals(w, ["e"])["e"] == expected + 2 * STEPS * 6
    w.barrier()
    w.close()
    print(f"elastic ok node={node.rank} {node.stats()['tables']['e']}", flush=True)


def _wait(done, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def main() -> None:
    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints every thread's stack, then exits
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
