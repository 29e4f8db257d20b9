"""What one exchange per batch saves across hosts (issue 31 items 2 and 6): the apps on 2 emulated hosts x 1 process
with `--exchange` (a batch's push and a coming batch's pull in one message per node, table.exchange) and
`--no-exchange` (a push and a pull_async), beside 1 process x 1 thread; with --before, the same rows of another
pskv (e.g. a checkout before this work) in the same rounds.

    .venv/bin/python benchmarks/bench_exchange.py                                    # mf and kge, 3 rounds
    .venv/bin/python benchmarks/bench_exchange.py --before /tmp/old/src --rounds 3  # + the old code's rows
    .venv/bin/python benchmarks/bench_exchange.py --apps mf --app-flags "--batch 4000"  # every row with it
    .venv/bin/python benchmarks/bench_exchange.py --apps mf --rounds 1 --quick       # a smoke run

The runs and figures are bench_efficiency's (`pskv run APP --nodes N [--hosts 2] [--insecure] -- ...`, CPU-s of
every process, per epoch from a short and a long run): see its docstring. Each round runs every row once, in
turn, so that the machine's load drifts across all rows alike; a row's figure is the median of its rounds, and
its CPU ratio is against the 1-process row of its own pskv. On a loaded machine read the CPU ratios (and the
per-round ratios printed below each table: each divides two rows of the same round).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_efficiency as eff  # a sibling benchmark: its runs, rows and tables

ON = (("PSKV_SHARED_MEMORY", "1"),)


@dataclasses.dataclass(frozen=True)
class Variant:
    label: str
    app: eff.App  # with its flags
    setup: eff.Setup
    src: Path  # the pskv it imports


def rows_of(app: eff.App, src: Path, before: Path | None) -> list[Variant]:
    """Every row of one app, each pskv's 1-process row first."""
    without = dataclasses.replace(app, flags=(*app.flags, "--no-exchange"))
    hosts = (((), "2 emulated hosts x 1 process"), (("--insecure",), "2 emulated hosts x 1 process, --insecure"))
    rows = []
    for tree, tag in ((before, "before"), (src, "")):
        if tree is None:
            continue
        suffix = f" ({tag})" if tag else ""
        rows.append(Variant(f"1 process x 1 thread{suffix}", app, eff.Setup("1 process x 1 thread", 1, 1, ON,
                                                                              baseline=not tag), tree))
        for flags, name in hosts:
            if tag:
                rows.append(Variant(f"{name}{suffix}", app, eff.Setup(name, 2, 1, ON, hosts=2, flags=flags), tree))
            else:
                rows.append(Variant(f"{name}, --no-exchange", without, eff.Setup(name, 2, 1, ON, hosts=2, flags=flags),
                                    tree))
                rows.append(Variant(f"{name}, --exchange", app, eff.Setup(name, 2, 1, ON, hosts=2, flags=flags), tree))
    return rows


def _table(name: str, variants: list[Variant], got: dict[int, list[eff.Row]]) -> None:
    print("| app | run | CPU-s / epoch | wall-s / epoch | CPU ratio vs its 1 process | CPU ratio per round |",
          flush=True)
    print("| --- | --- | --: | --: | --: | --- |")
    base = {v.src: i for i, v in enumerate(variants) if v.label.startswith("1 process")}
    for i, v in enumerate(variants):
        rows = got[i]
        if any(r.failed for r in rows):
            print(f"| {name} | {v.label} | failed: {next(r.failed for r in rows if r.failed)} | | | |")
            continue
        b = got[base[v.src]]
        per = [r.cpu / x.cpu for r, x in zip(rows, b, strict=True) if x.cpu > 0 and not x.failed]
        cpu, wall = statistics.median(r.cpu for r in rows), statistics.median(r.wall for r in rows)
        ratio = statistics.median(per) if per else float("nan")
        print(f"| {name} | {v.label} | {cpu:.2f} | {wall:.2f} | {ratio:.2f} | {', '.join(f'{x:.2f}' for x in per)} |",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--apps", default="mf,kge", help="comma-separated: mf, kge (default both)")
    p.add_argument("--epochs", type=eff._epochs, help="SHORT,LONG epochs of the two runs (default 2,6)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every row; medians are reported (default 3)")
    p.add_argument("--before", type=Path, help="the src/ directory of another pskv: its rows too (no --exchange flag)")
    p.add_argument("--app-flags", default="", help="more flags for the app in every row, e.g. \"--batch 4000\"")
    p.add_argument("--quick", action="store_true", help="tiny data, epochs 1,2: a smoke run")
    args = p.parse_args(argv)
    src, before = eff.SRC, args.before.resolve() if args.before else None
    command = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"# bench_exchange  {time.strftime('%Y-%m-%d %H:%M')}  {command}\n\npskv: {eff._version()}"
          f"{f'; before: {before}' if before else ''}\nmachine: {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the start\n", flush=True)
    started, failed = time.monotonic(), False
    with tempfile.TemporaryDirectory(prefix="pskv-benchexch-") as cwd:
        for name in args.apps.split(","):
            app = eff.BY_NAME[name]
            if args.app_flags:
                app = dataclasses.replace(app, flags=(*app.flags, *args.app_flags.split()))
            epochs = (1, 2) if args.quick and not args.epochs else args.epochs or app.epochs
            variants = rows_of(app, src, before)
            for tree in {v.src for v in variants} if not args.quick else ():  # untimed: numba's cache, the page cache
                eff.SRC = tree
                eff.run_measured(eff.app_argv(app, variants[0].setup, 1, True), eff.child_env(()), cwd, "warm-up")
            got: dict[int, list[eff.Row]] = {}
            for r in range(args.rounds):
                for i, v in enumerate(variants):
                    eff.SRC = v.src  # (bench_efficiency's children import the pskv of eff.SRC)
                    eff._say(f"  {name} round {r + 1}: {v.label}")
                    row = eff.measure_row(v.app, v.setup, epochs, argparse.Namespace(repeats=1, quick=args.quick), cwd)
                    got.setdefault(i, []).append(row)
            eff.SRC = src
            _table(name, variants, got)
            print(flush=True)
            failed = failed or any(r.failed for rows in got.values() for r in rows)
    print(f"total {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
