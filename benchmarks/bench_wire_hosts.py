"""The wire between two emulated hosts against raw pyzmq between the same two hosts (issue 31 item 5).

    .venv/bin/python benchmarks/bench_wire_hosts.py                       # every setup, 5 rounds (5-12 min)
    .venv/bin/python benchmarks/bench_wire_hosts.py --quick               # 2 rounds, --insecure unlimited only
    .venv/bin/python benchmarks/bench_wire_hosts.py --setups insecure,curve --rounds 3

Each setup is one `pskv launch -n 2 --hosts 2 [--link RATE] [--insecure] -- python THIS --node ...`
(needs root, ip and tc): node 0 on emulated host 0, node 1 on host 1, each in its own network
namespace on a bridge, so every byte crosses a veth pair as it would cross a NIC. Node 1 declares
the floor table (pskv.bench.floor: (200,000, 64) float32, node 1 owns the upper half) and, in a
thread of its process, serves raw pyzmq (a ROUTER on its host's address: a pull is np.take sent
zero-copy, a push data[keys] += vals); node 0 is the client of both, one DEALER message per raw op,
on keys node 1 owns. With CURVE (no --insecure) the raw sockets speak CURVE with the cluster's keys
too, so each row compares like with like. The figures are the floor's (pskv.bench.floor.floor:
calls of raw and pskv alternate within a round, medians of paired rounds), plus `burst`: 8
pull_async then wait for all, against 8 raw sends then 8 receives.

Prints one table per setup, each figure's ratio pskv speed / raw speed (median of the per-round
ratios and their range) and the issue's target where it has one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
RAW_PORT = 47391  # node 1's raw ROUTER; its network namespace is its own, so a fixed port is free
SETUPS = {  # name -> pskv launch flags
    "insecure": ["--insecure"],
    "insecure-noshm": ["--insecure", "--no-shared-memory"],  # shards not in shared files: no row locks
    "insecure-1gbit": ["--insecure", "--link", "1gbit"],
    "curve": [],
    "curve-1gbit": ["--link", "1gbit"],
}
# figure prefix -> (target ratio, what the issue asks): pskv speed / raw speed
TARGETS = {"pull 1,000 keys": (1 / 1.3, "round trip within 1.3x of raw"),
           "pull 100,000 x 64 with": (0.9, ">= 0.9x raw"),
           "pull 100,000 x 64 without": (0.9, ">= 0.9x raw"),
           "push 100,000": (0.9, ">= 0.9x raw"),
           "8 outstanding": (1.0, ">= 1.0x raw one message per op"),
           "burst": (1.0, ">= 1.0x raw one message per op")}


# ---- in each node (pskv launch runs this file with --node) --------------------------------------
def _burst(table, raw, keys: np.ndarray, window: int, budget: float, rounds_out: list) -> None:
    """Ops/s of `window` pull_async then wait for all, against `window` raw sends then receives."""
    from pskv.bench.cells import WAIT
    from pskv.bench.floor import _interleaved

    def raw_burst() -> None:
        for _ in range(window):
            raw.send_pull(keys)
        for _ in range(window):
            raw.recv_rows(len(keys))

    def pskv_burst() -> None:
        for f in [table.pull_async(keys) for _ in range(window)]:
            f.wait(WAIT)

    r, p = _interleaved([raw_burst, pskv_burst], budget)
    rounds_out.append((window / r, window / p))


def node_main(out: str, rounds: int, budget: float, window: int) -> int:
    import pskv
    from pskv.bench.floor import FLOOR_DIM, FLOOR_ROWS, Floor, RawClient, floor, raw_server
    from pskv.net import auth

    secret = os.environ.get("PSKV_SECRET_FILE")
    keys = auth.load(secret) if secret else None
    stop = threading.Event()
    raw_thread = None
    with pskv.init() as node:
        node.table("floor", rows=2 * FLOOR_ROWS, dim=FLOOR_DIM)  # collective: both nodes declare it
        worker = node.worker()
        if node.rank == 1:
            raw_thread = threading.Thread(target=raw_server, name="raw-pyzmq", daemon=True,
                                          args=(RAW_PORT, 2 * FLOOR_ROWS, FLOOR_DIM, stop, os.environ["PSKV_HOST"], keys))
            raw_thread.start()
        worker.barrier(timeout=120)
        try:
            if node.rank == 0:
                host = node.view.addresses[1].rsplit(":", 1)[0].strip("[]")
                raw = RawClient(RAW_PORT, FLOOR_DIM, host, keys)
                table = worker.table("floor")
                say = lambda line: print(line, flush=True)  # noqa: E731
                try:
                    got = floor(table, raw, FLOOR_ROWS, FLOOR_ROWS, rounds, budget, window, say=say)
                    k1 = np.array([FLOOR_ROWS + 7], np.int64)
                    bursts: list = []
                    for _ in range(rounds):
                        _burst(table, raw, k1, window, budget, bursts)
                    got.append(Floor(f"burst: {window} pull_async of 1 key, then wait all, ops/s", "ops/s",
                                     [b[0] for b in bursts], [b[1] for b in bursts]))
                finally:
                    raw.close()
                Path(out).write_text(json.dumps({"figures": [dataclasses.asdict(f) for f in got],
                                                 "stats": node.stats().get("tables", {}).get("floor", {})},
                                                default=str))
            worker.barrier(timeout=900)  # node 1 serves until node 0 is done
        finally:
            stop.set()
            if raw_thread is not None:
                raw_thread.join(5)
            worker.close()
    return 0


# ---- the launcher side --------------------------------------------------------------------------
def run_setup(name: str, rounds: int, budget: float, window: int, tmp: Path) -> dict:
    """One `pskv launch` of the two nodes; returns node 0's figures."""
    out = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + [p for p in [env.get("PYTHONPATH")] if p])
    argv = [sys.executable, "-m", "pskv", "launch", "-n", "2", "--hosts", "2", *SETUPS[name], "--",
            sys.executable, str(Path(__file__).resolve()), "--node", str(out), "--rounds", str(rounds),
            "--budget", str(budget), "--window", str(window)]
    print(f"== {name}: {' '.join(argv[1:8 + len(SETUPS[name])])} ...", flush=True)
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, timeout=1800)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"setup {name}: the launch exited {done.returncode} without results")
    return json.loads(out.read_text())


def table_of(name: str, result: dict) -> str:
    from pskv.bench.floor import Floor

    figures = [Floor(**f) for f in result["figures"]]
    fmt = lambda unit, x: f"{x:,.0f}" if unit != "GB/s" else f"{x:.2f}"  # noqa: E731
    lines = [f"{name}:", "", "| figure | raw pyzmq | pskv | pskv speed / raw (median, range) | target |",
             "|---|--:|--:|--:|---|"]
    for f in figures:
        rt = f.ratios
        target = next(((t, why) for prefix, (t, why) in TARGETS.items() if f.figure.startswith(prefix)), None)
        mark = ""
        if target is not None:  # the targets are for --insecure; with CURVE the row is for information
            met = "met" if np.median(rt) >= target[0] else "missed"
            mark = f"{target[1]}: {met}" if "insecure" in name else target[1]
        lines.append(f"| {f.figure} | {fmt(f.unit, float(np.median(f.raw)))} {f.unit} | "
                     f"{fmt(f.unit, float(np.median(f.pskv)))} {f.unit} | "
                     f"{np.median(rt):.2f} ({min(rt):.2f}-{max(rt):.2f}) | {mark} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--node", metavar="OUT", help=argparse.SUPPRESS)  # run as a node; node 0 writes OUT
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=0.5, help="seconds per figure and round (default 0.5)")
    p.add_argument("--window", type=int, default=8, help="outstanding 1-key pulls (default 8)")
    p.add_argument("--quick", action="store_true", help="2 rounds of budget 0.3, --insecure unlimited only")
    args = p.parse_args(argv)
    if args.node:
        return node_main(args.node, args.rounds, args.budget, args.window)
    if args.quick:
        args.setups, args.rounds, args.budget = "insecure", 2, 0.3
    names = [s for s in args.setups.split(",") if s]
    unknown = [s for s in names if s not in SETUPS]
    if unknown:
        p.error(f"unknown setups {unknown}; pick from {', '.join(SETUPS)}")
    start, load0 = time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pskv-wire-") as tmp:
        results = {name: run_setup(name, args.rounds, args.budget, args.window, Path(tmp)) for name in names}
    print(f"\n{start}, load {load0:.1f} -> {os.getloadavg()[0]:.1f}; {args.rounds} rounds, budget {args.budget} s, "
          f"window {args.window}; 2 emulated hosts x 1 node\n")
    for name, result in results.items():
        print(table_of(name, result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
