"""MF, model-parallel against data-parallel: CCD++ on pskv's STRADS-style scheduler (`--schedule ccd`,
cyclic rotation of item blocks and strads priority) against the data-parallel SGD of `pskv run mf`
(`--schedule free`, Lapse's MF), on MovieLens-100K's fixed 90/10 split, same rank, in one run.

    python benchmarks/bench_mf_ccd.py [--nodes 2] [--rank 50] [--sgd-epochs 30] [--ccd-epochs 15] [--target 0.92]

Each run is `pskv run mf --nodes N -- --log FILE ...`; its log gives train and test RMSE per epoch
and the wall time since training began. Printed per run: the final and best test RMSE, the wall
time of the whole training, the first epoch and time at which the test RMSE fell to --target, and
for ccd the scheduler's share of the run (it chooses while the workers compute).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args, name: str, flags: list[str], log: Path) -> dict:
    command = [sys.executable, "-m", "pskv", "run", "mf", "--nodes", str(args.nodes), "--", "--data", "ml-100k",
               "--rank", str(args.rank), "--progress", "none", "--log", str(log), *flags]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    share = [line.split("(")[-1].split(" of the run")[0] for line in proc.stdout.splitlines() if "scheduler chose" in line]
    hit = next((r for r in rows if r["test_rmse"] <= args.target), None)
    return {"name": name, "epochs": len(rows), "test": rows[-1]["test_rmse"], "best": min(r["test_rmse"] for r in rows),
            "train": rows[-1]["train_rmse"], "wall": rows[-1]["wall"],
            "hit": (hit["epoch"], hit["wall"]) if hit else None, "share": share[-1] if share else "-"}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--rank", type=int, default=50)
    p.add_argument("--sgd-epochs", type=int, default=30)
    p.add_argument("--ccd-epochs", type=int, default=15)
    p.add_argument("--target", type=float, default=0.92, help="test RMSE to reach")
    args = p.parse_args(argv)
    runs = [("data-parallel SGD (free)", ["--schedule", "free", "--epochs", str(args.sgd_epochs)]),
            ("model-parallel CCD++ cyclic", ["--schedule", "ccd", "--ccd-policy", "cyclic",
                                             "--epochs", str(args.ccd_epochs)]),
            ("model-parallel CCD++ strads", ["--schedule", "ccd", "--ccd-policy", "strads",
                                             "--epochs", str(args.ccd_epochs)])]
    results = []
    with tempfile.TemporaryDirectory(prefix="pskv-bench-mf-ccd-") as tmp:
        for i, (name, flags) in enumerate(runs):
            results.append(_run(args, name, flags, Path(tmp) / f"{i}.jsonl"))
            print(f"done: {name}", file=sys.stderr, flush=True)
    print(f"MovieLens-100K, rank {args.rank}, {args.nodes} node(s) x 1 thread; target test RMSE {args.target}")
    print(f"{'run':30s} {'epochs':>6s} {'train':>7s} {'test':>7s} {'best':>7s} {'wall s':>7s} "
          f"{'target at':>16s} {'scheduler':>9s}")
    base = results[0]["hit"][1] if results[0]["hit"] else None
    for r in results:
        hit = f"ep {r['hit'][0]}, {r['hit'][1]:.2f} s" if r["hit"] else "not reached"
        print(f"{r['name']:30s} {r['epochs']:6d} {r['train']:7.4f} {r['test']:7.4f} {r['best']:7.4f} {r['wall']:7.2f} "
              f"{hit:>16s} {r['share']:>9s}")
    for r in results[1:]:
        if base and r["hit"]:
            print(f"{r['name']}: reaches {args.target} in {r['hit'][1] / base:.2f}x the time of data-parallel SGD")


if __name__ == "__main__":
    main()
