"""Consistency benchmark: BSP, SSP(1), SSP(3) and Async with one worker slowed down 3x (Bösen, ATC'14).

    .venv/bin/python benchmarks/bench_consistency.py            # 2 nodes x 2 threads, every model
    .venv/bin/python benchmarks/bench_consistency.py --quick    # fewer clocks

Workload: least squares by mini-batch SGD on generated data, the model (DIM weights, in rows of
16) in one pskv table. Every worker does the same fixed work, CLOCKS clocks of one mini-batch
gradient each, padded with sleep to STEP seconds per clock; the last worker takes 3 x STEP.
Two stragglers: `persistent` (the last worker is always 3x slower) and `rotating` (at clock c,
worker c mod 4 is 3x slower: transient stragglers, as GC pauses or a busy network make them).
Printed per model: wall time until every worker finished its clocks, the speed-up over BSP, the
final objective (mean squared error on all data; every model did the same updates), pulls that
waited for the clock, and the messages and bytes all nodes sent. Then the level-1 aggregation
benchmark (bench_aggregation.py) if it is there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DIM = 256  # weights, in rows of 16
ROW = 16
SAMPLES = 4096  # per worker
BATCH = 512
LR = 0.02
STEP = 0.02  # seconds of "compute" per clock (the gradient, padded with sleep); the straggler takes 3x


def _data(worker: int) -> tuple[np.ndarray, np.ndarray]:
    truth = np.random.default_rng(0).normal(size=DIM)
    rng = np.random.default_rng(100 + worker)
    x = rng.normal(size=(SAMPLES, DIM))
    return x, x @ truth + 0.1 * rng.normal(size=SAMPLES)


def node_main(model: str, clocks: int, straggler: str) -> None:
    """One node of the benchmark cluster (run under pskv launch)."""
    import pskv

    node = pskv.init(consistency=model)
    threads = node.config.threads
    workers = node.num_nodes * threads
    node.table("w", rows=DIM // ROW, dim=ROW, dtype="float64")
    keys = np.arange(DIM // ROW)
    data = {r * threads + t: _data(r * threads + t) for r in [node.rank] for t in range(threads)}
    everything = [_data(i) for i in range(workers)] if node.rank == 0 else None
    start = [0.0]

    def train(w: pskv.Worker) -> None:
        me = w.rank * threads + w.thread
        x, y = data[me]
        t = w.table("w")
        rng = np.random.default_rng(me)
        w.barrier()
        if me == 0:
            start[0] = time.monotonic()
        for c in range(clocks):
            weights = t.pull(keys).reshape(DIM)
            began = time.monotonic()
            batch = rng.integers(0, SAMPLES, BATCH)
            grad = x[batch].T @ (x[batch] @ weights - y[batch]) / BATCH
            t.push(keys, (-LR * grad).reshape(-1, ROW))
            slow = workers - 1 if straggler == "persistent" else c % workers  # who is 3x slower now
            step = 3 * STEP if me == slow else STEP
            time.sleep(max(0.0, step - (time.monotonic() - began)))
            w.clock()
        w.wait_all()

    node.run(train, threads=threads)
    node._main().barrier()
    wall = time.monotonic() - start[0]
    stats = node.stats()
    weights = node._main().table("w").pull(keys).reshape(DIM)
    if node.rank == 0:
        final = float(np.mean([np.mean((xa @ weights - ya) ** 2) for xa, ya in everything]))
        print("RESULT " + json.dumps({"wall": wall, "final": final, "clock_waits": stats["clock_waits"]}),
              flush=True)
    print("SENT " + json.dumps({"messages": stats["messages_sent"], "bytes": stats["bytes_sent"]}), flush=True)
    node.shutdown()


def run_model(model: str, clocks: int, straggler: str, nodes: int = 2, threads: int = 2) -> dict:
    cmd = [sys.executable, "-m", "pskv", "launch", "-n", str(nodes), "--threads", str(threads), "--",
           sys.executable, str(Path(__file__).resolve()), "--node", model, "--clocks", str(clocks),
           "--straggler", straggler]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{model}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result, messages, sent = None, 0, 0
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            result = json.loads(line.split("RESULT ", 1)[1])
        elif "SENT " in line:
            s = json.loads(line.split("SENT ", 1)[1])
            messages += s["messages"]
            sent += s["bytes"]
    result.update(model=model, messages=messages, bytes=sent)
    return result


def run(quick: bool = False) -> list[dict]:
    clocks = 30 if quick else 80
    rows = []
    for straggler in ("persistent", "rotating"):
        results = [run_model(m, clocks, straggler) for m in ("bsp", "ssp:1", "ssp:3", "async")]
        bsp = results[0]
        for r in results:
            rows.append({"straggler": straggler, "model": r["model"], "clocks": clocks, "wall_s": round(r["wall"], 2),
                         "speedup_vs_bsp": round(bsp["wall"] / r["wall"], 2), "final_mse": round(r["final"], 4),
                         "clock_waits": r["clock_waits"], "messages": r["messages"],
                         "MB_sent": round(r["bytes"] / 1e6, 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--node", help=argparse.SUPPRESS)
    p.add_argument("--clocks", type=int, default=80, help=argparse.SUPPRESS)
    p.add_argument("--straggler", default="persistent", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.node:
        node_main(args.node, args.clocks, args.straggler)
        return 0
    rows = run(args.quick)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + " --- |" * len(keys))
    for row in rows:
        print("| " + " | ".join("" if row[k] is None else str(row[k]) for k in keys) + " |", flush=True)
    aggregation = HERE / "bench_aggregation.py"
    if aggregation.is_file():
        import importlib.util
        spec = importlib.util.spec_from_file_location("bench_aggregation", aggregation)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print("\nTwo-level aggregation:")
        for row in module.run(args.quick):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
