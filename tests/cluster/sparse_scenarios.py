"""Node programs for the sparse-table tests: `python sparse_scenarios.py NAME [ARGS]`.

Every node computes the whole cluster's expected result locally (everything is seeded) and
asserts exact values; the test checks the exit status and the lines printed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main  # noqa: E402

EDGE = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)  # range borders and the extremes


def _updates(rank: int, thread: int, step: int, n: int = 24):
    """Keys anywhere in the uint64 space (a few shared by everyone, duplicates) and integer rows."""
    rng = np.random.default_rng([rank, thread, step])
    keys = np.concatenate([rng.integers(0, 2**64 - 1, n - 8, dtype=np.uint64, endpoint=True),
                           rng.choice(EDGE, 4), rng.integers(0, 50, 4).astype(np.uint64)])
    keys[-1] = keys[0]
    vals = rng.integers(-3, 4, (len(keys), 2)).astype(np.float32)  # small integers: float32 sums are exact
    return keys, vals


def sums(node: pskv.Node, threads: int, steps: int = 200) -> None:
    """Concurrent pushes of uint64 keys from every thread of every node sum exactly; pulls of keys
    never written give the initial value; pull_range returns exactly the written keys; each node
    holds only the written keys of its range."""
    node.table("w", rows=None, dim=2, key_space="uint64", init=pskv.Constant(1.0))
    expected: dict[int, np.ndarray] = {}
    for r in range(node.num_nodes):
        for t in range(threads):
            for step in range(steps):
                keys, vals = _updates(r, t, step)
                for k, v in zip(keys.tolist(), vals):
                    expected[k] = expected.get(k, 1.0) + v
    written = np.array(sorted(expected), np.uint64)
    rows = np.array([expected[k] for k in written.tolist()], np.float32)

    def train(w: pskv.Worker) -> None:
        table = w.table("w")
        for step in range(steps):
            keys, vals = _updates(w.rank, w.thread, step)
            table.push(keys, vals)
            if step % 50 == 0:
                table.pull_async(keys)  # reads in flight with the pushes
        w.barrier()
        order = np.random.default_rng(w.thread).permutation(len(written))
        assert np.array_equal(table.pull(written[order]), rows[order]), "pulled sums differ"
        never = np.array([5 * 10**18 + 7, 77], np.uint64)  # (77: no key below 50 + small ones; this one unseen)
        never = never[~np.isin(never, written)]
        assert (table.pull(never) == 1.0).all(), "a key never written is not at its initial value"
        keys, got = table.pull_range(0, 2**64)
        assert np.array_equal(keys, written) and np.array_equal(got, rows), "pull_range(0, 2**64) differs"
        lo, hi = 2**62, 2**63 + 2**61  # across the border of two ranges
        inside = (written >= np.uint64(lo)) & (written < np.uint64(hi))
        keys, got = table.pull_range(lo, hi)
        assert np.array_equal(keys, written[inside]) and np.array_equal(got, rows[inside]), "pull_range(lo, hi)"
        w.barrier()

    node.run(train, threads=threads)
    shard = node.catalog.get("w").shard
    lo, hi = node.catalog.get("w").ranges.range_bounds(node.rank)
    mine = int(((written >= np.uint64(lo)) & (written <= np.uint64(hi - 1))).sum())
    assert len(shard) == mine, f"node {node.rank} holds {len(shard)} keys, its range has {mine} written"
    print(f"sparse sums ok node={node.rank} keys={len(shard)} of {len(written)}", flush=True)


def push_pull(node: pskv.Node, threads: int) -> None:
    """push_pull returns each key's row right after this push, on sparse and dense tables; with one
    writer per key the rows are exact; with every worker writing, the final rows sum exactly."""
    node.table("s", rows=None, dim=1, key_space="uint64", updater=pskv.SGD(lr=0.5))
    node.table("d", rows=100, dim=1, updater=pskv.SGD(lr=0.5))
    n, rounds = node.num_nodes, 5

    def train(w: pskv.Worker) -> None:
        me = w.rank * threads + w.thread
        own = np.array([me * 2**60 + 3, 2**64 - 1 - me], np.uint64)  # keys only this worker writes
        for handle, keys in ((w.table("s"), own), (w.table("d"), np.array([me, 50 + me]))):
            for r in range(1, rounds + 1):
                got = handle.push_pull(keys, np.full((2, 1), 2.0)).wait()
                assert (got == -1.0 * r).all(), f"push_pull round {r} gave {got.ravel()}"  # w -= 0.5 * 2
        shared = np.array([42, 2**63 + 5], np.uint64)
        got = w.table("s").push_pull(shared, np.ones((2, 1))).wait()
        assert got.shape == (2, 1) and (got <= -0.5).all()
        w.barrier()
        final = w.table("s").pull(shared)
        assert (final == -0.5 * n * threads).all(), f"shared keys end at {final.ravel()}"
        w.barrier()

    node.run(train, threads=threads)
    print(f"push_pull ok node={node.rank}", flush=True)


def table_filters(node: pskv.Node, threads: int, rounds: int = 6) -> None:
    """node.table(filters=): every push and pull of the table travels with the table's wire filters
    (key cache + fp16 here) unless the call gives its own (`filters=()`: none). Values that fp16
    holds exactly, so the sums are exact; the bytes show which filters a message took."""
    spec = {"dim": 8, "updater": "add", "filters": "keycache,fp16"}
    tables = {"s": node.table("s", rows=None, key_space="uint64", **spec),
              "d": node.table("d", rows=1000, **spec)}
    other = (node.rank + 1) % node.num_nodes
    worker = node.worker()
    for name, table in tables.items():
        if name == "s":  # keys of the other node's uint64 range
            keys = (np.arange(200, dtype=np.uint64) + np.uint64(other * 2**64 // node.num_nodes + 7))
        else:  # rows the other node owns
            keys = np.arange(200) + other * (1000 // node.num_nodes)
        vals = np.full((len(keys), 8), 0.5, np.float32)
        sent = []
        for turn in range(node.num_nodes):  # one node pushes at a time: its bytes_sent counts its pushes alone
            for r in range(rounds if turn == node.rank else 0):
                before = node.stats()["bytes_sent"]
                table.push(keys, vals, filters=() if r == rounds - 1 else None).wait()
                sent.append(node.stats()["bytes_sent"] - before)
            worker.barrier()
        plain_values, half_values = len(keys) * 8 * 4, len(keys) * 8 * 2
        assert sent[0] >= keys.nbytes + half_values and sent[0] < keys.nbytes + plain_values, (name, sent)
        assert all(s == sent[1] for s in sent[1:-1]) and sent[1] < half_values + 100, (name, sent)  # 8-byte hash
        assert sent[-1] >= keys.nbytes + plain_values, (name, sent)  # filters=(): keys and float32 values whole
        got = table.pull(keys)  # (a pull with the table's key cache too: exact rows back)
        assert (got == 0.5 * rounds).all(), (name, np.unique(got))  # (each node pushes the other's keys)
        print(f"table_filters {name} node={node.rank} bytes={sent}", flush=True)
        worker.barrier()
    worker.close()


def bounded(node: pskv.Node, threads: int, rounds: int = 6) -> None:
    """worker.wait_clock bounds delay on sparse tables: after clock c and wait_clock(c), a pull sees
    every worker's pushes of clocks < c (exact counts)."""
    node.table("c", rows=None, dim=1, key_space="uint64")
    total = node.num_nodes * threads
    key = np.array([2**64 - 3], np.uint64)

    def train(w: pskv.Worker) -> None:
        table = w.table("c")
        for c in range(1, rounds + 1):
            table.push(key, np.ones((1, 1)))
            w.clock()
            w.wait_clock(c)
            got = float(table.pull(key)[0, 0])
            assert got >= c * total, f"clock {c}: {got} < {c * total}"
        w.barrier()

    node.run(train, threads=threads)
    print(f"bounded ok node={node.rank}", flush=True)


def _stamped_keys(table: str, rank: int, thread: int, clock: int) -> np.ndarray:
    """A worker's keys at a clock: random uint64 ids, range edges, keys every worker shares on both
    sides of the two nodes' border (2**63), and one duplicate."""
    rng = np.random.default_rng([len(table), rank, thread, clock])
    keys = np.concatenate([rng.integers(0, 2**64 - 1, 12, dtype=np.uint64, endpoint=True), rng.choice(EDGE, 2),
                           rng.integers(0, 6, 3).astype(np.uint64) + np.uint64(2**63 - 3)])
    keys[-1] = keys[0]
    return keys


def clocked(node: pskv.Node, threads: int, clocks: int = 6) -> None:
    """Sparse BSP and SSP(1) tables: each worker pushes 1 into column (worker, clock) of random uint64
    keys at each clock. A pull at clock c holds exactly every update stamped <= c - s - 1 and the
    worker's own, and no column half or twice applied; a set is never overtaken by the node's
    later push of its key; the final rows are the exact sums. Cache(rows=) is inert (no row cache);
    its buffer_rows sizes the push buffer."""
    workers = node.num_nodes * threads
    models = {"ssp": pskv.SSP(1), "bsp": pskv.BSP()}
    node.table("ssp", rows=None, dim=workers * clocks, dtype="float64", key_space="uint64", consistency=models["ssp"],
               cache=pskv.Cache(rows=64, buffer_rows=8))
    node.table("bsp", rows=None, dim=workers * clocks, dtype="float64", key_space="uint64", consistency=models["bsp"])
    assert node.catalog.get("ssp").cache is None and node.catalog.get("ssp").buffer.capacity == 8
    every = {name: [(w, c, _stamped_keys(name, w // threads, w % threads, c)) for w in range(workers)
                    for c in range(clocks)] for name in models}
    universe = {name: np.unique(np.concatenate([k for _, _, k in stamped])) for name, stamped in every.items()}
    expected = {}  # (len(universe), workers * clocks): how often each (worker, clock) pushed each key
    for name, stamped in every.items():
        counts = np.zeros((len(universe[name]), workers * clocks))
        for w, c, keys in stamped:
            np.add.at(counts[:, w * clocks + c], np.searchsorted(universe[name], keys), 1)
        expected[name] = counts
    other = (node.rank + 1) % node.num_nodes

    def train(w: pskv.Worker) -> None:
        me = w.rank * threads + w.thread
        setkey = np.array([other * (2**64 // node.num_nodes) + 10**6 + w.thread], np.uint64)  # another node's
        for c in range(clocks):
            for name, model in models.items():
                table, keys = w.table(name), _stamped_keys(name, w.rank, w.thread, c)
                one_hot = np.zeros((len(keys), workers * clocks))
                one_hot[:, me * clocks + c] = 1
                table.push(keys, one_hot)
                table.push(setkey, np.full((1, workers * clocks), 5.0))  # buffered before the set
                table.set(setkey, np.full((1, workers * clocks), 100.0 * c))
                table.push(setkey, np.eye(1, workers * clocks))  # after it: never overtakes it
                got, want = table.pull(universe[name]), expected[name]
                stamped = (np.arange(workers * clocks) % clocks) < c - int(model.staleness)  # stamped <= c - s - 1
                own = (np.arange(workers * clocks) // clocks == me) & (np.arange(workers * clocks) % clocks <= c)
                assert np.array_equal(got[:, stamped | own], want[:, stamped | own]), \
                    f"{name} at clock {c}: missing updates stamped <= {c - int(model.staleness) - 1} or own ones"
                assert ((got == 0) | (got == want)).all(), f"{name} at clock {c}: an update half or twice applied"
                row = table.pull(setkey)[0]
                assert row[0] == 100.0 * c + 1 and (row[1:] == 100.0 * c).all(), f"{name}: set overtaken: {row}"
            if me == workers - 1:
                time.sleep(0.05)  # a slow worker: the others' pulls wait for it (no time is asserted)
            w.clock()
        w.barrier()
        for name in models:
            assert np.array_equal(w.table(name).pull(universe[name]), expected[name]), f"{name}: final sums differ"
        w.barrier()

    node.run(train, threads=threads)
    stats = node.stats()["tables"]
    for name in models:
        keys, _ = node._main_worker.table(name).pull_range(0, 2**64)
        assert len(keys) == len(universe[name]) + node.num_nodes * threads, f"{name}: pull_range differs"
        assert stats[name]["buffered_rows"] > 0 and stats[name]["flushed_rows"] <= stats[name]["buffered_rows"]
    print(f"clocked ok node={node.rank} flushes={stats['ssp']['flushes']},{stats['bsp']['flushes']}", flush=True)


def _checkpoint_rows():
    rng = np.random.default_rng(11)
    keys = np.unique(rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True))
    return keys, rng.integers(-4, 5, (len(keys), 2)).astype(np.float64)


def save(node: pskv.Node, threads: int, ckpt: str) -> None:
    """Every node pushes a part of the keys twice (Adagrad: rows and state), then a checkpoint."""
    table = node.table("w", rows=None, dim=2, dtype="float64", key_space="uint64", updater=pskv.Adagrad(lr=0.5))
    keys, vals = _checkpoint_rows()
    mine = slice(node.rank, None, node.num_nodes)
    for _ in range(2):
        table.push(keys[mine], vals[mine]).wait()
    worker = node.worker()
    worker.barrier()
    node.checkpoint(ckpt)
    got_keys, got = table.pull_range(0, 2**64)
    np.save(Path(ckpt) / f"expected-{node.rank}.npy", got)
    assert np.array_equal(got_keys, keys)
    worker.close()
    print(f"saved node={node.rank}", flush=True)


def restore(node: pskv.Node, threads: int, ckpt: str) -> None:
    """A cluster of another size restores the sparse table: rows and updater state are exact (a
    further push moves each row as it would have moved in the saving cluster)."""
    table = node.table("w", rows=None, dim=2, dtype="float64", key_space="uint64", updater=pskv.Adagrad(lr=0.5))
    keys, vals = _checkpoint_rows()
    got_keys, got = table.pull_range(0, 2**64)
    expected = np.load(Path(ckpt) / "expected-0.npy")
    assert np.array_equal(got_keys, keys) and np.array_equal(got, expected), "restored rows differ"
    ref = pskv.updaters.get(pskv.Adagrad(lr=0.5))
    data, state = np.zeros((len(keys), 2)), np.empty((len(keys), 2))
    ref.init_state(state)
    for _ in range(3):  # the two pushes before the checkpoint and one more after it
        ref.apply(data, state, np.arange(len(keys)), vals)
    worker = node.worker()
    worker.barrier()
    if node.rank == 0:
        table.push(keys, vals).wait()
    worker.barrier()
    assert np.array_equal(table.pull(keys), data), "state was not restored: the next push differs"
    saved = pskv.load_checkpoint(ckpt)["w"]
    assert np.array_equal(saved.keys, keys) and np.array_equal(saved.values, expected)
    worker.close()
    print(f"restored node={node.rank}", flush=True)


if __name__ == "__main__":
    main(globals())
