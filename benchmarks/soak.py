"""Soak (`make soak`, not in CI): a 3-node cluster with backups=1 pushes for MINUTES minutes to a
relocated table (localizes all along) and a table with replicated hot keys, checkpointing every
EVERY seconds (keep=2), beside a CPU-bound process. Passes when no node fails, every row equals
the pushes counted by the workers exactly, and every node's RSS after warm-up (the first fifth of
the run) grows by less than 5%.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--every 30] [--nodes 3] [--threads 2]

Prints one line per node (RSS at warm-up, at the end, growth) and the totals; exit status 1 on any
failure. Record the figures in benchmarks/RESULTS.md ("Soak").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pskv.launch import start_local

NODE = Path(__file__).with_name("soak_node.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between checkpoints")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--growth", type=float, default=0.05, help="largest RSS growth after warm-up (0.05: 5%%)")
    ap.add_argument("--trace", action="store_true", help="print where Python memory grew after warm-up (tracemalloc; slow)")
    args = ap.parse_args()
    seconds = args.minutes * 60
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory(prefix="pskv-soak-") as tmp:
            out = Path(tmp)
            cluster = start_local(args.nodes, [sys.executable, str(NODE), str(out), str(seconds), str(args.every)],
                                  threads=args.threads, backups=1, log_dir=out / "logs",
                                  env={"PSKV_SOAK_TRACE": "1"} if args.trace else None)
            try:
                status = cluster.wait(timeout=seconds + 300)
            except TimeoutError:
                print(cluster.logs_tail(60))
                cluster.shutdown(timeout=10)
                print("soak: FAILED (hung)")
                return 1
            if status != 0:
                print(cluster.logs_tail(60))
                print(f"soak: FAILED (status {status})")
                return 1
            return _report(cluster, out, args, seconds)
    finally:
        burner.kill()
        burner.wait()


def _report(cluster, out: Path, args, seconds: float) -> int:
    ok = True
    counts = sum(np.load(out / f"counts-{r}.npy") for r in range(args.nodes))
    final = np.load(out / "final.npz")
    for i, name in enumerate(("moved", "hot")):
        want = np.repeat(counts[i][:, None], final[name].shape[1], axis=1).astype(np.float64)
        wrong = int((final[name] != want).any(axis=1).sum())
        print(f"table {name!r}: {int(counts[i].sum()):,} key pushes, {wrong} rows differ from the counts")
        ok &= wrong == 0
    checkpoints = 0
    for r in range(args.nodes):
        text = cluster.output(r)
        rss = [(float(t), int(b)) for t, b in (line.split()[1:3] for line in text.splitlines() if line.startswith("rss "))]
        checkpoints = max(checkpoints, sum(1 for line in text.splitlines() if line.startswith("checkpoint ")))
        warm = [b for t, b in rss if t >= seconds / 5]
        if len(warm) < 2:
            print(f"node {r}: too few RSS samples ({len(rss)})")
            ok = False
            continue
        growth = (max(warm[-3:]) - warm[0]) / warm[0]
        trend = [next(b for t, b in rss if t >= f * seconds / 5) for f in range(1, 5)] + [rss[-1][1]]
        print(f"node {r}: RSS {warm[0] / 2**20:.1f} MiB after warm-up, {warm[-1] / 2**20:.1f} MiB at the end, "
              f"peak {max(b for _, b in rss) / 2**20:.1f} MiB; growth {100 * growth:+.1f}%; at each fifth of the run: "
              + ", ".join(f"{b / 2**20:.1f}" for b in trend) + " MiB")
        ok &= growth < args.growth
        for line in text.splitlines():
            if line.startswith("grew ") or (line.startswith("state ") and args.trace):
                print(f"  node {r}: {line}")
    print(f"{checkpoints} checkpoints, {args.minutes:g} min, {args.nodes} nodes x {args.threads} threads, backups 1")
    print("soak: ok" if ok else "soak: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
