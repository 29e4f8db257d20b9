"""One node of the composition stress (test_compose.py; the plan and oracle: compose_plan.py).

    python compose_node.py run OUT SEED        # train every table of the plan; the main thread checkpoints
                                               # into OUT/ckpt meanwhile; node 0 checks the final state
    python compose_node.py join OUT SEED       # a node that joins the running cluster (event "join") and pushes
    python compose_node.py restore OUT SEED    # started with restore= the last checkpoint, on another node
                                               # count, with other options: node 0 checks the restored
                                               # state against the checkpoint, trains more, checks again

Node 0 prints `COMPOSE ok ...` when its checks pass; any difference raises (the node exits non-zero),
naming the table, the first differing key and both values.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from compose_plan import COUNTERS, DIM, ROWS, as_sparse, plan, replay, sparse_ids, steps  # noqa: E402


def declare(node: pskv.Node, p, restoring: bool, disk_dir: Path) -> dict:
    """The plan's tables, with the options of the run or of the restore."""
    tables = {}
    for name in p.tables:
        kw = {}
        if name == "reloc" and not restoring:
            kw["placement"] = pskv.Relocate(lease=0)
        if name == "hot":
            keys = p.restore_hot if restoring else p.hot
            if keys is not None:
                kw["replicate"] = pskv.Replicate(keys=keys, syncs_per_sec=50)
        if name == "dense" and restoring and p.restore_extra_hot is not None:
            kw["replicate"] = pskv.Replicate(keys=p.restore_extra_hot, syncs_per_sec=50)
        if name == "ssp":
            kw.update(consistency=pskv.SSP(1), cache=pskv.Cache(rows=64))
        if name == "sparse_ssp":
            kw.update(consistency=pskv.SSP(1))
        if name == "disk":
            kw.update(storage="disk", cache_rows=32, path=disk_dir / f"{'restore' if restoring else 'run'}-{node.rank}")
        if name.startswith("sparse"):
            tables[name] = node.table(name, None, DIM, key_space="uint64", **kw)
        else:
            tables[name] = node.table(name, ROWS, DIM, **kw)
    return tables


def work(w: pskv.Worker, p, seq: list) -> None:
    """One worker thread of node.run(): its steps, in order, without waiting for each push."""
    clocked = "ssp" in p.tables or "sparse_ssp" in p.tables
    handles = {name: w.table(name) for name in p.tables}
    for i, ops in enumerate(seq):
        for op in ops:
            if op[0] == "push":
                handles[op[1]].push(op[2], op[3])
            elif op[0] == "loc":
                handles[op[1]].localize(op[2])
            else:
                got = handles[op[1]].pull(op[2])
                assert got.shape == (len(op[2]), DIM)
        if clocked:
            w.clock()
        if i % 8 == 7:
            w.wait_all()
    w.wait_all()
    if clocked:  # every worker of every node ends its last clock before a worker made later (settle)
        w.wait_clock(w.current_clock)
    # (not w.barrier(): a thread checkpoints meanwhile, and the two would share the coordinator's
    # barrier generations; see node.checkpoint)


def train(node: pskv.Node, p, seqs: dict, checkpoint=None) -> None:
    """This node's workers run their steps in node.run() (whose later runs start every node's clocks
    together); a thread of its own meanwhile runs `checkpoint` (if any)."""
    errors: list = []

    def checkpoints() -> None:
        try:
            checkpoint()
        except BaseException as exc:  # noqa: BLE001 - raised below
            errors.append(exc)

    side = threading.Thread(target=checkpoints, name="compose-checkpoints", daemon=True) if checkpoint else None
    if side is not None:
        side.start()
    node.run(lambda w: work(w, p, seqs[node.rank * p.threads + w.thread]), threads=p.threads)
    if side is not None:
        side.join()
    if errors:
        raise errors[0]


def settle(node: pskv.Node) -> None:
    """Every node's pushes and replica changes applied everywhere."""
    w = node.worker()
    w.wait_replica_sync()
    w.barrier()
    w.wait_replica_sync()
    w.barrier()
    w.close()


def read(tables: dict) -> dict:
    """Every table's whole state as the oracle holds it (dense: (ROWS, DIM); sparse: {key: row})."""
    out = {}
    for name, t in tables.items():
        if name.startswith("sparse"):
            keys = np.concatenate([np.arange(COUNTERS, dtype=np.uint64), sparse_ids()])
            out[name] = as_sparse(keys, t.pull(keys))
        else:
            out[name] = t.pull(np.arange(ROWS)).astype(np.float64)
    return out


def compare(got: dict, want: dict, what: str) -> None:
    for name, g in got.items():
        w = want[name]
        if name.startswith("sparse"):
            bad = [k for k in g if not np.array_equal(g[k], w.get(k, np.zeros(DIM)))]
            assert not bad, f"{what}: sparse key {bad[0]} is {g[bad[0]]}, expected {w.get(bad[0], np.zeros(DIM))}"
        else:
            bad = np.flatnonzero((g != w).any(axis=1))
            assert not len(bad), (f"{what}: table {name!r} differs in {len(bad)} rows, first key {bad[0]}: "
                                  f"{g[bad[0]]} != {w[bad[0]]}")


def wait_for_file(path: Path, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert time.monotonic() < deadline, f"{what} ({path.name}) did not come within {limit} s"
        time.sleep(0.05)


def main() -> None:
    mode, out, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    p = plan(seed)
    with pskv.init() as node:
        if mode == "restore":
            return restore(node, p, out)
        threads = p.threads
        mine = [node.rank * threads + t for t in range(threads)]
        tables = declare(node, p, False, out)
        victim = p.event in ("kill", "stop") and node.rank == p.victim
        seqs = {gid: steps(p, gid) for gid in mine}
        if victim:  # it pulls and localizes (a reader with backups), and pushes nothing: it dies meanwhile
            seqs = {gid: [[op for op in ops if op[0] != "push"] for ops in seq] for gid, seq in seqs.items()}
        rng = np.random.default_rng([seed, node.rank, 7])

        def checkpoints() -> None:
            (out / f"running-{node.rank}").touch()
            for c in range(p.checkpoints):
                time.sleep(float(rng.uniform(0.0, 0.3)))
                info = node.checkpoint(out / "ckpt")
                print(f"checkpoint {c} step {info.step}", flush=True)

        train(node, p, seqs, checkpoints)
        if p.event == "leave" and node.rank == p.victim:
            node.leave()
            print(f"node {node.rank} left", flush=True)
            return
        if p.event:  # the harness says when the event is done and every worker of every node trained: a
            # worker made to settle must not wait in a barrier while another node's SSP workers tick (it holds
            # their clock back: see the README's Consistency section)
            (out / f"trained-{node.rank}").touch()
            wait_for_file(out / "settle", "the harness's go")
        settle(node)
        if node.rank == min(node.members):
            every = {gid: steps(p, gid) for gid in p.pushers}
            want = {name: replay(every, name, {g: _pushes(every[g], name) for g in every}) for name in p.tables}
            compare(read(tables), want, f"after training (members {node.members})")
            print(f"COMPOSE ok run {p.describe()}", flush=True)


def restore(node: pskv.Node, p, out: Path) -> None:
    """Started from the last checkpoint with other options: it holds exactly what the checkpoint holds,
    and training on adds exactly."""
    threads = p.threads
    tables = declare(node, p, True, out)
    saved = pskv.load_checkpoint(out / "ckpt")
    base = {name: (as_sparse(saved[name].keys, saved[name].values) if name.startswith("sparse")
                   else saved[name].values.astype(np.float64)) for name in p.tables}
    settle(node)
    if node.rank == 0:
        compare(read(tables), base, "restored")
    settle(node)
    gids = {g: steps(p, g, p.steps_after, salt=1) for g in range(node.num_nodes * threads)}
    train(node, p, {g: gids[g] for g in range(node.rank * threads, (node.rank + 1) * threads)})
    settle(node)
    if node.rank == 0:
        want = {name: replay(gids, name, {g: _pushes(gids[g], name) for g in gids}, base[name]) for name in p.tables}
        compare(read(tables), want, "restored, then trained")
        print(f"COMPOSE ok restore {p.describe()}", flush=True)


def _pushes(seq: list, name: str) -> int:
    return sum(1 for ops in seq for op in ops if op[0] == "push" and op[1] == name)


if __name__ == "__main__":
    main()
