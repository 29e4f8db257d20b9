"""Elastic membership: what a join and a leave cost the workers that keep training, and a join
against its alternative (checkpoint, stop, restart on one more node), in one run.

    python benchmarks/bench_elastic.py [--rows 200000] [--dim 16] [--nodes 2]

A cluster of --nodes nodes pushes Adagrad gradients without pause (64 random keys per push, each
waited for, its latency recorded). The driver then starts one node with `start_local(join=)` (as
`pskv launch --join`) and times it from process start until its `node.table()` returned, i.e. its
share of rows and updater state moved to it; then node 1 leaves (`node.leave()`, its rows and
key range move to the others). Per phase (steady, joining, after join, leaving, after leave) it
prints pushes per second (all nodes, and as a share of steady) and push latency p50 / p99 / max.
The baseline for a join is what a cluster without elasticity does to grow: every node
checkpoints (timed by node 0), then a cluster of --nodes + 1 nodes starts from it (timed from
process start until every node declared the table). Absolute times on a shared
machine are noise; compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _node(out: Path, rows: int, dim: int, restore: bool) -> None:
    import pskv

    begun = float(os.environ["BENCH_BEGUN"]) if "BENCH_BEGUN" in os.environ else time.monotonic()
    with pskv.init(**({"restore": str(out / "ckpt")} if restore else {})) as node:
        node.table("emb", rows, dim, updater=pskv.Adagrad(lr=0.05))
        took = time.monotonic() - begun
        if restore:
            print(f"restored in {took:.3f}", flush=True)
            return
        joined = node.config.join is not None
        if joined:
            print(f"joined in {took:.3f}", flush=True)
        worker = node.worker()
        emb = worker.table("emb")
        if not joined:
            worker.barrier()
        rng = np.random.default_rng(node.rank)
        grads = np.full((64, dim), 0.01, np.float32)
        lat = []  # (start, seconds) of each push
        (out / f"running-{node.rank}").touch()
        for i in range(10_000_000):
            if i % 10 == 0 and (out / f"leave-{node.rank}").exists():
                worker.close()
                t0 = time.monotonic()
                node.leave()
                print(f"left in {time.monotonic() - t0:.3f}", flush=True)
                np.save(out / f"lat-{node.rank}.npy", np.array(lat))
                return
            if i % 10 == 0 and (out / "stop").exists():
                break
            t0 = time.monotonic()
            emb.push(rng.choice(rows, 64, replace=False), grads).wait(60)
            lat.append((t0, time.monotonic() - t0))
        np.save(out / f"lat-{node.rank}.npy", np.array(lat))
        worker.barrier()
        t0 = time.monotonic()
        node.checkpoint(out / "ckpt")
        if node.rank == min(node.members):
            print(f"checkpoint in {time.monotonic() - t0:.3f}", flush=True)
        worker.close()


def _wait(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_elastic: timed out waiting for {what}")
        time.sleep(0.02)


def _value(cluster, index: int, word: str) -> float:
    text = cluster.output(index)
    return float(text.split(f"{word} in ")[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--phase", type=float, default=2.0, help="seconds of steady pushing between events")
    args = parser.parse_args()
    from pskv.launch import start_local

    out = Path(tempfile.mkdtemp(prefix="pskv-bench-elastic-"))
    command = [sys.executable, __file__, "--node", str(out), str(args.rows), str(args.dim)]
    env = {"PYTHONPATH": str(ROOT / "src")}
    mb = args.rows * args.dim * 4 * 2 / 1e6  # rows and Adagrad accumulators
    print(f"table {args.rows} x {args.dim} float32 + Adagrad state ({mb:.1f} MB), {args.nodes} nodes pushing")
    first = start_local(args.nodes, command, env=env)
    clusters = [first]
    try:
        _wait(lambda: all((out / f"running-{r}").exists() for r in range(args.nodes)), "the cluster")
        marks = {"steady": time.monotonic()}
        time.sleep(args.phase)
        marks["join"] = time.monotonic()
        joiner = start_local(1, command, env={**env, "BENCH_BEGUN": repr(marks["join"])},
                             join=first.coordinator_address)
        clusters.append(joiner)
        _wait(lambda: (out / f"running-{args.nodes}").exists(), "the joiner")
        marks["joined"] = time.monotonic()
        join_wall = marks["joined"] - marks["join"]
        time.sleep(args.phase)
        marks["leave"] = time.monotonic()
        (out / "leave-1").touch()
        _wait(lambda: "left in" in first.output(1), "node 1 to leave")
        marks["left"] = time.monotonic()
        leave_wall = marks["left"] - marks["leave"]
        time.sleep(args.phase)
        marks["end"] = time.monotonic()
        (out / "stop").touch()
        for c in clusters:
            if c.wait(timeout=120) != 0:
                raise SystemExit(f"bench_elastic: a node failed\n{c.logs_tail(20)}")
        checkpoint = _value(first, 0, "checkpoint")
        begun = time.monotonic()
        restart = start_local(args.nodes + 1, [*command, "--restore"], env={**env, "BENCH_BEGUN": repr(begun)})
        clusters.append(restart)
        if restart.wait(timeout=120) != 0:
            raise SystemExit(f"bench_elastic: the restore failed\n{restart.logs_tail(20)}")
        restored = max(_value(restart, r, "restored") for r in range(args.nodes + 1))
    finally:
        for c in clusters:
            c.shutdown(timeout=10)
    lat = np.concatenate([np.load(p) for p in out.glob("lat-*.npy") if np.load(p).size])
    print(f"\n{'phase':<12} {'seconds':>8} {'pushes/s':>9} {'vs steady':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    phases = [("steady", "steady", "join"), ("joining", "join", "joined"), ("after join", "joined", "leave"),
              ("leaving", "leave", "left"), ("after leave", "left", "end")]
    steady = None
    for name, a, b in phases:
        x = lat[(lat[:, 0] >= marks[a]) & (lat[:, 0] < marks[b]), 1] * 1e3
        rate = len(x) / (marks[b] - marks[a])
        steady = steady or rate
        p50, p99, top = (np.percentile(x, 50), np.percentile(x, 99), x.max()) if len(x) else (np.nan,) * 3
        print(f"{name:<12} {marks[b] - marks[a]:>8.2f} {rate:>9.0f} {rate / steady:>9.2f} {p50:>8.2f} {p99:>8.2f} "
              f"{top:>8.1f}")
    joined = _value(joiner, 0, "joined")
    left = _value(first, 1, "left")
    print(f"\njoin: process start -> share taken {joined:.2f} s (driver saw it running after {join_wall:.2f} s)")
    print(f"leave: node.leave() {left:.2f} s (driver saw it gone after {leave_wall:.2f} s)")
    print(f"grow by checkpoint + restart: checkpoint {checkpoint:.2f} s + {args.nodes + 1}-node restore "
          f"{restored:.2f} s = {checkpoint + restored:.2f} s, training stopped throughout")
    print(f"ratio (checkpoint + restart) / join: {(checkpoint + restored) / joined:.2f}x; the join stops nobody")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--node"]:
        _node(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), restore=sys.argv[5:6] == ["--restore"])
    else:
        main()
