"""Two versions of pskv side by side in one run: is a refactoring "no slower"? (issue 10, item 8)

    .venv/bin/python benchmarks/bench_versions.py              # ccc6578 vs the working tree, 5 rounds, ~3.5 min
    .venv/bin/python benchmarks/bench_versions.py --quick      # 2 rounds, shorter measurements, ~1.5 min
    .venv/bin/python benchmarks/bench_versions.py --base HEAD~3 --head HEAD --rounds 7 --jobs kv

Versions: a git revision is exported with `git archive REV src` into a temporary directory
/tmp/benchv-XXXX/ (no worktree, no change to the repository's git state); WORKTREE (the default
--head) is a copy of this checkout's src/ taken when the run starts, so edits made during the
run do not change what is measured. The directory is removed at the end.

Every measurement is a subprocess of this interpreter (sys.executable) with PYTHONPATH=<tree>/src,
which comes before the editable install of pskv on sys.path. Every process that imports pskv
(the launcher and each node) first checks that `pskv.__file__` lies in that tree and exits with
status 97 and a message otherwise. A child that fails stops the run with a non-zero status.

Figures, on 2 local nodes (`pskv launch -n 2`) and through the public API only:
  push 1k x 64      p50 round trip in µs of `t.push(keys, vals).wait()`: node 0 pushes 1,000 random
                    keys x 64 float32 that node 1 manages (a 200,000-row table: node i manages the
                    contiguous range [i * rows // 2, (i + 1) * rows // 2), see table.Placement)
  pull 100k x 64    GB/s of values (25.6 MB) of the median `t.pull_async(keys).wait()` of node 1's
                    100,000 rows by node 0; then the same with `out=` a buffer reused by every call
  kge               `pskv run kge` on Lapse's toy data (Lapse's README settings, ../shared/data via
                    PSKV_LAPSE_TOY), 5 epochs: the median epoch after the first (the app's own
                    epoch seconds, evaluation excluded), and the wall time of the whole run
  mf                `pskv run mf` on generated zipf ratings (nothing to fetch), rank 16, 4 epochs:
                    the same two figures (an MF epoch includes its test RMSE)
Apps run on 2 nodes x 1 thread: `pskv launch -n 2 -- python -m pskv run APP -- ...`, which is what
`pskv run APP --nodes 2` starts, with the pskv check in each node.

Rounds: first one warm-up round per version, not reported (numba compiles the kernels into the
fresh tree's __pycache__), then --rounds rounds. Within a round every job runs for base, then
head (ABAB...), so load from other work on a shared machine falls on both alike. Reported per
figure: the median over rounds, min-max, and head/base of the medians; the verdict is "~" when
the two min-max ranges overlap (within this run's noise), else "faster" or "slower" ("-" with
fewer than 3 rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout this file is in
DEFAULT_BASE = "ccc6578"
WORKTREE = "WORKTREE"
TAG = "@@benchv "  # prefix of the result line node 0 of the kv job prints
CHECK_FAILED = 97  # exit status of a child that imported pskv from the wrong tree
ROWS, DIM, PUSH_KEYS = 200_000, 64, 1_000  # the kv table; node 1 manages rows [ROWS // 2, ROWS): 100,000 keys
WAIT = 120.0  # seconds: a request that takes longer means a lost reply; fail instead of hanging
MIN_ROUNDS = 3  # rounds from which the report gives a verdict
CHILD_TIMEOUT = 300.0  # seconds per job (a healthy one takes 3-10 s)
KGE = ["--data", "lapse-toy", "--train-file", "train.partitioned.2x2.del", "--dim", "200", "--neg", "6",
       "--lr", "0.1", "--eval-every", "0"]
MF = ["--data", "zipf:10000x5000x400000", "--rank", "16"]

# Run by the launcher and by every node before anything else: import pskv, check where it came from,
# then (launcher, app nodes) run the pskv command line as `python -m pskv` would.
_CHECK = """\
import os, sys
from pathlib import Path
import pskv
_want, _got = Path(os.environ["BENCHV_SRC"]).resolve(), Path(pskv.__file__).resolve()
if _want not in _got.parents:
    sys.stderr.write(f"bench_versions: pskv was imported from {_got}, not from the tree under test {_want}; "
                     "PYTHONPATH did not override the installed pskv\\n")
    sys.exit(%d)
""" % CHECK_FAILED
_PSKV_MAIN = _CHECK + "import runpy; sys.argv[0] = 'pskv'; runpy.run_module('pskv', run_name='__main__')\n"


class BenchError(Exception):
    """A child failed or a version could not be prepared; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Figure:
    key: str
    name: str
    unit: str
    lower_is_better: bool


FIGURES = (
    Figure("push_p50_us", "push 1k x 64, round trip p50", "µs", True),
    Figure("pull_gbs", "pull 100k x 64", "GB/s", False),
    Figure("pull_out_gbs", "pull 100k x 64, out=", "GB/s", False),
    Figure("kge_epoch_s", "KGE lapse-toy 2x1, s/epoch", "s", True),
    Figure("kge_wall_s", "KGE lapse-toy 2x1, wall per run", "s", True),
    Figure("mf_epoch_s", "MF zipf 2x1, s/epoch", "s", True),
    Figure("mf_wall_s", "MF zipf 2x1, wall per run", "s", True),
)


@dataclasses.dataclass
class Version:
    label: str  # what the user asked for: a revision or WORKTREE
    describe: str  # a commit id, or `git describe --dirty` of the working tree
    tree: Path  # holds src/pskv

    @property
    def name(self) -> str:
        return self.label if self.describe.startswith(self.label) else f"{self.label} ({self.describe})"


@dataclasses.dataclass
class Plan:
    rounds: int
    push_budget: float  # seconds of push round trips per kv run
    pull_budget: float  # seconds of pulls per kv run, for each of the two pull figures
    kge_epochs: int
    mf_epochs: int


# ---- preparing the versions ---------------------------------------------------------------------------------
def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"git {' '.join(args)}: {proc.stderr.strip() or f'exit status {proc.returncode}'}")
    return proc.stdout.strip()


def prepare(label: str, dest: Path) -> Version:
    """The source tree of `label` (a git revision, or WORKTREE) under `dest`."""
    dest.mkdir(parents=True)
    if label == WORKTREE:
        shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return Version(label, _git("describe", "--always", "--dirty"), dest)
    try:
        commit = _git("rev-parse", "--verify", "--quiet", f"{label}^{{commit}}")
    except BenchError:
        raise BenchError(f"{label!r} is not a git revision of {ROOT} (nor {WORKTREE})") from None
    proc = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"], capture_output=True)
    if proc.returncode != 0:
        raise BenchError(f"git archive {label} src: {proc.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    if not (dest / "src" / "pskv" / "__init__.py").is_file():
        raise BenchError(f"revision {label} ({commit[:10]}) has no src/pskv/__init__.py")
    return Version(label, commit[:10], dest)


def lapse_toy() -> str:
    """Lapse's toy data: $PSKV_LAPSE_TOY, else ../shared/data/lapse-toy beside this checkout. An exported tree
    lives in /tmp, where pskv's own lookup (relative to its source file) would not find it."""
    path = Path(os.environ.get("PSKV_LAPSE_TOY") or ROOT.parent / "shared" / "data" / "lapse-toy")
    if not path.is_dir():
        raise BenchError(f"Lapse's toy data is not at {path} (the KGE figure needs it); set PSKV_LAPSE_TOY")
    return str(path.resolve())


def child_env(version: Version, lapse: str) -> dict[str, str]:
    """This environment minus any PSKV_* cluster settings, with PYTHONPATH the version's src/ only."""
    keep = ("PSKV_DATA_DIR",)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_") or k in keep}
    src = str((version.tree / "src").resolve())
    env.update(PYTHONPATH=src, BENCHV_SRC=src, PSKV_LAPSE_TOY=lapse)
    return env


def pskv_command(*args: str) -> list[str]:
    """`python -m pskv ARGS` with this interpreter, after the check of where pskv came from."""
    return [sys.executable, "-c", _PSKV_MAIN, *args]


# ---- running one job ----------------------------------------------------------------------------------------
def run_child(argv: list[str], env: dict[str, str], cwd: Path, what: str,
              timeout: float = CHILD_TIMEOUT) -> tuple[str, float]:
    """Run argv; return (stdout, wall seconds). Raises BenchError with the output's tail if it fails.
    On a timeout or an interrupt: SIGTERM (the launcher then stops its nodes), SIGKILL 30 s later."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException as exc:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        raise BenchError(f"{what}: no result after {timeout:.0f} s (stopped)\n{_tail(stdout, stderr)}") from None
    wall = time.monotonic() - start
    if proc.returncode != 0:
        wrong = proc.returncode == CHECK_FAILED or "bench_versions: pskv was imported from" in stderr
        why = " (pskv came from the wrong tree)" if wrong else ""
        raise BenchError(f"{what}: exit status {proc.returncode}{why}\n{_tail(stdout, stderr)}")
    return stdout, wall


def _tail(stdout: str, stderr: str, lines: int = 15) -> str:
    return "\n".join(("  | " + x) for x in (stdout + stderr).strip().splitlines()[-lines:])


def tagged(stdout: str) -> dict:
    """The JSON of the TAG line (`pskv launch` prefixes node output with `[node i] `)."""
    for line in stdout.splitlines():
        if TAG in line:
            return json.loads(line.split(TAG, 1)[1])
    raise BenchError("the kv job printed no result line")


def job_kv(version: Version, env: dict[str, str], plan: Plan) -> dict[str, float]:
    node = [sys.executable, str(Path(__file__).resolve()), "--kv-node", f"{plan.push_budget},{plan.pull_budget}"]
    # node 1's keys travel as messages (without PSKV_SHARED_MEMORY=0, on by default, node 0
    # would write them in shared memory and the check in kv_node stops the run)
    stdout, _ = run_child(pskv_command("launch", "-n", "2", "--", *node), {**env, "PSKV_SHARED_MEMORY": "0"},
                          version.tree, f"kv job of {version.label}")
    return tagged(stdout)


def job_app(app: str, version: Version, env: dict[str, str], epochs: int) -> dict[str, float]:
    flags = {"kge": KGE, "mf": MF}[app]
    log = version.tree / f"{app}.jsonl"
    log.unlink(missing_ok=True)
    node = pskv_command("run", app, "--", *flags, "--epochs", str(epochs), "--progress", "none", "--log", str(log))
    _, wall = run_child(pskv_command("launch", "-n", "2", "--", *node), env, version.tree,
                        f"{app} job of {version.label}")
    try:
        seconds = [json.loads(line)["seconds"] for line in log.read_text().splitlines() if line.strip()]
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(f"{app} job of {version.label}: no epoch seconds in its --log {log}: {exc}") from None
    if len(seconds) != epochs:
        raise BenchError(f"{app} job of {version.label}: {len(seconds)} epochs in its log, expected {epochs}")
    return {f"{app}_epoch_s": statistics.median(seconds[1:] or seconds), f"{app}_wall_s": wall}


JOBS = ("kv", "kge", "mf")


def run_job(job: str, version: Version, env: dict[str, str], plan: Plan) -> dict[str, float]:
    if job == "kv":
        return job_kv(version, env, plan)
    return job_app(job, version, env, plan.kge_epochs if job == "kge" else plan.mf_epochs)


# ---- the kv job's node processes (the version under test imported, public API only) -------------------------
def _calls(fn, budget: float, reps_min: int, reps_max: int, warmup: int) -> list[float]:
    """Seconds of each call of fn: `warmup` calls untimed, then until `budget` s and reps_min calls, or reps_max."""
    for _ in range(warmup):
        fn()
    gc.collect()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < reps_max:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if len(times) >= reps_min and t1 - start >= budget:
            break
    return times


def kv_node(budgets: str) -> int:
    """One node of the kv job, under `pskv launch -n 2`: node 0 measures keys node 1 manages, node 1 serves."""
    exec(compile(_CHECK, "<bench_versions check>", "exec"), {})  # exits 97 if pskv is not the tree's
    import numpy as np

    import pskv

    push_budget, pull_budget = (float(x) for x in budgets.split(","))
    rng = np.random.default_rng(0)
    lo = ROWS // 2  # node 1 manages [ROWS // 2, ROWS): Placement's contiguous ranges on 2 nodes
    push_keys = lo + rng.choice(ROWS - lo, PUSH_KEYS, replace=False)  # (1000,) int64, random order
    vals = rng.standard_normal((PUSH_KEYS, DIM), dtype=np.float32) * np.float32(1e-3)  # (1000, 64) float32
    pull_keys = lo + rng.permutation(ROWS - lo)  # (100000,) int64: every row of node 1, random order
    out = np.empty((len(pull_keys), DIM), np.float32)
    out.fill(0.0)  # pages really mapped, as a reused buffer's are
    result: dict[str, float] = {}
    with pskv.init() as node:
        node.table("benchv", rows=ROWS, dim=DIM)

        def body(w) -> None:
            if node.rank == 0:
                t = w.table("benchv")
                t.push(push_keys, vals).wait(WAIT)
                stats = node.stats().get("tables", {}).get("benchv", {})
                if stats.get("local_keys", 0):
                    raise SystemExit(f"bench_versions: node 0's push of node 1's keys counted {stats['local_keys']}"
                                     " local keys; the table is not partitioned in contiguous halves any more")
                push = _calls(lambda: t.push(push_keys, vals).wait(WAIT), push_budget, 100, 5000, 20)
                pull = _calls(lambda: t.pull_async(pull_keys).wait(WAIT), pull_budget, 5, 500, 2)
                pull_out = _calls(lambda: t.pull_async(pull_keys, out=out).wait(WAIT), pull_budget, 5, 500, 2)
                nbytes = len(pull_keys) * DIM * 4
                result.update(push_p50_us=float(np.median(push)) * 1e6, pull_gbs=nbytes / float(np.median(pull)) / 1e9,
                              pull_out_gbs=nbytes / float(np.median(pull_out)) / 1e9,
                              push_reps=len(push), pull_reps=len(pull), pull_out_reps=len(pull_out))
            w.barrier()  # node 1 serves until node 0 is done

        node.run(body, threads=1)
    if result:
        print(TAG + json.dumps(result), flush=True)
    return 0


# ---- the report ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Summary:
    figure: Figure
    base: list[float]
    head: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.head) / statistics.median(self.base)

    @property
    def verdict(self) -> str:
        """'~' when the min-max ranges overlap; else whether head is faster or slower than base ('-' with
        fewer than MIN_ROUNDS rounds: a range of one or two values says nothing about the noise)."""
        if min(len(self.base), len(self.head)) < MIN_ROUNDS:
            return "-"
        if max(self.base) >= min(self.head) and max(self.head) >= min(self.base):
            return "~"
        head_higher = min(self.head) > max(self.base)
        return "slower" if head_higher == self.figure.lower_is_better else "faster"


def summarize(values: dict[str, dict[str, list[float]]]) -> list[Summary]:
    """values[side][figure key] -> per-round values, side in ('base', 'head'); figures measured on both sides."""
    return [Summary(f, values["base"][f.key], values["head"][f.key]) for f in FIGURES
            if values["base"].get(f.key) and values["head"].get(f.key)]


def conclusion(rows: list[Summary]) -> str:
    if any(r.verdict == "-" for r in rows):
        return f"no verdict: fewer than {MIN_ROUNDS} rounds"
    slower = [r.figure.name for r in rows if r.verdict == "slower"]
    return "slower beyond this run's noise: " + (", ".join(slower) if slower else "none")


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}" if x < 1 else f"{x:.2f}"


def _cell(xs: list[float]) -> str:
    return f"{_num(statistics.median(xs))} ({_num(min(xs))}-{_num(max(xs))})"


def markdown(rows: list[Summary], base: str, head: str) -> str:
    """The comparison as a markdown table: per figure median (min-max) of each side, head/base, verdict."""
    lines = [f"| figure | unit | base {base}: median (min-max) | head {head}: median (min-max) | head/base | verdict |",
             "| --- | --- | --: | --: | --: | --- |"]
    for r in rows:
        better = "lower is better" if r.figure.lower_is_better else "higher is better"
        lines.append(f"| {r.figure.name} | {r.figure.unit}, {better} | {_cell(r.base)} | {_cell(r.head)} | "
                     f"{r.ratio:.3f} | {r.verdict} |")
    return "\n".join(lines)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_versions.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default=DEFAULT_BASE, help=f"git revision, or {WORKTREE} (default {DEFAULT_BASE})")
    p.add_argument("--head", default=WORKTREE, help=f"git revision, or {WORKTREE}: this checkout's src/ as it is "
                                                    "now (the default)")
    p.add_argument("--rounds", type=_positive, help="measured rounds per version (default 5, quick 2)")
    p.add_argument("--quick", action="store_true", help="2 rounds, shorter kv measurements and app runs")
    p.add_argument("--jobs", type=_jobs, default=list(JOBS), help="comma-separated, of kv,kge,mf (default all)")
    p.add_argument("--kv-node", metavar="PUSH_S,PULL_S", help=argparse.SUPPRESS)  # a node of the kv job
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _jobs(text: str) -> list[str]:
    jobs = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown or not jobs:
        raise argparse.ArgumentTypeError(f"{text!r}: expected some of {','.join(JOBS)}")
    return jobs


def plan_for(args: argparse.Namespace) -> Plan:
    if args.quick:
        return Plan(rounds=args.rounds or 2, push_budget=0.5, pull_budget=0.5, kge_epochs=3, mf_epochs=3)
    return Plan(rounds=args.rounds or 5, push_budget=1.0, pull_budget=1.0, kge_epochs=5, mf_epochs=4)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.kv_node:
        return kv_node(args.kv_node)
    plan = plan_for(args)
    args.command = " ".join(["bench_versions.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        return compare(args, plan)
    except BenchError as exc:
        print(f"bench_versions: FAILED: {exc}", file=sys.stderr, flush=True)
        return 1


def compare(args: argparse.Namespace, plan: Plan) -> int:
    from pskv.bench import _load, machine  # the installed pskv: only to describe the machine

    lapse = lapse_toy()
    tmp = Path(tempfile.mkdtemp(prefix="benchv-", dir="/tmp"))
    t0 = time.monotonic()
    try:
        versions = {"base": prepare(args.base, tmp / "base"), "head": prepare(args.head, tmp / "head")}
        envs = {side: child_env(v, lapse) for side, v in versions.items()}
        print(f"# bench_versions  {time.strftime('%Y-%m-%d %H:%M')}\n\nmachine: {machine()}\n"
              f"base: {versions['base'].label} ({versions['base'].describe}), head: {versions['head'].label} "
              f"({versions['head'].describe}); trees under {tmp}\n{plan.rounds} rounds + 1 warm-up, jobs "
              f"{','.join(args.jobs)}, {sys.executable}\ncommand: {args.command}\n", flush=True)
        values: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
        for rnd in range(plan.rounds + 1):
            name = "warm-up" if rnd == 0 else f"round {rnd}/{plan.rounds}"
            for job in args.jobs:
                for side in ("base", "head"):
                    start = time.monotonic()
                    got = run_job(job, versions[side], envs[side], plan)
                    shown = ", ".join(f"{k} {v if isinstance(v, int) else _num(v)}" for k, v in got.items())
                    _say(f"{name:>11} {job:>3} {side}: {shown}  ({time.monotonic() - start:.1f} s, load {_load()})")
                    if rnd:
                        for f in FIGURES:
                            if f.key in got:
                                values[side].setdefault(f.key, []).append(got[f.key])
        rows = summarize(values)
        print(markdown(rows, versions["base"].name, versions["head"].name))
        print("\nper round (base | head):")
        for r in rows:
            print(f"- {r.figure.name}: {' '.join(map(_num, r.base))} | {' '.join(map(_num, r.head))}")
        print("\n" + conclusion(rows))
        print(f"\ntotal time {time.monotonic() - t0:.0f} s; load average at the end {_load()}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
