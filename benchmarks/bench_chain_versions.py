"""Two versions of pskv side by side on the write path with backups: is a refactoring of server/ "no slower"?

    .venv/bin/python benchmarks/bench_chain_versions.py --base REV [--head REV|WORKTREE] [--rounds 5]

bench_versions.py measures the hot paths without backups; this measures bench_fault.py's push
throughput (3 nodes, every node pushes 64 keys x 16 float32 to every key range, 8 in flight) with
backups = 0 and backups = 1, for both versions, in paired rounds (base, head, base, head, ...), so
that load from other work falls on both alike. Each version is exported with bench_versions.prepare
and runs with PYTHONPATH its own src/ (bench_fault's nodes inherit it). Reported: the median
pushes/s of each (version, backups), head/base for each backups (of the medians, and the median
of each round's head/base: the load of a shared machine drifts between rounds more than within one),
and each version's backups=1 / backups=0. Absolute rates on a shared machine are noise; compare ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_versions  # noqa: E402 - beside this file

RATE = ("import json, sys; sys.path.insert(0, {here!r}); import bench_fault; "
        "print(json.dumps(bench_fault.push_rate(3, {backups}, {pushes})))")


def rate(version, backups: int, pushes: int) -> float:
    """Push throughput (pushes/s summed over 3 nodes) of `version` with `backups`."""
    env = bench_versions.child_env(version, lapse="")
    code = bench_versions._CHECK + RATE.format(here=str(HERE), backups=backups, pushes=pushes)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{version.name} backups={backups} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", default=bench_versions.WORKTREE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pushes", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="benchc-") as tmp:
        versions = [bench_versions.prepare(label, Path(tmp) / name)
                    for name, label in (("base", args.base), ("head", args.head))]
        got: dict[tuple[int, int], list[float]] = {(v, b): [] for v in (0, 1) for b in (0, 1)}
        for r in range(args.rounds + 1):  # round 0: warm-up (numba compiles into each fresh tree)
            for b in (0, 1):
                for v, version in enumerate(versions):
                    x = rate(version, b, args.pushes)
                    if r:
                        got[(v, b)].append(x)
        print(f"push throughput, 3 nodes, 64 keys x 16 float32 per push, 8 in flight, {args.pushes} pushes per node "
              f"(pushes/s summed over nodes; median of {args.rounds} paired rounds after a warm-up)")
        med = {k: statistics.median(xs) for k, xs in got.items()}
        for b in (0, 1):
            for v, version in enumerate(versions):
                print(f"  backups={b} {'base' if v == 0 else 'head'} {version.name:28s} {med[(v, b)]:8.0f}   "
                      f"(rounds: {', '.join(f'{x:.0f}' for x in got[(v, b)])})")
            pairs = [h / b_ for b_, h in zip(got[(0, b)], got[(1, b)], strict=True)]  # each round's head/base
            print(f"  backups={b} head/base: {med[(1, b)] / med[(0, b)]:.2f} of the medians; per round "
                  f"{statistics.median(pairs):.2f} median ({', '.join(f'{x:.2f}' for x in pairs)})")
        for v in (0, 1):
            print(f"  {'base' if v == 0 else 'head'}: backups=1 / backups=0 = {med[(v, 1)] / med[(v, 0)]:.2f}")


if __name__ == "__main__":
    main()
