"""Intent copies with backups, and the copies' sync interval (issue 35 item 2): kge `--intent` against
classic, without and with backups, and with backups at several PSKV_INTENT_SYNC intervals.

    .venv/bin/python benchmarks/bench_intent_backups.py                  # 3 rounds
    .venv/bin/python benchmarks/bench_intent_backups.py --rounds 1 --quick

Each cell is one `pskv run kge --nodes 2 --threads 2 --no-shared-memory -- ... --stats` on loopback (every
row between the nodes as a message, as between hosts), with PSKV_BACKUPS and PSKV_INTENT_SYNC set in its
environment. The cells run one after another in each round (interleaved, so
the machine's load hits them alike). A cell's figures are medians over rounds: triples/s (the app's own
line), the bytes all nodes sent (`bytes_sent`), and node 0's copy counters. Ratios are against classic
with the same backups, in the same runs: only ratios mean anything on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_intents import node_stats  # a sibling benchmark: its --stats parsing

SRC = Path(__file__).resolve().parents[1] / "src"
RUN_TIMEOUT = 900.0  # seconds one cell may take on a loaded machine


class BenchError(Exception):
    pass


def run_cell(flags: list[str], env: dict[str, str]) -> tuple[float, int, dict]:
    """(triples/s, bytes all nodes sent, node 0's counters summed over its tables) of one run."""
    argv = [sys.executable, "-m", "pskv", "run", "kge", "--nodes", "2", "--threads", "2", "--no-shared-memory", "--",
            *flags, "--stats", "--progress", "none"]
    env = dict(os.environ, PYTHONPATH=str(SRC), PYTHONUNBUFFERED="1", **env)
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we started: the launcher and its nodes
        out, _ = proc.communicate()
        raise BenchError(f"{flags}: no end after {RUN_TIMEOUT:.0f} s\n{out[-2000:]}") from None
    rate = re.search(r"([\d,]+) triples/s", out)
    if proc.returncode != 0 or rate is None:
        raise BenchError(f"{flags}: exit status {proc.returncode}\n{out[-2000:]}")
    sent, counters = node_stats(out)
    return float(rate.group(1).replace(",", "")), sent, counters

DATA = ["--data", "random:20000,20,40000", "--epochs", "1", "--eval-every", "0", "--eval-triples", "100"]
QUICK = ["--data", "random:4000,20,8000", "--dim", "32", "--epochs", "1", "--eval-every", "0", "--eval-triples", "100"]
# (name, backups, PSKV_INTENT_SYNC or None: the default, kge flags)
CELLS = [
    ("classic", 0, None, []),
    ("intent", 0, None, ["--intent"]),
    ("classic", 1, None, []),
    ("intent", 1, None, ["--intent"]),
    ("intent, intent_sync 0.2", 1, "0.2", ["--intent"]),
    ("intent, intent_sync 2", 1, "2", ["--intent"]),
    ("intent, intent_sync inf", 1, "inf", ["--intent"]),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small data: a smoke run")
    args = p.parse_args()
    base = QUICK if args.quick else DATA
    runs: dict[int, list] = {i: [] for i in range(len(CELLS))}
    start = time.time()
    for r in range(args.rounds):
        for i, (name, backups, sync, flags) in enumerate(CELLS):
            env = {"PSKV_BACKUPS": str(backups), **({"PSKV_INTENT_SYNC": sync} if sync else {})}
            try:
                runs[i].append(run_cell(base + flags, env))
            except BenchError as exc:
                print(f"round {r + 1}, {name}, backups {backups}: {exc}", file=sys.stderr)
            print(f"round {r + 1}/{args.rounds} {name} backups={backups}: {runs[i][-1][:2] if runs[i] else 'failed'}",
                  file=sys.stderr, flush=True)
    med = {i: (statistics.median(x[0] for x in rs), statistics.median(x[1] for x in rs), rs[-1][2])
           for i, rs in runs.items() if rs}
    classic = {b: med.get(i) for i, (n, b, _, _) in enumerate(CELLS) if n == "classic"}
    print(f"kge on 2 nodes x 2 threads, loopback without shared memory, {args.rounds} round(s), "
          f"{time.time() - start:.0f} s")
    print("| variant | backups | triples/s | x classic | MB sent | bytes x classic | node 0: copies made, sync rounds, "
          "keys synced, keys served from copies |")
    print("| --- | --: | --: | --: | --: | --: | --- |")
    for i, (name, backups, _, _) in enumerate(CELLS):
        if i not in med:
            print(f"| {name} | {backups} | failed | | | | |")
            continue
        rate, sent, c = med[i]
        ref = classic.get(backups)
        x = f"{rate / ref[0]:.2f}" if ref else ""
        b = f"{sent / ref[1]:.2f}" if ref and ref[1] else ""
        copies = (f"{c.get('intent_copies_made', 0):,}, {c.get('intent_copy_rounds', 0):,}, "
                  f"{c.get('intent_copy_keys_synced', 0):,}, {c.get('intent_copy_keys_served', 0):,}")
        print(f"| {name} | {backups} | {rate:,.0f} | {x} | {sent / 1e6:,.1f} | {b} | "
              f"{copies if 'intent_windows' in c else ''} |")


if __name__ == "__main__":
    main()
