"""Intent signaling (`--intent`, issue 35) against classic and the hand-tuned techniques, across emulated hosts.

    .venv/bin/python benchmarks/bench_intents.py                          # kge, word2vec, mf; 2 and 4 hosts, 1gbit
    .venv/bin/python benchmarks/bench_intents.py --apps kge --hosts 2 --rounds 2
    .venv/bin/python benchmarks/bench_intents.py --quick                  # small data, 2 hosts: a smoke run

Each cell is one `pskv run APP --nodes H --hosts H --link RATE --threads T -- FLAGS --stats` (needs
root, ip and tc: one node per emulated host, every byte between nodes crosses a tbf-limited veth
pair). Per app and host count the variants run one after another in each round (interleaved, so
the machine's load hits them alike); a cell's figure is the median over rounds of the app's own
throughput line (triples/s, words/s, ratings/s) and of the bytes all nodes sent (`bytes_sent` of
node.stats()). Ratios are against classic of the same app, host count and round set; the targets
(issue 35): `--intent` at least 0.9x the best hand-tuned variant's speed, and on kge at least 2x
classic. Prints one markdown table per app and host count, and the targets' lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
RUN_TIMEOUT = 900.0  # seconds one cell may take (4 emulated hosts on 2 loaded cores are slow)
TAG = "@@stats"

# app -> (its flags, the regex of its throughput, unit, [(variant, flags, hand-tuned?)])
APPS = {
    "kge": (["--data", "random:20000,20,40000", "--epochs", "1", "--eval-every", "0", "--eval-triples", "100"],
            r"([\d,]+) triples/s", "triples/s",
            [("classic", ["--sampling", "naive"], False),  # (no --sampling on >1 node is onlylocal now: below)
             ("onlylocal (the default)", [], True),
             ("localize", ["--localize"], True),
             ("replicate 20", ["--sampling", "naive", "--replicate", "20"], True),
             ("onlylocal + replicate 20", ["--replicate", "20"], True),
             ("sampling preloc", ["--sampling", "preloc"], True),
             ("sampling pool x4", ["--sampling", "pool", "--reuse", "4"], True),
             ("localize + pool x4 + replicate 20", ["--localize", "--sampling", "pool", "--reuse", "4",
                                                    "--replicate", "20"], True),
             ("intent", ["--intent"], False),
             ("intent without location caches", ["--intent", "--location-caches", "off"], False)]),
    "word2vec": (["--data", "head500", "--epochs", "1"], r"([\d,]+) words/s", "words/s",
                 [("classic", [], False),
                  ("localize", ["--localize"], True),
                  ("replicate 1000", ["--replicate", "1000"], True),
                  ("replicate 1000 + localize", ["--replicate", "1000", "--localize"], True),
                  ("replicate 1000 + pool x4", ["--replicate", "1000", "--sampling", "pool", "--reuse", "4"], True),
                  ("intent", ["--intent"], False)]),
    "mf": (["--data", "zipf:20000x5000x500000", "--epochs", "1"], r"\(([\d,]+) ratings/s\)", "ratings/s",
           [("classic", ["--schedule", "free"], False),  # (--schedule auto, the default, is dsgd + localize: below)
            ("localize", ["--schedule", "free", "--localize"], True),
            ("replicate 500", ["--schedule", "free", "--replicate", "500"], True),
            ("dsgd + localize (the default)", [], True),
            ("intent", ["--intent"], False),
            ("dsgd + intent", ["--schedule", "dsgd", "--intent"], False)]),
}
QUICK = {"kge": ["--data", "random:4000,20,8000", "--dim", "32"], "word2vec": ["--data-words", "20000"],
         "mf": ["--data", "zipf:4000x1000x60000", "--rank", "16"]}


class BenchError(Exception):
    pass


def run_cell(app: str, hosts: int, threads: int, link: str, flags: list[str]) -> tuple[float, int, dict]:
    """(items/s, bytes all nodes sent, intent counters of node 0) of one run."""
    base, pattern, _, _ = APPS[app]
    argv = [sys.executable, "-m", "pskv", "run", app, "--nodes", str(hosts), "--hosts", str(hosts), "--link", link,
            "--threads", str(threads), "--", *base, *flags, "--stats", "--progress", "none"]
    env = dict(os.environ, PYTHONPATH=str(SRC), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the launcher stops its nodes and hosts
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group we started: the launcher and its nodes
            out, _ = proc.communicate()
        raise BenchError(f"{app} {flags}: no end after {RUN_TIMEOUT:.0f} s\n{out[-2000:]}") from None
    if proc.returncode != 0:
        raise BenchError(f"{app} {flags}: exit status {proc.returncode}\n{out[-2000:]}")
    rate = re.search(pattern, out)
    if rate is None:
        raise BenchError(f"{app} {flags}: no /{pattern}/ in its output\n{out[-2000:]}")
    sent, counters = node_stats(out)
    counters = {k: v for k, v in counters.items()
                if k.startswith("intent_") or k in ("localizes", "local_keys", "remote_keys")}
    return float(rate.group(1).replace(",", "")), sent, counters


def node_stats(out: str) -> tuple[int, dict[str, int]]:
    """From a run's `--stats` lines: the bytes all nodes sent, and node 0's counters summed over its tables."""
    sent, counters = 0, {}
    for line in out.splitlines():
        if TAG in line:
            stats = json.loads(line.split(TAG, 1)[1])
            sent += int(stats["bytes_sent"])
            if stats["rank"] == 0:
                for t in stats["tables"].values():
                    for k, v in t.items():
                        counters[k] = counters.get(k, 0) + v
    return sent, counters


def table(app: str, hosts: int, cells: dict[str, list[tuple[float, int, dict]]]) -> tuple[str, list[str]]:
    """The markdown table of one app and host count, and its target lines."""
    _, _, unit, variants = APPS[app]
    med = {name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2])
           for name, runs in cells.items() if runs}
    classic = med.get("classic")
    lines = [f"| variant | {unit} | x classic | MB sent | bytes x classic | rounds | node 0: local / remote keys, "
             "moved by intents, copies made / keys served from copies |", "| --- | --: | --: | --: | --: | --: | --- |"]
    for name, _, _ in variants:
        if name not in cells:
            continue  # not asked for (--variants)
        if name not in med:
            lines.append(f"| {name} | failed | | | | | |")
            continue
        rate, sent, c = med[name]
        x = f"{rate / classic[0]:.2f}" if classic else ""
        b = f"{sent / classic[1]:.2f}" if classic and classic[1] else ""
        moved = (f", {c.get('intent_localized', 0):,}, {c.get('intent_copies_made', 0):,} / "
                 f"{c.get('intent_copy_keys_served', 0):,}") if "intent_windows" in c else ""
        lines.append(f"| {name} | {rate:,.0f} | {x} | {sent / 1e6:,.1f} | {b} | {len(cells[name])} | "
                     f"{c.get('local_keys', 0):,} / {c.get('remote_keys', 0):,}{moved} |")
    targets = []
    tuned = [(med[n][0], n) for n, _, hand in variants if hand and n in med]
    if "intent" in med and tuned:
        best, name = max(tuned)
        ratio = med["intent"][0] / best
        targets.append(f"{app}, {hosts} hosts: intent / best hand-tuned ({name}) = {ratio:.2f} (target >= 0.9: "
                       f"{'met' if ratio >= 0.9 else 'NOT met'})")
    if app == "kge" and "intent" in med and classic:
        ratio = med["intent"][0] / classic[0]
        targets.append(f"kge, {hosts} hosts: intent / classic = {ratio:.2f} (target >= 2: "
                       f"{'met' if ratio >= 2 else 'NOT met'})")
    return "\n".join(lines), targets


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--apps", default="kge,word2vec,mf")
    p.add_argument("--hosts", default="2,4", help="emulated host counts, one node each")
    p.add_argument("--threads", type=int, default=2, help="worker threads per node")
    p.add_argument("--link", default="1gbit", help="each host's link (tc tbf rate)")
    p.add_argument("--rounds", type=int, default=1, help="runs of every cell (medians)")
    p.add_argument("--variants", default="", help="comma-separated variant names to run (default: all)")
    p.add_argument("--quick", action="store_true", help="small data sets, 2 hosts: a smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.hosts = "2"
        for app, extra in QUICK.items():
            APPS[app][0].extend(extra)
    apps = [a for a in args.apps.split(",") if a]
    wanted = {v for v in args.variants.split(",") if v}
    load = os.getloadavg()[0]
    commit = subprocess.run(["git", "-C", str(SRC.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                            check=False, text=True).stdout.strip()
    print(f"# bench_intents: pskv {commit}, {os.cpu_count()} cores, load {load:.2f} at the start; link {args.link}, "
          f"{args.threads} threads per node, {args.rounds} round(s)\n", flush=True)
    targets = []
    for hosts in [int(h) for h in args.hosts.split(",")]:
        for app in apps:
            variants = [v for v in APPS[app][3] if not wanted or v[0] in wanted or v[0] == "classic"]
            cells: dict[str, list] = {name: [] for name, _, _ in variants}
            for _ in range(args.rounds):
                for name, flags, _ in variants:
                    t0 = time.monotonic()
                    try:
                        cells[name].append(run_cell(app, hosts, args.threads, args.link, flags))
                    except BenchError as exc:
                        print(f"{app} {hosts} hosts {name}: FAILED {exc}", file=sys.stderr, flush=True)
                        continue
                    rate, sent, _ = cells[name][-1]
                    print(f"  {app} {hosts} hosts {name}: {rate:,.0f} {APPS[app][2]}, {sent / 1e6:,.1f} MB "
                          f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
            text, lines = table(app, hosts, cells)
            targets += lines
            print(f"## {app}, {hosts} emulated hosts x 1 node x {args.threads} threads, {args.link}\n\n{text}\n",
                  flush=True)
    print("## Targets\n\n" + "\n".join(f"- {t}" for t in targets), flush=True)
    print(f"\nload {os.getloadavg()[0]:.2f} at the end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
