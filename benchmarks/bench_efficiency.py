"""What a second process costs: CPU-seconds and wall time per epoch of the apps on 1 process x 1 thread,
1 process x 2 threads and 2 processes x 1 thread on one host (and 2 emulated hosts when the launcher has
them), and a pull/push of a node's own and a co-located node's rows against numpy (issue 31).

    .venv/bin/python benchmarks/bench_efficiency.py --shared-memory both --kv       # every app, ~25 min
    .venv/bin/python benchmarks/bench_efficiency.py --apps mf,kge --epochs 2,6
    .venv/bin/python benchmarks/bench_efficiency.py --quick --apps mf --kv          # tiny data, < 1 min

Each measurement is `python -m pskv run APP --nodes N --threads T -- ... --epochs E`, a subprocess that
waits for its node processes: CPU-seconds are the user + sys time of every process of the run (the
launcher, its coordinator and the nodes: `getrusage(RUSAGE_CHILDREN)` before and after), wall the
subprocess's. Each row runs twice, with the short and the long epoch count of --epochs (default 2,6;
lr 2,12: its epochs are short), and a figure per epoch is (long - short) / (epochs between): start-up,
imports, data loading and numba's compilation cancel out. `CPU ratio` is CPU-s per epoch / that of
1 process x 1 thread (1.0: the extra process or thread costs no CPU), `speedup` the wall time per epoch
of 1 process x 1 thread / the row's (2.0: linear), `items/s` the training items of an epoch (node 0's
header) / wall-s per epoch. --shared-memory both runs the 2-process row also with PSKV_SHARED_MEMORY=0.

--kv: on 2 nodes (`pskv launch -n 2`, one host), node 0 pulls 100,000 random distinct keys x 64 float32
(a) of its own shard and (b) of node 1's, and pushes them through the table's SGD (row -= lr * g);
the baseline is numpy on an array of the shard's shape: `a[keys]` and `a[keys] -= lr * g` (keys are
distinct, so fancy-index assignment is exact; np.subtract.at would be slower). Medians of --reps
rounds; within a round numpy, own and co-located alternate. `x numpy` = numpy's time / pskv's (1.0:
numpy's speed).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # the pskv under test: the children's PYTHONPATH starts with it (--src)
TAG = "@@bencheff "  # prefix of the line node 0 of the kv part prints
RUN_TIMEOUT = 600.0  # seconds per pskv run (the longest healthy one, mnist 6 epochs on 2 processes: ~40 s)
WAIT = 120.0  # seconds: a pull or push that takes longer means a lost reply
KV_DIM, KV_LR = 64, 0.01


class BenchError(Exception):
    """A run failed or printed something unexpected; the message says which and shows its output's tail."""


@dataclasses.dataclass(frozen=True)
class App:
    name: str
    flags: tuple[str, ...]  # the app's arguments in a full run
    quick: tuple[str, ...]  # with --quick: tiny data
    items: str  # regex on the output: group 1 is the training items of one epoch
    unit: str
    epochs: tuple[int, int] = (2, 6)  # short and long run, unless --epochs
    quality: tuple[tuple[str, str], ...] = ()  # (name, regex): group 1 of the last match in the long run's output


APPS = (
    App("mf", ("--data", "zipf:20000x10000x2000000"), ("--data", "zipf:2000x1000x40000", "--rank", "16"),
        r"([\d,]+) train / [\d,]+ test ratings", "ratings", quality=(("test RMSE", r"test RMSE ([\d.]+)"),)),
    App("kge", ("--data", "random:20000,20,40000", "--eval-every", "0"),  # training only, as the runs
        ("--data", "random:2000,10,4000", "--dim", "32", "--neg", "4", "--eval-every", "0"), r"train=(\d+)",
        "triples", quality=(("loss", r"epoch +\d+ +loss ([\d.]+)"), ("test MRR", r"test MRR ([\d.]+)"))),
    App("word2vec", ("--data", "head500"), ("--data", "head500", "--data-words", "20000"),
        r"\(([\d,]+) per epoch\)", "words"),
    App("lr", ("--data", "census"), ("--data", "census", "--rows", "5000"), r"on ([\d,]+) train", "examples",
        epochs=(2, 12)),  # dbpg: ~0.25 s an epoch on census after the first
    App("mnist", ("--limit", "20000", "--test-limit", "2000"), ("--limit", "640", "--test-limit", "200"),
        r"on ([\d,]+) images", "images"),
)
BY_NAME = {a.name: a for a in APPS}


@dataclasses.dataclass(frozen=True)
class Setup:
    label: str
    nodes: int
    threads: int
    env: tuple[tuple[str, str], ...] = ()
    hosts: int = 0  # emulated hosts (`pskv run --hosts`); 0: all nodes on this host
    flags: tuple[str, ...] = ()  # of `pskv run`
    baseline: bool = False  # the row the ratios divide by
    key: str = ""  # its name for --rows
    app_flags: tuple[str, ...] = ()  # more of the app's own (a --variant's)


@dataclasses.dataclass
class Row:
    app: App
    setup: Setup
    cpu: float  # CPU-s per epoch
    wall: float  # wall-s per epoch
    items: int  # per epoch
    cpu_ratio: float = float("nan")
    speedup: float = float("nan")
    failed: str = ""  # why the row has no figures
    quality: str = ""  # the app's quality figures at the end of the long run (App.quality)

    @property
    def items_per_s(self) -> float:
        return self.items / self.wall if self.wall > 0 else float("nan")


ROW_KEYS = ("1x2", "2p", "2p-noshm", "hosts", "hosts-insecure")  # --rows; the baseline (1 process x 1 thread) always


def setups(shared_memory: str, hosts: bool, insecure: tuple[str, ...] = ("--insecure",), keys: tuple[str, ...] = (),
           variants: tuple[tuple[str, tuple[str, ...]], ...] = (), io_threads: int = 0) -> list[Setup]:
    """The rows of one app, in the order they run; the first is the baseline. `insecure`: the run flag of
    the insecure row (PSKV_INSECURE=1 does the same where `pskv run` has no --insecure). `keys`: only these
    rows besides the baseline (ROW_KEYS; none: all). Each of `variants` (label, app flags) repeats the
    chosen rows but the baseline with those flags; `io_threads` > 1 the emulated-host rows with that many
    ZeroMQ I/O threads per context (PYTHONPATH's sitecustomize: see _io_threads_dir)."""
    on, off = (("PSKV_SHARED_MEMORY", "1"),), (("PSKV_SHARED_MEMORY", "0"),)
    mine = off if shared_memory == "off" else on
    rows = [Setup("1 process x 2 threads", 1, 2, mine, key="1x2"),
            Setup("2 processes x 1 thread", 2, 1, mine, key="2p")]
    if shared_memory == "both":
        rows.append(Setup("2 processes x 1 thread, PSKV_SHARED_MEMORY=0", 2, 1, off, key="2p-noshm"))
    if hosts:
        env = mine if insecure else (*mine, ("PSKV_INSECURE", "1"))
        rows += [Setup("2 emulated hosts x 1 process", 2, 1, mine, hosts=2, key="hosts"),
                 Setup("2 emulated hosts x 1 process, --insecure", 2, 1, env, hosts=2, flags=insecure,
                       key="hosts-insecure")]
    rows = [r for r in rows if not keys or r.key in keys]
    if io_threads > 1:
        io = (("PYTHONPATH", str(_io_threads_dir(io_threads))),)
        rows += [dataclasses.replace(r, label=f"{r.label}, {io_threads} ZeroMQ I/O threads", env=r.env + io)
                 for r in rows if r.hosts]
    rows += [dataclasses.replace(r, label=f"{r.label}, {label}", app_flags=flags) for label, flags in variants
             for r in rows]
    return [Setup("1 process x 1 thread", 1, 1, mine, baseline=True), *rows]


_IO_DIRS: dict[int, Path] = {}


def _io_threads_dir(n: int) -> Path:
    """A directory whose sitecustomize.py makes every zmq.Context of the process start `n` I/O threads (pskv
    makes its context with the default, 1): on a row's PYTHONPATH after the pskv under test (child_env)."""
    if n not in _IO_DIRS:
        d = Path(tempfile.mkdtemp(prefix=f"pskv-bencheff-io{n}-"))
        (d / "sitecustomize.py").write_text(
            "import zmq\n\n_init = zmq.Context.__init__\n\n\n"
            f"def _with_io_threads(self, io_threads=1, *args, **kwargs):\n"
            f"    _init(self, {n} if io_threads == 1 else io_threads, *args, **kwargs)\n\n\n"
            "zmq.Context.__init__ = _with_io_threads\n")
        atexit.register(shutil.rmtree, d, True)
        _IO_DIRS[n] = d
    return _IO_DIRS[n]


def run_flags() -> set[str]:
    """The options `pskv run --help` lists (--hosts: emulated hosts, network namespaces)."""
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "--help"], capture_output=True, text=True,
                          env=child_env(()), timeout=60, check=False)
    return set(re.findall(r"(--[a-z][a-z-]*)", proc.stdout))


def child_env(extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """This environment minus PSKV_* cluster settings (data locations kept), plus `extra`."""
    keep = ("PSKV_DATA_DIR", "PSKV_LAPSE_TOY")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_") or k in keep}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + [p for p in [env.get("PYTHONPATH")] if p])
    more = dict(extra)
    if "PYTHONPATH" in more:  # after the pskv under test
        more["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + more["PYTHONPATH"]
    env.update(more)
    return env


# ---- one run ------------------------------------------------------------------------------------------------
def run_measured(argv: list[str], env: dict[str, str], cwd: str, what: str) -> tuple[float, float, str]:
    """Run argv to its end; return (CPU-s of it and every descendant it waited for, wall-s, stdout).
    On a timeout or an interrupt: SIGTERM (the launcher stops its nodes), SIGKILL to its group 30 s later."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except BaseException as exc:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the launcher we started: it and its nodes
            out, _ = proc.communicate()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        raise BenchError(f"{what}: no end after {RUN_TIMEOUT:.0f} s (stopped)\n{_tail(out)}") from None
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise BenchError(f"{what}: exit status {proc.returncode}\n{_tail(out)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, out


def _tail(out: str, lines: int = 15) -> str:
    return "\n".join("  | " + x for x in out.strip().splitlines()[-lines:])


def app_argv(app: App, setup: Setup, epochs: int, quick: bool) -> list[str]:
    hosts = ["--hosts", str(setup.hosts)] if setup.hosts else []
    return [sys.executable, "-m", "pskv", "run", app.name, "--nodes", str(setup.nodes), *hosts, *setup.flags,
            "--threads", str(setup.threads), "--", *(app.quick if quick else app.flags), *setup.app_flags,
            "--epochs", str(epochs), "--progress", "none"]


def measure(app: App, setup: Setup, epochs: tuple[int, int], quick: bool, cwd: str) -> Row:
    """One row: the short and the long run, and their difference per epoch."""
    got = []
    for e in epochs:
        what = f"{app.name}, {setup.label}, {e} epoch{'s' if e > 1 else ''}"
        cpu, wall, out = run_measured(app_argv(app, setup, e, quick), child_env(setup.env), cwd, what)
        found = re.search(app.items, out)
        if found is None:
            raise BenchError(f"{what}: no item count in its output (/{app.items}/): did the app's header change?\n"
                             f"{_tail(out)}")
        got.append((cpu, wall, int(found.group(1).replace(",", ""))))
    (cpu0, wall0, items), (cpu1, wall1, _) = got
    span = epochs[1] - epochs[0]
    return Row(app, setup, (cpu1 - cpu0) / span, (wall1 - wall0) / span, items, quality=_quality(app, out))


def _quality(app: App, out: str) -> str:
    """The app's quality figures (App.quality) as the run's output last shows them, e.g. "test RMSE 0.9210"."""
    shown = [f"{name} {found[-1]}" for name, pattern in app.quality if (found := re.findall(pattern, out))]
    return ", ".join(shown)


def ratios(rows: list[Row]) -> None:
    """Fill in each row's CPU ratio and speedup against its app's baseline row."""
    base = {r.app.name: r for r in rows if r.setup.baseline}
    for r in rows:
        b = base.get(r.app.name)
        if b is not None and not b.failed and not r.failed and r.cpu > 0 and r.wall > 0:
            r.cpu_ratio, r.speedup = r.cpu / b.cpu, b.wall / r.wall


def app_table(rows: list[Row]) -> str:
    lines = ["| app | run | CPU-s / epoch | wall-s / epoch | CPU ratio vs 1 process | speedup vs 1 process | items/s "
             "| at the end of the long run |",
             "| --- | --- | --: | --: | --: | --: | --: | --- |"]
    for r in rows:
        if r.failed:
            lines.append(f"| {r.app.name} | {r.setup.label} | failed: {r.failed} | | | | | |")
            continue
        lines.append(f"| {r.app.name} | {r.setup.label} | {r.cpu:.2f} | {r.wall:.2f} | {r.cpu_ratio:.2f} | "
                     f"{r.speedup:.2f} | {r.items_per_s:,.0f} {r.app.unit} | {r.quality} |")
    return "\n".join(lines)


# ---- the kv part --------------------------------------------------------------------------------------------
KV_OPS = (("pull", "numpy"), ("pull", "own shard"), ("pull", "co-located shard"),
          ("push", "numpy"), ("push", "own shard"), ("push", "co-located shard"))


def kv_part(keys: int, reps: int, env_extra: tuple[tuple[str, str], ...], cwd: str) -> dict[str, float]:
    """Median seconds per op of KV_OPS, from node 0 of a 2-node cluster on this host."""
    node = [sys.executable, str(Path(__file__).resolve()), "--kv-node", f"{keys},{reps}"]
    argv = [sys.executable, "-m", "pskv", "launch", "-n", "2", "--", *node]
    _, _, out = run_measured(argv, child_env(env_extra), cwd, "kv part")
    for line in out.splitlines():
        if TAG in line:
            got = json.loads(line.split(TAG, 1)[1])
            if SRC not in Path(got["pskv"]).resolve().parents:
                raise BenchError(f"kv part: node 0 imported pskv from {got['pskv']}, not from {SRC}")
            del got["pskv"]
            return got
    raise BenchError(f"kv part: node 0 printed no result line\n{_tail(out)}")


def kv_node(spec: str) -> int:
    """Node 0 or 1 of the kv part, under `pskv launch -n 2`: node i manages rows [i * R, (i + 1) * R)
    of a (2R, 64) table (contiguous halves); node 0 measures, node 1 serves until it is done."""
    import numpy as np

    import pskv

    n, reps = (int(x) for x in spec.split(","))
    shard = 2 * n  # rows per node: the keys are n distinct rows of 2n
    rng = np.random.default_rng(0)
    own = rng.choice(shard, n, replace=False)  # (n,) int64 random distinct keys of node 0's range
    other = shard + rng.choice(shard, n, replace=False)  # (n,) int64 of node 1's range
    grads = rng.standard_normal((n, KV_DIM), dtype=np.float32)  # (n, 64) float32
    a = rng.standard_normal((shard, KV_DIM), dtype=np.float32)  # (2n, 64) float32: numpy's "shard"
    lr = np.float32(KV_LR)
    result: dict[str, float] = {}
    with pskv.init() as node:
        node.table("eff", rows=2 * shard, dim=KV_DIM, updater=pskv.SGD(lr=KV_LR))

        def body(w: pskv.Worker) -> None:
            if node.rank == 0:
                t = w.table("eff")

                def numpy_push() -> None:
                    a[own] -= lr * grads  # distinct keys: exact, one gather and one scatter

                ops = {("pull", "numpy"): lambda: a[own], ("pull", "own shard"): lambda: t.pull(own),
                       ("pull", "co-located shard"): lambda: t.pull(other), ("push", "numpy"): numpy_push,
                       ("push", "own shard"): lambda: t.push(own, grads).wait(WAIT),
                       ("push", "co-located shard"): lambda: t.push(other, grads).wait(WAIT)}
                before = node.stats()["tables"]["eff"]["local_keys"]
                t.pull(own)
                if node.stats()["tables"]["eff"]["local_keys"] - before != n:
                    raise SystemExit("bench_efficiency: node 0's keys [0, R) were not all served locally; "
                                     "the table is not split into contiguous halves any more")
                result.update(_rounds(ops, reps))
            w.barrier()  # node 1 serves until node 0 is done

        node.run(body, threads=1)
    if result:
        print(TAG + json.dumps({"pskv": pskv.__file__, **result}), flush=True)
    return 0


def _rounds(ops: dict, reps: int) -> dict[str, float]:
    """Median seconds of each op: 2 untimed calls each, then `reps` rounds of one call of every op in turn."""
    import gc

    for fn in ops.values():
        fn(), fn()
    gc.collect()
    times: dict[tuple[str, str], list[float]] = {k: [] for k in ops}
    for _ in range(reps):
        for key, fn in ops.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return {f"{op}|{where}": statistics.median(xs) for (op, where), xs in times.items()}


def kv_table(results: dict[str, dict[str, float]], keys: int) -> str:
    """results[label of a shared-memory setting][op|where] -> median seconds."""
    lines = [f"| op ({keys:,} keys x {KV_DIM}) | where | shared memory | median ms | GB/s | x numpy |",
             "| --- | --- | --- | --: | --: | --: |"]
    for label, got in results.items():
        for op, where in KV_OPS:
            s = got[f"{op}|{where}"]
            ratio = got[f"{op}|numpy"] / s
            lines.append(f"| {op} | {where} | {label} | {s * 1e3:.2f} | {keys * KV_DIM * 4 / s / 1e9:.2f} | "
                         f"{ratio:.2f} |")
    return "\n".join(lines)


# ---- the command line ---------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_efficiency.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--apps", type=_apps, default=[a.name for a in APPS],
                   help="comma-separated, of " + ",".join(BY_NAME) + " (default all; mnist needs torch); "
                        "'none': only --kv")
    p.add_argument("--epochs", type=_epochs, help="SHORT,LONG epochs of the two runs (default 2,6; lr 2,12)")
    p.add_argument("--shared-memory", choices=("on", "off", "both"), default="on",
                   help="PSKV_SHARED_MEMORY=1, =0, or the 2-process rows with both (default on)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each row; the median is reported (default 1)")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds of all the rows of an app, one row after the other (on a loaded machine: the load "
                        "drifts across every row alike); medians are reported, and each round's CPU ratios")
    p.add_argument("--hosts", choices=("auto", "off"), default="auto",
                   help="auto: the emulated-host rows when `pskv run --help` lists --hosts (default); off: never")
    p.add_argument("--rows", type=_rows, default=(),
                   help="comma-separated, of " + ",".join(ROW_KEYS) + ": only these rows beside the baseline "
                        "(1 process x 1 thread); e.g. hosts,hosts-insecure (default all; 2p-noshm with "
                        "--shared-memory both, hosts* when emulated hosts are there)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=FLAGS", type=_variant,
                   help="the chosen rows but the baseline again with the app's FLAGS added, labelled LABEL, e.g. "
                        "--variant 'dsgd=--schedule dsgd --localize' (repeatable)")
    p.add_argument("--app-flags", default="", help="more of the app's flags in every row, the baseline's too")
    p.add_argument("--io-threads", type=int, default=0,
                   help="N > 1: the emulated-host rows again with N ZeroMQ I/O threads per context")
    p.add_argument("--kv", action="store_true", help="also the pull/push part: own and co-located shard vs numpy")
    p.add_argument("--kv-keys", type=int, help="keys per pull/push (default 100,000; quick 10,000)")
    p.add_argument("--reps", type=int, help="kv rounds (default 15; quick 3)")
    p.add_argument("--quick", action="store_true", help="tiny data, epochs 1,2, a short kv part: a smoke run")
    p.add_argument("--src", type=Path, help="the src/ directory of the pskv to measure (default this checkout's; "
                                            "e.g. a `git archive HEAD src` extracted elsewhere)")
    p.add_argument("--kv-node", help=argparse.SUPPRESS)  # a node of the kv part
    return p


def _apps(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip() and x.strip() != "none"]
    unknown = [x for x in names if x not in BY_NAME]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)}: expected some of {','.join(BY_NAME)}, or none")
    return names


def _rows(text: str) -> tuple[str, ...]:
    keys = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in keys if x not in ROW_KEYS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)}: expected some of {','.join(ROW_KEYS)}")
    return keys


def _variant(text: str) -> tuple[str, tuple[str, ...]]:
    label, sep, flags = text.partition("=")
    if not sep or not label.strip() or not flags.split():
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=FLAGS, e.g. 'dsgd=--schedule dsgd --localize'")
    return label.strip(), tuple(flags.split())


def _epochs(text: str) -> tuple[int, int]:
    try:
        short, long = (int(x) for x in text.split(","))
    except ValueError:
        short = long = 0
    if not 1 <= short < long:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SHORT,LONG with 1 <= SHORT < LONG, e.g. 2,6")
    return short, long


def _median_row(rows: list[Row]) -> Row:
    mid = dataclasses.replace(rows[0])
    mid.cpu, mid.wall = statistics.median(r.cpu for r in rows), statistics.median(r.wall for r in rows)
    mid.quality = "; ".join(dict.fromkeys(r.quality for r in rows if r.quality))  # (same seed: the same, as a rule)
    return mid


def _round_ratios(got: list[list[Row]]) -> list[str]:
    """With several rounds, a line per row but the first (the baseline): its CPU over the baseline's, round by round."""
    if len(got[0]) < 2:
        return []
    lines = []
    for runs in got[1:]:
        per = [r.cpu / b.cpu for r, b in zip(runs, got[0], strict=True) if not r.failed and not b.failed and b.cpu > 0]
        lines.append(f"- {runs[0].setup.label}: {', '.join(f'{x:.2f}' for x in per)}")
    return lines


def _version() -> str:
    """Which pskv the runs import: its directory, and `git describe --dirty` when that is this checkout."""
    if SRC != ROOT / "src":
        return str(SRC)
    proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True,
                          check=False)
    return f"{SRC} ({proc.stdout.strip() or 'not a git checkout'})"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_row(app: App, setup: Setup, epochs: tuple[int, int], args: argparse.Namespace, cwd: str) -> Row:
    """The median row of --repeats measurements; a failed run gives a row that says why (and the run goes on)."""
    try:
        return _median_row([measure(app, setup, epochs, args.quick, cwd) for _ in range(max(1, args.repeats))])
    except BenchError as exc:
        _say(f"bench_efficiency: {exc}")
        first = str(exc).splitlines()[0]
        cause = re.findall(r"\b(\w+(?:Error|Failure|Exception)\b: .*)", str(exc))
        return Row(app, setup, 0.0, 0.0, 0, failed=first + (f" ({cause[-1]})" if cause else ""))


def main(argv: list[str] | None = None) -> int:
    """Exit status 0, or 1 when a row or the kv part failed (the others are still measured and printed)."""
    global SRC  # noqa: PLW0603 - the children's PYTHONPATH (child_env) and bench_exchange read it
    args = _parser().parse_args(argv)
    if args.kv_node:
        return kv_node(args.kv_node)
    if args.src is not None:
        if not (args.src / "pskv" / "__init__.py").is_file():
            raise BenchError(f"--src {args.src}: no pskv/__init__.py there; give the src/ directory of a pskv tree")
        SRC = args.src.resolve()
    apps = [BY_NAME[n] for n in args.apps]
    if args.app_flags:
        apps = [dataclasses.replace(a, flags=(*a.flags, *args.app_flags.split()),
                                    quick=(*a.quick, *args.app_flags.split())) for a in apps]
    if "mnist" in args.apps and importlib.util.find_spec("torch") is None:
        print("mnist: skipped, torch is not importable (pip install 'pskv[torch]')", flush=True)
        apps = [a for a in apps if a.name != "mnist"]
    flags = run_flags()
    hosts = args.hosts == "auto" and "--hosts" in flags
    insecure = ("--insecure",) if "--insecure" in flags else ()
    command = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"# bench_efficiency  {time.strftime('%Y-%m-%d %H:%M')}  {command}\n\npskv: {_version()}\n"
          f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start\n", flush=True)
    if not hosts:
        why = "--hosts off" if args.hosts == "off" else "`pskv run --help` lists no --hosts"
        print(f"emulated hosts: skipped ({why})\n", flush=True)
    started, failed = time.monotonic(), False
    with tempfile.TemporaryDirectory(prefix="pskv-bencheff-") as cwd:
        rows: list[Row] = []
        per_round: dict[str, list[str]] = {}
        for app in apps:
            epochs = (1, 2) if args.quick and not args.epochs else args.epochs or app.epochs
            if not args.quick:  # untimed: numba compiles what its cache lacks, the page cache gets the data
                try:
                    run_measured(app_argv(app, setups("on", False)[0], 1, True), child_env(()), cwd, "warm-up")
                except BenchError as exc:
                    _say(f"bench_efficiency: {exc}")
            plan = setups(args.shared_memory, hosts, insecure, args.rows, tuple(args.variant), args.io_threads)
            got: list[list[Row]] = [[] for _ in plan]
            for r in range(max(1, args.rounds)):  # each round every row once, in turn: the load drifts alike
                for i, setup in enumerate(plan):
                    _say(f"  {app.name}{f' round {r + 1}' if args.rounds > 1 else ''}: {setup.label}, epochs "
                         f"{epochs[0]} and {epochs[1]}")
                    got[i].append(measure_row(app, setup, epochs, args, cwd))
            rows += [next((x for x in runs if x.failed), None) or _median_row(runs) for runs in got]
            per_round[app.name] = _round_ratios(got)
        if rows:
            ratios(rows)
            print(app_table(rows) + "\n", flush=True)
            for name, lines in per_round.items():
                if lines:
                    print(f"{name}, CPU ratio vs 1 process in each round (medians above):\n" + "\n".join(lines) + "\n",
                          flush=True)
            failed = any(r.failed for r in rows)
        if args.kv:
            failed = not kv_report(args, cwd) or failed
    print(f"total {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.2f}", flush=True)
    return 1 if failed else 0


def kv_report(args: argparse.Namespace, cwd: str) -> bool:
    """Run and print the kv part for each shared-memory setting; False if it failed."""
    keys = args.kv_keys or (10_000 if args.quick else 100_000)
    reps = args.reps or (3 if args.quick else 15)
    settings = {"on": [("on", "1")], "off": [("off", "0")], "both": [("on", "1"), ("off", "0")]}
    results = {}
    try:
        for label, value in settings[args.shared_memory]:
            _say(f"  kv: {keys:,} keys x {KV_DIM}, {reps} rounds, PSKV_SHARED_MEMORY={value}")
            results[label] = kv_part(keys, reps, (("PSKV_SHARED_MEMORY", value),), cwd)
    except BenchError as exc:
        print(f"kv part failed: {exc}", flush=True)
        return False
    finally:
        if results:
            print(kv_table(results, keys) + "\n", flush=True)
    return True

if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench_efficiency: {exc}", file=sys.stderr)
        sys.exit(1)
