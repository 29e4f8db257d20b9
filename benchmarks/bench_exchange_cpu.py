"""CPU per batch of an MF-like step on every thread of both nodes, across 2 emulated hosts (issue 31): a push
and a pull_async against one exchange, and one process doing the same batches alone, in one invocation.

    .venv/bin/python benchmarks/bench_exchange_cpu.py                    # --insecure and CURVE, ~5 min
    .venv/bin/python benchmarks/bench_exchange_cpu.py --setups insecure --batches 1000 --rounds 3 --one-side

A batch is np.unique of 1,000 Zipf(0.8) draws of 10,000 rows (about 720 distinct, from every node's range),
101 float32 columns, an Adagrad table (MF's items on zipf data). Each node runs the batches in turn, its next
batch's rows asked for while this one "trains" (no kernel: only the data path): `pp` pulls the next batch
(pull_async) and pushes this one; `ex` pushes this one with the pull of the batch two on (table.exchange), as
the mf app does. With --one-side only node 0 works and node 1 only serves. Between barriers each node reads
the CPU time of each of its threads from /proc (worker, pskv-server, ZeroMQ's I/O thread, pyzmq's
garbage collector of zero-copy frames): CPU-us per batch, the median of --rounds paired rounds (pp and ex
alternate). `alone` is one process of one node doing the same batches (every key its own).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
ROWS, DIM, DRAWS = 10_000, 101, 1000
SETUPS = {"insecure": ["--insecure"], "curve": []}


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process so far, by name (Python's, else the kernel's)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # (a thread that ended meanwhile)
            continue
        name = names.get(int(tid), comm)
        name = "-".join(name.split("-")[:2]) if name.startswith("pskv-") else name
        out[name] = out.get(name, 0.0) + (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return out


def node_main(batches_n: int, rounds: int, one_side: bool) -> None:
    import pskv

    node = pskv.init()
    node.table("items", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1))
    w = node.worker()
    t = w.table("items")
    rng = np.random.default_rng(node.rank)
    p = 1.0 / np.arange(1, ROWS + 1) ** 0.8
    perm = np.random.default_rng(7).permutation(ROWS)  # popular rows in every node's range
    batches = [np.unique(perm[rng.choice(ROWS, DRAWS, p=p / p.sum())]) for _ in range(min(batches_n, 1500) + 2)]
    grads = [np.full((len(b), DIM), 0.001, np.float32) for b in batches]
    m = len(batches)

    def pp(n: int) -> None:
        fut = t.pull_async(batches[0])
        for i in range(n):
            fut.wait(60)
            fut = t.pull_async(batches[(i + 1) % m])
            t.push(batches[i % m], grads[i % m], copy=False)
        fut.wait(60)

    def ex(n: int) -> None:
        futs = {0: t.pull_async(batches[0]), 1: t.pull_async(batches[1])}
        for i in range(n):
            futs.pop(i).wait(60)
            futs[i + 2] = t.exchange(batches[i % m], grads[i % m], batches[(i + 2) % m], copy=False)
        for f in futs.values():
            f.wait(60)

    pp(20)
    ex(20)
    got: dict[str, list[dict[str, float]]] = {"pp": [], "ex": []}
    for _ in range(rounds):
        for name, step in (("pp", pp), ("ex", ex)):
            w.barrier(300)
            before = _thread_cpu()
            if not (one_side and node.rank == 1):
                step(batches_n)
            w.wait_all()
            w.barrier(300)
            after = _thread_cpu()
            got[name].append({k: (v - before.get(k, 0.0)) / batches_n * 1e6 for k, v in after.items()})
    for name, per in got.items():
        threads = sorted({k for d in per for k in d})
        med = {k: statistics.median(d.get(k, 0.0) for d in per) for k in threads}
        total = statistics.median(sum(d.values()) for d in per)
        shown = ", ".join(f"{k} {v:.0f}" for k, v in sorted(med.items(), key=lambda kv: -kv[1]) if v >= 5)
        print(f"FIGURE node {node.rank} {name}: {total:.0f} us/batch ({shown})", flush=True)
    w.close()
    node.shutdown()


def _launch(flags: list[str], args: argparse.Namespace, nodes: int) -> list[str]:
    node = [sys.executable, str(Path(__file__).resolve()), "--node", "--batches", str(args.batches), "--rounds",
            str(args.rounds)] + (["--one-side"] if args.one_side else [])
    hosts = ["--hosts", "2"] if nodes == 2 else []
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")},
           "PYTHONPATH": os.pathsep.join([str(SRC)] + [x for x in [os.environ.get("PYTHONPATH")] if x])}
    done = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", str(nodes), *hosts, *flags, "--", *node],
                          capture_output=True, text=True, env=env, timeout=1800, stdin=subprocess.DEVNULL,
                          check=False)
    lines = [line.split("FIGURE ", 1)[1] for line in done.stdout.splitlines() if "FIGURE " in line]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"pskv launch {' '.join(flags)} failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-2000:]}")
    return sorted(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setups", default="insecure,curve", help=f"comma-separated, of {','.join(SETUPS)}")
    ap.add_argument("--batches", type=int, default=1500, help="batches per measurement (default 1500)")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds; medians are reported (default 3)")
    ap.add_argument("--one-side", action="store_true", help="node 1 only serves")
    ap.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.node:
        node_main(args.batches, args.rounds, args.one_side)
        return 0
    print(f"# bench_exchange_cpu  {time.strftime('%Y-%m-%d %H:%M')}  {' '.join(sys.argv[1:])}\n"
          f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    for line in _launch(["--insecure"], args, 1):
        print(f"alone (1 node): {line}", flush=True)
    for setup in args.setups.split(","):
        for line in _launch(SETUPS[setup], args, 2):
            print(f"2 emulated hosts, {setup}: {line}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
