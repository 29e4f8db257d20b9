"""Out-of-core tables (Petuum Bösen): MF with its item table on disk (`--storage disk`, a budget of
`--cache-rows` rows in memory) against the same run with the table in memory, in one run.

    python benchmarks/bench_outofcore.py [--items 4000000] [--rank 16] [--cache-rows 200000] [--nodes 2]

Both runs are `pskv run mf --nodes N -- --data zipf:USERSxITEMSxNNZ --stats ...` (Adagrad on the
items, so every item row has as much updater state beside it). Printed per run: wall time, each
node's RSS after training (VmRSS; its peak, getrusage, includes generating the data), and for the disk run the table's files, the peak of their resident
pages (measured before each trim) and the number of trims; then the slowdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args, storage: str, path: Path) -> dict:
    command = [sys.executable, "-m", "pskv", "run", "mf", "--nodes", str(args.nodes), "--", "--data",
               f"zipf:{args.users}x{args.items}x{args.ratings}", "--rank", str(args.rank), "--epochs",
               str(args.epochs), "--progress", "none", "--stats", "--item-updater", "adagrad", "--storage", storage,
               "--storage-path", str(path), "--cache-rows", str(args.cache_rows)]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    stats = [json.loads(line.split("@@stats ", 1)[1]) for line in proc.stdout.splitlines() if "@@stats " in line]
    rmse = [line for line in proc.stdout.splitlines() if line.rstrip().split("] ")[-1].startswith("test RMSE")]
    return {"wall": wall, "stats": stats, "rmse": rmse[-1].split("test RMSE ")[-1] if rmse else "?"}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--items", type=int, default=4_000_000)
    p.add_argument("--ratings", type=int, default=2_000_000)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--cache-rows", type=int, default=200_000)
    p.add_argument("--nodes", type=int, default=2)
    args = p.parse_args(argv)
    row = (args.rank + 1) * 4
    table = args.items * row * 2  # rows and Adagrad state
    budget = args.cache_rows * row
    print(f"mf zipf {args.users:,} x {args.items:,}, {args.ratings:,} ratings, rank {args.rank}: item table "
          f"{table / 2**20:.0f} MiB with its Adagrad state ({table / args.nodes / 2**20:.0f} MiB per node); disk "
          f"budget {args.cache_rows:,} rows = {budget / 2**20:.1f} MiB per node ({table / args.nodes / budget:.0f}x "
          f"smaller than a node's share)", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for storage in ("memory", "disk"):
            results[storage] = r = _run(args, storage, Path(tmp) / "rows")
            print(f"\n{storage}: {r['wall']:.1f} s, test RMSE {r['rmse']}")
            for s in r["stats"]:
                t = s["tables"]["mf-items"]
                line = (f"  node {s['rank']}: RSS after training {s['rss_bytes'] / 2**20:.0f} MiB, peak RSS "
                        f"{s['max_rss_bytes'] / 2**20:.0f} MiB (data generation included)")
                if storage == "disk":
                    line += (f"; item files {t['disk_file_bytes'] / 2**20:.0f} MiB, their peak resident "
                             f"{t['disk_peak_bytes'] / 2**20:.1f} MiB, {t['disk_trims']} trims")
                print(line, flush=True)
    mem, disk = results["memory"], results["disk"]
    rss = lambda r: max(s["rss_bytes"] for s in r["stats"])
    print(f"\ndisk / memory: {disk['wall'] / mem['wall']:.2f}x the wall time; RSS after training {rss(disk) / 2**20:.0f} "
          f"vs {rss(mem) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
