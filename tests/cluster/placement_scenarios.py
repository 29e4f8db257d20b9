"""Node programs for relocation, replication and sampling: `python placement_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values itself
and exits non-zero when an assertion fails; it prints `NAME ok` at the end.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time

import numpy as np

import pskv

ROWS = 600


def stress(node: pskv.Node, threads: int, variant: str) -> None:
    """Async pushes and pulls of a few hot keys, localized every 5 operations by every thread."""
    hot = np.array([3, 4, 250, 251, 598, 599])
    # lease 0: every localize moves (Lapse's chains); "lease": short leases, so moves and declines mix
    kw = {"placement": pskv.Relocate(location_caches=variant == "caches", lease=0.002 if variant == "lease" else 0)}
    if variant == "replicate":
        kw["replicate"] = pskv.Replicate(keys=hot[:2])
    node.table("h", rows=ROWS, dim=2, **kw)
    steps = 600

    def work(w: pskv.Worker) -> None:
        t = w.table("h")
        rng = np.random.default_rng([w.rank, w.thread])
        for step in range(steps):
            keys = rng.choice(hot, 4)
            t.push(keys, np.ones((4, 2)))
            if step % 5 == 0:
                t.localize(rng.choice(hot, 2))
            if step % 3 == 0:
                t.pull_async(keys)
        w.wait_replica_sync()
        w.barrier()
        total = t.pull(hot)[:, 0].sum()
        assert total == steps * 4 * w.num_nodes * threads, (total, node.stats()["tables"]["h"])
        w.barrier()

    node.run(work, threads=threads)
    s = node.stats()["tables"]["h"]
    assert s["relocated_in"] > 0 or variant == "replicate" and node.num_nodes == 1, s
    print(f"stress ok {variant} {s}")


def locality(node: pskv.Node, threads: int) -> None:
    """Ownership by range, after localize (also away from the manager), no message for local pulls, chains."""
    n = node.num_nodes
    t = node.table("l", rows=ROWS, dim=1, init=pskv.Uniform(0, 1, seed=1), placement=pskv.Relocate(lease=0))
    w = node.worker()
    start, stop = ROWS * node.rank // n, ROWS * (node.rank + 1) // n
    initial = t.pull(np.arange(ROWS))  # (ROWS, 1) before anything moves
    mask, _ = t.pull_if_local(np.arange(ROWS))
    assert np.array_equal(np.flatnonzero(mask), np.arange(start, stop)), "initial ownership is by range"
    w.barrier()
    # every node localizes a block managed by node 0; in turn, so each move starts from the previous owner
    block = np.arange(10, 20)
    for turn in range(n):
        if node.rank == (turn + 1) % n:
            t.localize(block).wait(60)  # a few ms when healthy; the bound only turns a hang into an error
            assert t.pull_if_local(block)[0].all(), f"turn {turn}: block not local after localize"
        w.barrier()
    owner = 0  # the last turn's node: (n - 1 + 1) % n
    assert t.pull_if_local(block)[0].all() == (node.rank == owner)
    # pulls of local keys send no message
    sent = node.stats()["messages_sent"]
    mine = np.arange(start, stop)[::3]  # owned here: node 0 got the block back in the last turn
    for _ in range(50):
        t.pull(mine)
    assert node.stats()["messages_sent"] == sent, "a pull of local keys sent a message"
    w.barrier()
    # a chain of concurrent localizes of the same keys by every node: one owner at the end, values unchanged
    chain = np.arange(ROWS - 30, ROWS, 2)
    for _ in range(5):
        t.localize(chain)
    w.wait_all()
    w.barrier()
    owners = t.pull_if_local(chain)[0]
    assert np.array_equal(t.pull(np.arange(ROWS)), initial), "values changed while keys moved"
    print(f"locality ok owned={int(owners.sum())}")
    w.barrier()
    w.close()


def phases(node: pskv.Node, threads: int) -> None:
    """Random key sets: (1) pulls+localizes keep initial values, (2) pulls never drop below what was seen
    under concurrent positive pushes, (3) pushes of deltas and their negation restore the initial values."""
    t = node.table("p", rows=ROWS, dim=3, placement=pskv.Relocate(location_caches=True, lease=0))
    w0 = node.worker()
    if node.rank == 0:  # integer values: float32 sums of them are exact in any order
        t.set(np.arange(ROWS), np.random.default_rng(2).integers(-50, 50, (ROWS, 3))).wait()
    w0.barrier()
    w0.close()
    initial = t.pull(np.arange(ROWS)).copy()

    def work(w: pskv.Worker) -> None:
        p = w.table("p")
        rng = np.random.default_rng([w.rank, w.thread, 9])
        for _ in range(60):  # phase 1
            keys = rng.choice(ROWS, 20, replace=False)
            p.localize(keys[:5])
            assert np.array_equal(p.pull(keys), initial[keys]), "phase 1: pull changed values"
        w.barrier()
        seen = p.pull(np.arange(ROWS)).astype(np.float64)
        for _ in range(150):  # phase 2: values only grow
            keys = rng.choice(ROWS, 20, replace=False)
            p.push(keys, np.ones((20, 3)))
            if rng.random() < 0.3:
                p.localize(keys[:4])
            now = p.pull(keys)
            assert (now >= seen[keys]).all(), "phase 2: a pulled value dropped below one seen before"
            seen[keys] = now
        w.barrier()
        base = p.pull(np.arange(ROWS)).astype(np.float64)
        w.barrier()
        deltas = []
        for _ in range(100):  # phase 3: +delta, later -delta
            keys = rng.choice(ROWS, 10)
            d = rng.integers(-4, 5, (10, 3)).astype(np.float32)
            deltas.append((keys, d))
            p.push(keys, d)
            if rng.random() < 0.3:
                p.localize(keys[:3])
        for keys, d in deltas:
            p.push(keys, -d)
        w.barrier()
        assert np.array_equal(p.pull(np.arange(ROWS)), base), "phase 3: +delta -delta did not cancel"
        w.barrier()

    node.run(work, threads=threads)
    print("phases ok")


def lease(node: pskv.Node, threads: int) -> None:
    """Leases: a key another node localized within its lease stays there (the localize completes, the
    key is read and updated remotely, exact sums); once the lease ended, or with lease 0, it moves."""
    n = node.num_nodes
    long_ = node.table("long", rows=ROWS, dim=1, placement=pskv.Relocate(lease=60, location_caches=True))
    short = node.table("short", rows=ROWS, dim=1, placement=pskv.Relocate(lease=0.3))
    never = node.table("never", rows=ROWS, dim=1, placement=pskv.Relocate(lease=0))
    w = node.worker()
    block = np.arange(10, 20)  # managed by node 0
    relocation = node.server.relocation
    for t in (long_, short, never):
        for turn in range(n):  # node 1 takes the block first; then every node in turn asks for it
            if node.rank == (turn + 1) % n:
                declined = relocation.declined
                t.localize(block).wait(60)
                local = t.pull_if_local(block)[0]
                first = turn == 0
                if first or t is never:
                    assert local.all(), (t.name, turn, "a localize with no lease against it did not move the block")
                elif t is long_:
                    assert not local.any(), (t.name, turn, "a key under another node's lease moved")
                    state = node.catalog.get("long")  # the decline taught where the block is, and not to ask again
                    assert (state.loc_cache[block] == 1 % n).all(), state.loc_cache[block]
                    sent = node.stats()["messages_sent"]
                    again = t.localize(block)
                    assert again.done() and node.stats()["messages_sent"] == sent, "asked again within the lease"
                t.push(block, np.ones((10, 1))).wait(60)
            w.barrier()
        if t is short:
            time.sleep(0.35)  # the lease ended: the next localize moves the block again
            if node.rank == 0:
                t.localize(block).wait(60)
                assert t.pull_if_local(block)[0].all(), "the block did not move after its lease ended"
            w.barrier()
        owner = 1 % n if t is long_ else (0 if t is short else (n - 1 + 1) % n)
        assert t.pull_if_local(block)[0].all() == (node.rank == owner), (t.name, node.rank)
        assert np.array_equal(t.pull(block), np.full((10, 1), float(n))), (t.name, "pushes lost or doubled")
        w.barrier()
    if node.rank == 0 and n > 2:  # node 0 manages the block: it declined the later turns of "long"
        assert relocation.declined >= 10 * (n - 2), relocation.declined
    print("lease ok")
    w.barrier()
    w.close()


def _sync_rounds(node: pskv.Node, table: str):
    """Count the rounds of the node's replica sync thread for `table` (including rounds that send
    nothing); returns a function giving the count so far."""
    sync = node._replica_sync
    count = {table: 0}
    real = sync._round

    def counted(s, threshold):
        if s.spec.name in count:
            count[s.spec.name] += 1
        return real(s, threshold)

    sync._round = counted
    return lambda: count[table]


def replication(node: pskv.Node, threads: int) -> None:
    """Replicas: local visibility at once, remote after a sync, exact sums, threshold, any node count."""
    hot = np.array([0, 7, ROWS - 1])
    t = node.table("r", rows=ROWS, dim=2, replicate=pskv.Replicate(keys=hot, syncs_per_sec=50))
    lazy = node.table("z", rows=ROWS, dim=2, replicate=pskv.Replicate(hottest=3, frequencies=np.arange(ROWS),
                                                                    syncs_per_sec=50, threshold=100.0))
    w = node.worker()
    mine = hot[node.rank % len(hot)]  # nobody else writes this key yet
    t.push([mine], [[1.0, 2.0]])
    mask, vals = t.pull_if_local([mine])
    assert mask.all() and vals.tolist() == [[1.0, 2.0]], "own write not visible at once"
    w.barrier()
    writers = np.bincount([hot[r % len(hot)] for r in range(node.num_nodes)], minlength=ROWS)[hot]
    deadline = time.monotonic() + 60  # the syncs come every 20 ms; the deadline only bounds a hang
    while not np.array_equal(t.pull(hot)[:, 0], writers):  # background syncs bring everyone's write
        assert time.monotonic() < deadline, f"replica never synced: {t.pull(hot)}"
        time.sleep(0.01)
    # threshold: small changes stay local until a forced sync, however many rounds of syncs pass
    lazy.push([ROWS - 1], [[1.0, 1.0]])
    rounds = _sync_rounds(node, "z")
    start = rounds()
    while rounds() < start + 15:  # counted, not slept: a loaded machine runs fewer per second
        assert time.monotonic() < deadline + 60, f"only {rounds() - start} sync rounds of table 'z'"
        time.sleep(0.01)
    assert lazy.pull([ROWS - 1])[0, 0] == 1.0, "a change below the threshold was sent"
    w.barrier()
    w.wait_replica_sync()
    w.barrier()
    assert lazy.pull([ROWS - 1])[0, 0] == node.num_nodes, "wait_replica_sync did not send everything"
    # exact sums from all threads, nothing lost or doubled
    def work(wk: pskv.Worker) -> None:
        r = wk.table("r")
        rng = np.random.default_rng([wk.rank, wk.thread, 5])
        for _ in range(300):
            r.push(rng.choice(hot, 3), np.ones((3, 2)))
        wk.wait_replica_sync()
        wk.barrier()
        got = r.pull(hot)[:, 0].sum()
        assert got == node.num_nodes * (1 + 300 * 3 * threads), got  # 1: the first write of each node
        wk.barrier()

    w.close()
    node.run(work, threads=threads)
    print(f"replication ok syncs={node.stats()['tables']['r']['replica_syncs']}")


def sampling(node: pskv.Node, threads: int) -> None:
    """Each scheme gives what it promises: naive/preloc the drawn sequence, pool each key x reuse,
    onlylocal only local keys; a handle gives at most n keys."""
    counter = iter(range(10**9))

    def draw(rng, n):  # deterministic, so the drawn sequence is known exactly
        return np.array([(next(counter) * 7919) % ROWS for _ in range(n)], np.int64)

    for scheme in ("naive", "preloc", "pool", "onlylocal"):
        node.table(scheme, rows=ROWS, dim=2, sampling=pskv.Sampling(
            np.ones(ROWS) if scheme != "naive" else draw, scheme=scheme, reuse=3, group_size=8, postpone=True))

    def work(w: pskv.Worker) -> None:
        for scheme in ("naive", "preloc", "pool", "onlylocal"):
            t = w.table(scheme)
            h = t.prepare_sample(60)
            got = []
            for _ in range(100):  # bounded
                keys, vals = t.pull_sample(h, 7)
                if not len(keys):
                    break
                assert vals.shape == (len(keys), 2)
                got.append(keys)
            got = np.concatenate(got)
            drawn = np.concatenate(h.drawn)
            assert len(got) == 60, (scheme, len(got))
            if scheme in ("naive", "preloc"):
                assert np.array_equal(got, drawn), scheme
            elif scheme == "pool":
                assert np.array_equal(np.sort(got), np.sort(np.repeat(drawn, 3))), scheme
            else:
                assert np.array_equal(got, drawn) and t.pull_if_local(got)[0].all(), scheme
            t.finish_sample(h)
        w.barrier()

    node.run(work, threads=threads)
    print("sampling ok")


def _watchdog(node) -> None:
    """After 80 s, print what is pending (a hang's diagnosis), just before faulthandler's stacks."""
    time.sleep(80)
    print(f"WATCHDOG {node.debug_state()}", flush=True)
    for s in node.catalog.tables():
        hot = [3, 4, 250, 251, 598, 599]
        print(f"WATCHDOG {s.spec.name} slot={s.shard.slot[hot].tolist()} owner={s.shard.owner[:8].tolist()} "
              f"start={s.shard.start}", flush=True)


def main() -> None:
    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints every thread's stack, then exits
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    threading.Thread(target=_watchdog, args=(node,), daemon=True).start()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
