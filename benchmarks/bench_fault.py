"""Backups: what they cost and how fast a cluster recovers, measured in one run.

    python benchmarks/bench_fault.py [--nodes 3] [--pushes 1500] [--rounds 3]

1. Push throughput with backups = 0, 1, 2 (3 nodes, every node pushes 64 keys x 16 float32 to
   every key range, 8 pushes in flight), paired rounds, medians; ratio to backups = 0.
2. Recovery time with backups = 1: node 0 pulls a row of node 1's range in a loop; node 1 is
   SIGKILLed; the time from the kill to the end of node 0's first pull begun after it (the range
   is then served by node 2). The launcher reports the exit at once (no heartbeat timeout).
3. MF on MovieLens-100K with --backups 1 (`pskv.apps.mf`, 3 nodes, --mf-epochs epochs): once
   undisturbed, once with node 2 SIGKILLed when node 0 printed epoch --kill-at; final test RMSE
   of both and their difference (target: within 0.01).

Absolute times on a shared 2-core machine are noise; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS, DIM, KEYS, WINDOW = 30_000, 16, 64, 8


def _push_node(out: Path, pushes: int) -> None:
    import pskv

    with pskv.init() as node:
        node.table("w", ROWS, DIM)
        worker = node.worker()
        table = worker.table("w")
        worker.barrier()
        rng = np.random.default_rng(node.rank)
        values = np.ones((KEYS, DIM), np.float32)
        pending = []
        start = time.perf_counter()
        for _ in range(pushes):
            pending.append(table.push(rng.integers(0, ROWS, KEYS), values))
            if len(pending) > WINDOW:
                pending.pop(0).wait()
        for f in pending:
            f.wait()
        seconds = time.perf_counter() - start
        worker.barrier()
        worker.close()
        (out / f"push-{node.rank}").write_text(f"{pushes / seconds}")


def _recovery_node(out: Path) -> None:
    import pskv

    with pskv.init() as node:
        table = node.table("w", ROWS, DIM)
        key = np.array([ROWS // node.num_nodes + 1])  # in node 1's range
        done = []
        if node.rank == 0:
            (out / "ready").write_text("1")
            deadline = time.time() + 60
            while time.time() < deadline and len(node.members) == node.num_nodes:
                began = time.time()
                table.pull(key)
                done.append((began, time.time()))
            for _ in range(20):
                began = time.time()
                table.pull(key)
                done.append((began, time.time()))
            np.save(out / "pulls.npy", np.array(done))
        else:
            deadline = time.time() + 60
            while time.time() < deadline and len(node.members) == node.num_nodes:
                time.sleep(0.01)


def _cluster(nodes: int, backups: int, argv: list[str]):
    from pskv.launch import start_local

    return start_local(nodes, [sys.executable, __file__, *argv], backups=backups, failure_timeout=5)


def push_rate(nodes: int, backups: int, pushes: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        with _cluster(nodes, backups, ["--node", "push", tmp, str(pushes)]) as c:
            if c.wait(300) != 0:
                raise SystemExit(c.logs_tail())
        return sum(float((Path(tmp) / f"push-{r}").read_text()) for r in range(nodes))


def recovery(nodes: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        with _cluster(nodes, 1, ["--node", "recovery", tmp]) as c:
            while not (Path(tmp) / "ready").exists():
                time.sleep(0.01)
            time.sleep(0.5)
            killed = time.time()
            c.kill(1, signal.SIGKILL)
            if c.wait(120) != 0:
                raise SystemExit(c.logs_tail())
            pulls = np.load(Path(tmp) / "pulls.npy")
        after = pulls[pulls[:, 0] > killed]  # pulls begun after the kill: the first waits for the failover
        return float(after[0, 1] - killed)


def mf_rmse(nodes: int, epochs: int, kill_at: int | None) -> tuple[float, int]:
    """Final test RMSE of `pskv.apps.mf --backups 1` on MovieLens-100K, and the epochs node 0 printed."""
    import re

    from pskv.launch import start_local

    argv = [sys.executable, "-m", "pskv.apps.mf", "--data", "ml-100k", "--epochs", str(epochs), "--backups", "1",
            "--progress", "none"]
    with start_local(nodes, argv, backups=1, failure_timeout=5) as c:
        if kill_at is not None:
            deadline = time.time() + 600
            while len(re.findall(r"epoch +\d+ ", c.output(0))) < kill_at and time.time() < deadline:
                time.sleep(0.02)
            c.kill(nodes - 1, signal.SIGKILL)
        if c.wait(900) != 0:
            raise SystemExit(c.logs_tail())
        out = c.output(0)
    return float(re.search(r"test RMSE (\d+\.\d+)\s*$", out).group(1)), len(re.findall(r"epoch +\d+ ", out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mf-epochs", type=int, default=20)
    parser.add_argument("--kill-at", type=int, default=5, help="epoch after which node 2 is killed in the MF run")
    parser.add_argument("--node", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node:
        kind, out, *rest = args.node
        if kind == "push":
            _push_node(Path(out), int(rest[0]))
        else:
            _recovery_node(Path(out))
        return
    rates: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for _ in range(args.rounds):
        for b in rates:
            rates[b].append(push_rate(args.nodes, b, args.pushes))
    base = statistics.median(rates[0])
    print(f"push throughput, {args.nodes} nodes, {KEYS} keys x {DIM} float32 per push, {WINDOW} in flight "
          f"(pushes/s summed over nodes, median of {args.rounds} paired rounds)")
    for b, got in rates.items():
        med = statistics.median(got)
        print(f"  backups={b}: {med:9.0f} pushes/s   ratio to backups=0: {med / base:.2f}   "
              f"(rounds: {', '.join(f'{x:.0f}' for x in got)})")
    times = [recovery(args.nodes) for _ in range(args.rounds)]
    print(f"recovery (kill -> first completed pull on the moved range), backups=1: median "
          f"{statistics.median(times) * 1000:.0f} ms (rounds: {', '.join(f'{t * 1000:.0f}' for t in times)} ms)")
    calm, epochs = mf_rmse(args.nodes, args.mf_epochs, None)
    hurt, _ = mf_rmse(args.nodes, args.mf_epochs, args.kill_at)
    print(f"mf on ml-100k, {args.nodes} nodes, --backups 1, {epochs} epochs: test RMSE {calm:.4f} undisturbed, "
          f"{hurt:.4f} with node {args.nodes - 1} killed after epoch {args.kill_at}; difference {hurt - calm:+.4f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
