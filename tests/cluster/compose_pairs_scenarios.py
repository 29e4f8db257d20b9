"""Node programs for tests/cluster/test_compose_pairs.py: every pair of table options that composes
(pskv.client.matrix says which), trained at once and checked exactly.

    python compose_pairs_scenarios.py pairs CKPT       every supported pair (and kind x option) on its own
                                                       table; then a checkpoint of them all
    python compose_pairs_scenarios.py restored CKPT    (started with restore=CKPT) every table, declared
                                                       without options, equals the replay
    python compose_pairs_scenarios.py backed           the options that take backups; then node 2 leaves
    python compose_pairs_scenarios.py elastic OUT      the options that take joins and leaves: phase A on the
                                                       first nodes, a node joins, phase B on all, node 1 leaves

Every push is a seeded function of (table, node, thread, step), so every node computes the exact
final state alone: column 0 of a table is its initial value, the sets and every push and push_pull
summed; column 1 gets a 1 for each key a worker drew by sampling, so its total is known exactly
(which keys were drawn depends on the order threads prepared their handles).

Shared memory (issue 31; on unless PSKV_SHARED_MEMORY=0): the nodes share one host, so every node
asserts that it served keys of each table from the other nodes' shards in shared memory (the
tables `SHARED` says take it), none where it has no effect (disk, backups) or is off
(`_shared`, TableState.shared_keys), and prints the counts.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

import pskv
from pskv.client import compat, matrix

sys.path.insert(0, str(Path(__file__).parent))
from scenarios import main  # noqa: E402

ROWS, DIM, STEPS = 48, 2, 12
HOT = np.array([1, 2, 3])  # replicated keys
SET = np.array([5, 6])  # set to 7 by node 0's main thread before training
SAMPLES = 2  # keys drawn per step and worker
ELASTIC = ("dense", "disk", "Relocate", "Replicate", "Sampling", "BSP/SSP", "Cache", "filters")
BACKED = ("dense", "Relocate", "Replicate", "Sampling", "NodeAggregate", "BSP/SSP", "Cache")
NOT_SHARED = ("disk",)  # a disk table's rows are in its files on disk, not in shared memory: messages


def pairs() -> list[frozenset]:
    """Each kind and option alone, then every pair of them the matrix says works (one table each)."""
    names = ("disk",) + compat.OPTIONS
    out = [frozenset({"dense"}), *(frozenset({n}) for n in names)]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            refused, works, inert = matrix.cell(a, b)
            if works and not refused and not inert:
                out.append(frozenset({a, b}))
    return out


def options(on: frozenset, where: Path, rank: int) -> dict:
    """node.table() keywords for the names in `on`."""
    kw: dict = {}
    if "disk" in on:
        kw.update(storage="disk", cache_rows=8, path=where / f"rows-{rank}")
    if "Relocate" in on:
        kw["placement"] = pskv.Relocate(location_caches=True, lease=0.0)
    if "Replicate" in on:
        kw["replicate"] = pskv.Replicate(keys=HOT, syncs_per_sec=20)
    if "Sampling" in on:
        scheme = "naive" if "NodeAggregate" in on else "pool"  # (pool localizes: refused on aggregated tables)
        kw["sampling"] = pskv.Sampling(np.ones(ROWS), scheme=scheme, reuse=2, group_size=8)
    if "NodeAggregate" in on:
        kw["aggregate"] = pskv.NodeAggregate()
    if "BSP/SSP" in on:
        kw["consistency"] = pskv.BSP() if "NodeAggregate" in on else pskv.SSP(1)
    if "Cache" in on:
        kw["cache"] = pskv.Cache(rows=16, buffer_rows=8)
        kw.setdefault("consistency", pskv.BSP())
    if "filters" in on:
        kw["filters"] = "keycache,fp16"  # (small integers: fp16 holds them exactly)
    return kw


def _name(i: int, on: frozenset) -> str:
    return f"t{i:02d}-" + "-".join(sorted(n.replace("/", "") for n in on))


def _pushes(i: int, on: frozenset, rank: int, thread: int, step: int, *, backups: bool = False):
    """The deterministic writes of one step: [(keys, values, push_pull)]. An aggregated table's
    threads all push the same keys each round (a round completes when every thread pushed)."""
    agg = "NodeAggregate" in on
    rng = np.random.default_rng([i, step] if agg else [i, rank, thread, step])
    keys = rng.choice(ROWS, 4, replace=False) if agg else rng.integers(0, ROWS, 6)
    values = np.zeros((len(keys), DIM), np.float32)
    values[:, 0] = rng.integers(1, 4, len(keys))
    out = [(keys, values, False)]
    if _push_pull(on, backups) and step % 3 == 2:
        keys = rng.integers(0, ROWS, 3)
        values = np.zeros((3, DIM), np.float32)
        values[:, 0] = 2.0
        out.append((keys, values, True))
    return out


def _push_pull(on: frozenset, backups: bool) -> bool:
    return not backups and not on & {"Replicate", "NodeAggregate", "BSP/SSP", "Cache"}


def expected(i: int, on: frozenset, workers: list[tuple[int, int, range]], *, backups: bool = False):
    """(column 0 of every row, the total of column 1) after every worker's steps."""
    col0 = np.zeros(ROWS)
    col0[SET] = 7.0
    drawn = 0
    for rank, thread, steps in workers:
        for step in steps:
            for keys, values, _ in _pushes(i, on, rank, thread, step, backups=backups):
                np.add.at(col0, keys, values[:, 0])
        if "Sampling" in on and "NodeAggregate" not in on:
            drawn += SAMPLES * len(steps)
    return col0, drawn


def _step(table, i: int, on: frozenset, w, step: int, handle, *, backups: bool = False) -> None:
    for keys, values, fused in _pushes(i, on, w.rank, w.thread, step, backups=backups):
        if fused:
            assert table.push_pull(keys, values).wait(60).shape == (len(keys), DIM)
        else:
            table.push(keys, values)
    rng = np.random.default_rng([i, w.rank, w.thread, step, 1])
    if "NodeAggregate" in on:
        table.pull(_pushes(i, on, w.rank, w.thread, step)[0][0], timeout=60)  # ends this thread's round
    else:
        if step % 4 == 1:
            table.localize(rng.integers(0, ROWS, 5))
        if step % 5 == 0:
            table.pull_async(rng.integers(0, ROWS, 5))
    if handle is not None:
        keys, rows = table.pull_sample(handle, SAMPLES)
        assert len(keys) == SAMPLES and rows.shape == (SAMPLES, DIM)
        if "NodeAggregate" not in on:  # (an aggregated table's rounds need every thread's push of a key)
            ones = np.zeros((SAMPLES, DIM), np.float32)
            ones[:, 1] = 1.0
            table.push(keys, ones)


def _train(w, tables: dict, steps: range, *, backups: bool = False) -> None:
    handles = {name: w.table(name).prepare_sample(SAMPLES * len(steps)) if "Sampling" in on else None
               for name, (_, on) in tables.items()}
    for step in steps:
        for name, (i, on) in tables.items():
            _step(w.table(name), i, on, w, step, handles[name], backups=backups)
        w.clock()


def _check(handle, i: int, on: frozenset, workers, *, backups: bool = False) -> None:
    col0, drawn = expected(i, on, workers, backups=backups)
    got = handle.pull(np.arange(ROWS), timeout=60)
    wrong = np.flatnonzero(got[:, 0] != col0)
    assert not len(wrong), f"table {sorted(on)}: rows {wrong[:5].tolist()} are {got[wrong[:5], 0]}, not {col0[wrong[:5]]}"
    assert got[:, 1].sum() == drawn, f"table {sorted(on)}: {got[:, 1].sum()} sampled pushes, not {drawn}"


def _shared(node, tables: dict, where: str, *, before: dict | None = None, backups: bool = False) -> dict:
    """Assert each table served keys through shared memory since `before` (its counts) when it
    should: memory shared, no backups (every write goes to its range's head as a message), not a
    disk table; none otherwise. Prints and returns the counts."""
    on = os.environ.get("PSKV_SHARED_MEMORY", "1") != "0" and not backups
    got = {name: node.catalog.get(name).shared_keys - (before or {}).get(name, 0) for name in tables}
    for name, (_, kinds) in tables.items():
        some = on and not kinds & set(NOT_SHARED)
        assert (got[name] > 0) == some, (f"node {node.rank} {where}: table {name}: {got[name]} keys through shared "
                                         f"memory, expected {'some' if some else 'none'}")
    print(f"{where} shared node={node.rank} " + " ".join(f"{n}={c}" for n, c in got.items()), flush=True)
    return {name: node.catalog.get(name).shared_keys for name in tables}


def _declare(node, kinds, where: Path) -> tuple[dict, dict]:
    """Declare a table per set of names: ({name: (index, names)}, {name: the main thread's handle})."""
    tables, handles = {}, {}
    for i, on in enumerate(kinds):
        name = _name(i, on)
        handles[name] = node.table(name, ROWS, DIM, **options(on, where, node.rank))
        tables[name] = (i, on)
    if node.rank == 0:  # before anyone trains (workers meet in a barrier first)
        for handle in handles.values():
            handle.set(SET, np.array([[7.0, 0.0]] * len(SET), np.float32)).wait(60)
    return tables, handles


def _workers(node, threads: int, steps: range) -> list:
    return [(r, t, steps) for r in range(node.num_nodes) for t in range(threads)]


def pairs_(node: pskv.Node, threads: int, ckpt: str) -> None:
    """Every supported pair trained at once by every thread of every node, checked exactly; then a checkpoint."""
    tables, _ = _declare(node, pairs(), Path(ckpt).parent)

    def train(w: pskv.Worker) -> None:
        w.barrier()
        _train(w, tables, range(STEPS))
        w.barrier()
        w.wait_replica_sync()
        w.barrier()
        if w.thread == 0:
            for name, (i, on) in tables.items():
                _check(w.table(name), i, on, _workers(node, threads, range(STEPS)))
        w.barrier()

    node.run(train, threads=threads)
    _shared(node, tables, "pairs")
    node.checkpoint(ckpt)
    print(f"pairs ok node={node.rank} tables={len(tables)}", flush=True)


def restored(node: pskv.Node, threads: int, ckpt: str, saved_nodes: int, saved_threads: int) -> None:
    """Restored onto this cluster (another node count, backups), every table declared without options."""
    tables = {_name(i, on): (i, on) for i, on in enumerate(pairs())}
    handles = {name: node.table(name, ROWS, DIM) for name in tables}
    workers = [(r, t, range(STEPS)) for r in range(saved_nodes) for t in range(saved_threads)]
    for name, (i, on) in tables.items():
        _check(handles[name], i, on, workers)
    _shared(node, {name: (i, frozenset()) for name, (i, _) in tables.items()}, "restored",
            backups=node.config.backups > 0)  # (declared without options: a disk table's rows are in memory now)
    print(f"restored ok node={node.rank} tables={len(tables)}", flush=True)


def backed(node: pskv.Node, threads: int) -> None:
    """The options that take backups, trained on every node; node 2 then leaves (its ranges' backups
    take over); the others check every table."""
    kinds = [frozenset({k}) for k in BACKED] + [frozenset({"NodeAggregate", "BSP/SSP"})]
    tables, handles = _declare(node, kinds, Path("."))
    workers = _workers(node, threads, range(STEPS))  # (now: once node 2 left, num_nodes no longer counts it)

    def train(w: pskv.Worker) -> None:
        w.barrier()
        _train(w, tables, range(STEPS), backups=True)
        w.barrier()
        w.wait_replica_sync()
        w.barrier()

    node.run(train, threads=threads)
    if node.rank == 2:
        node.leave()
        print("node 2 left", flush=True)
        return
    _wait(lambda: 2 not in node.members, f"node {node.rank}: node 2 never left ({node.members})")
    for name, (i, on) in tables.items():
        _check(handles[name], i, on, workers, backups=True)
    _shared(node, tables, "backed", backups=True)
    print(f"backed ok node={node.rank} members={node.members}", flush=True)


def elastic(node: pskv.Node, threads: int, out: str) -> None:
    """Phase A on nodes 0 and 1; node 2 joins (it takes its share of every table) and all three run
    phase B; node 1 leaves (it hands everything over); nodes 0 and 2 check every table."""
    out_dir = Path(out)
    joined = node.config.join is not None
    tables, _ = _declare(node, [frozenset({k}) for k in ELASTIC], out_dir)  # (a joiner takes its share here)
    w = node.worker()
    a, b = range(STEPS), range(STEPS, 2 * STEPS)
    if not joined:
        w.barrier()
        _train(w, tables, a)
        (out_dir / f"ready-{node.rank}").touch()
        _wait(lambda: (out_dir / "joined").exists(), f"node {node.rank}: no node joined")
    else:
        (out_dir / "joined").touch()
    _train(w, tables, b)
    w.barrier()  # (a joiner's first)
    w.wait_replica_sync()
    w.barrier()
    if node.rank == 1:
        w.close()
        node.leave()
        print("node 1 left", flush=True)
        return
    trained = _shared(node, tables, "joined" if joined else "trained")
    _wait(lambda: 1 not in node.members, f"node {node.rank}: node 1 never left ({node.members})")
    workers = [(r, 0, a) for r in (0, 1)] + [(r, 0, b) for r in (0, 1, 2)]
    for name, (i, on) in tables.items():
        _check(w.table(name), i, on, workers)
    _shared(node, tables, "left", before=trained)  # (node 1's keys now at nodes 0 and 2, read in shared memory)
    w.barrier()
    w.close()
    print(f"elastic ok node={node.rank} members={node.members}", flush=True)


def _wait(done, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main({"pairs": pairs_, "restored": restored, "backed": backed, "elastic": elastic})
