"""`pskv bench`: pull/push speed of pskv next to plain numpy, in one process and across two nodes.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_kv.py           # full run, 1-2 min on 2 idle cores
    PYTHONPATH=src .venv/bin/python -m pskv bench --quick            # fewer sizes/repeats, < 40 s
    pskv bench --sizes 1000,100000 --dims 64 --window 8 --no-copy

For every n_keys in --sizes and dim in --dims, on float32 tables, with unique random keys:

  numpy   np.take(data, keys, axis=0, out=buf)  and  data[keys] += vals  on a (rows, dim) array
  local   a 1-node cluster: t.pull_async(keys, out=buf).wait()  and  t.push(keys, vals).wait()
  remote  2 node processes (this process is node 0, a child process node 1); node 0 pulls and
          pushes keys that node 1 owns. mode `rtt`: one request at a time, .wait() each (p50/p99
          latency); mode `window`: W requests outstanding (throughput).

keys/s and GB/s (of values: n_keys * dim * 4 bytes) come from the median call (numpy, local,
rtt) or from the total time of the windowed run; `x numpy` is the speed relative to the numpy
op of the same size (same op: pull vs np.take, push vs fancy +=). A summary checks the targets
of DESIGN.md "Performance model". Nodes are started here with subprocess, not by `pskv launch`.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

_FULL_SIZES = (1, 1_000, 100_000, 1_000_000)
_QUICK_SIZES = (1, 1_000, 100_000)
_BIG = 64 << 20  # bytes of values from which a request counts as large: fewer repeats
_WINDOW_BYTES = 512 << 20  # cap on the pull buffers of one windowed run (W * n * dim * 4)
_WAIT = 120.0  # seconds: a request that takes longer means a lost reply; fail instead of hanging
_CHILD = "import sys, pskv.bench as b; sys.exit(b._serve_node(int(sys.argv[1]), sys.argv[2]))"


@dataclasses.dataclass
class Plan:
    """How long to measure: a cell runs until `budget` seconds and `reps_min` calls, or `reps_max`."""

    budget: float
    reps_min: int
    reps_max: int
    window: int
    copy: bool


@dataclasses.dataclass
class Result:
    op: str  # pull | push
    where: str  # numpy | local | remote
    mode: str  # call | rtt | window
    n: int
    dim: int
    seconds: float  # per request: the median call, or total / requests for a window
    p50: float | None = None
    p99: float | None = None
    reps: int = 0
    ratio: float | None = None  # speed / speed of the same numpy op

    @property
    def keys_per_s(self) -> float:
        return self.n / self.seconds

    @property
    def gb_per_s(self) -> float:
        return self.n * self.dim * 4 / self.seconds / 1e9


# ---- measuring ----------------------------------------------------------------------------------
def _timed(fn: Callable[[], object], plan: Plan, n: int, dim: int, reps_min: int | None = None) -> np.ndarray:
    """Seconds of each call of fn (after one warm-up call)."""
    big = n * dim * 4 >= _BIG
    reps_min = min(reps_min or plan.reps_min, 5 if big else 10_000)
    reps_max = max(reps_min, 20 if big else plan.reps_max)
    fn()  # warm-up: numba compiles/loads on first call, zmq connects on first send
    gc.collect()
    times = []
    start = time.perf_counter()
    while len(times) < reps_max:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if len(times) >= reps_min and t1 - start >= plan.budget:
            break
    return np.array(times)


def _result(op, where, mode, n, dim, times: np.ndarray) -> Result:
    p50, p99 = np.percentile(times, [50, 99])
    return Result(op, where, mode, n, dim, float(p50), float(p50), float(p99), len(times))


def _windowed(issue: Callable[[int], object], plan: Plan, window: int, requests: int) -> float:
    """Seconds per request with `window` requests outstanding; issue(i) returns a Future."""
    for f in [issue(i) for i in range(window)]:
        f.wait(_WAIT)  # warm-up
    gc.collect()
    pending: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for i in range(requests):
        if len(pending) == window:
            pending.popleft().wait(_WAIT)
        pending.append(issue(i))
    while pending:
        pending.popleft().wait(_WAIT)
    return (time.perf_counter() - t0) / requests


def _touched(shape) -> np.ndarray:
    """A float32 array of zeros whose pages are really mapped. np.zeros is not enough: its untouched
    pages all alias the kernel's one zero page, so a gather from it reads one cached 4 KiB page and
    looks several times faster than a gather from real rows (a pskv shard is written at init)."""
    a = np.empty(shape, np.float32)
    a.fill(0.0)
    return a


class _Data:
    """Keys, values and output buffers for one (n_keys, dim), reused by every measurement."""

    def __init__(self, rng: np.random.Generator, rows: int, n: int, dim: int) -> None:
        self.n, self.dim = n, dim
        self.keys = np.ascontiguousarray(rng.permutation(rows)[:n])  # (n,) int64, unique, random order
        self.vals = (rng.standard_normal((n, dim), dtype=np.float32) * 1e-3)  # (n, dim) float32 updates
        self.out = _touched((n, dim))  # (n, dim) pull target


def _numpy_cells(data: np.ndarray, d: _Data, plan: Plan) -> list[Result]:
    def pull():
        np.take(data, d.keys, axis=0, out=d.out)

    def push():
        data[d.keys] += d.vals

    return [_result("pull", "numpy", "call", d.n, d.dim, _timed(pull, plan, d.n, d.dim)),
            _result("push", "numpy", "call", d.n, d.dim, _timed(push, plan, d.n, d.dim))]


def _local_cells(table, d: _Data, plan: Plan) -> list[Result]:
    def pull():
        table.pull_async(d.keys, out=d.out).wait(_WAIT)

    def push():
        table.push(d.keys, d.vals).wait(_WAIT)

    return [_result("pull", "local", "call", d.n, d.dim, _timed(pull, plan, d.n, d.dim)),
            _result("push", "local", "call", d.n, d.dim, _timed(push, plan, d.n, d.dim))]


def _remote_cells(table, d: _Data, offset: int, plan: Plan) -> list[Result]:
    keys = d.keys + offset  # (n,) int64, all owned by node 1
    window = max(1, min(plan.window, _WINDOW_BYTES // max(1, d.n * d.dim * 4)))
    bufs = [d.out] + [_touched(d.out.shape) for _ in range(window - 1)]  # one pull target per outstanding request
    ops = {"pull": lambda i: table.pull_async(keys, out=bufs[i % window]),
           "push": lambda i: table.push(keys, d.vals, copy=plan.copy)}
    results = []
    for op, issue in ops.items():
        rtt = _result(op, "remote", "rtt", d.n, d.dim,
                      _timed(lambda: issue(0).wait(_WAIT), plan, d.n, d.dim, reps_min=max(plan.reps_min, 20)))
        est = max(rtt.seconds / 2, 1e-6)  # pipelining hides at most about half of a round trip
        requests = int(min(2000, max(4 * window, plan.budget / est)))
        if d.n * d.dim * 4 >= _BIG:
            requests = min(requests, 4 * window)
        per = _windowed(issue, plan, window, requests)
        results += [rtt, Result(op, "remote", f"window {window}", d.n, d.dim, per, reps=requests)]
    return results


# ---- the two clusters ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_node(rows: int, dims: str) -> int:
    """Node 1 of the remote benchmark (runs in the child process): declare the tables, then serve
    until node 0 shuts down."""
    from .config import NodeConfig
    from .node import Node

    node = Node(NodeConfig.from_env())
    try:
        for dim in (int(x) for x in dims.split(",")):
            node.table(f"d{dim}", rows=rows, dim=dim)
        worker = node.worker()
        worker.barrier()  # until node 0 is done: a node that said BYE stops hearing the coordinator's
        worker.close()    # TICKs and gives up after failure_timeout (see benchmarks/RESULTS.md)
    finally:
        node.shutdown()
    return 0


def _start_child(rows: int, dims: list[int], address: str) -> subprocess.Popen:
    import pskv

    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    src = str(Path(pskv.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(PSKV_COORDINATOR=address, PSKV_NUM_NODES="2", PSKV_RANK="1")
    argv = [sys.executable, "-c", _CHILD, str(rows), ",".join(map(str, dims))]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def run(sizes: list[int], dims: list[int], plan: Plan, remote: bool = True,
        say: Callable[[str], None] = print) -> list[Result]:
    """Measure every cell; return the results (ratios filled in)."""
    from .config import NodeConfig
    from .node import Node

    rows = max(sizes)
    rng = np.random.default_rng(0)
    shapes = [(n, dim) for dim in dims for n in sizes]
    results: list[Result] = []
    node = Node(NodeConfig())  # a private 1-node cluster, whatever PSKV_* says
    try:
        tables = {dim: node.table(f"d{dim}", rows=rows, dim=dim) for dim in dims}
        for dim in dims:
            data = _touched((rows, dim))  # the numpy baseline's array, same shape as the shard
            for n in sizes:
                d = _Data(rng, rows, n, dim)
                say(f"  numpy + local  n_keys={n:>9,} dim={dim}")
                results += _numpy_cells(data, d, plan) + _local_cells(tables[dim], d, plan)
            del data
    finally:
        node.shutdown()
    del node, tables
    gc.collect()
    if remote:
        address = f"127.0.0.1:{_free_port()}"
        child = _start_child(2 * rows, dims, address)
        node = None
        try:
            node = Node(NodeConfig(coordinator=address, num_nodes=2, rank=0))
            for dim in dims:
                node.table(f"d{dim}", rows=2 * rows, dim=dim)  # collective: node 1 declares them too
            worker = node.worker()
            handles = {dim: worker.table(f"d{dim}") for dim in dims}
            for n, dim in shapes:
                say(f"  remote         n_keys={n:>9,} dim={dim}")
                results += _remote_cells(handles[dim], _Data(rng, rows, n, dim), rows, plan)
            worker.barrier()  # releases node 1, which then shuts down with us
            worker.close()
        finally:
            if node is not None:
                node.shutdown(timeout=10)
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()  # our own child, by its Popen handle
                child.wait()
    base = {(r.op, r.n, r.dim): r.seconds for r in results if r.where == "numpy"}
    for r in results:
        if (r.op, r.n, r.dim) in base:
            r.ratio = base[(r.op, r.n, r.dim)] / r.seconds
    return results


# ---- reporting ----------------------------------------------------------------------------------
def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f}"


def table(results: list[Result]) -> str:
    """The results as a markdown table."""
    us = lambda s: "" if s is None else f"{s * 1e6:,.0f}"  # noqa: E731
    head = ("op", "where", "mode", "n_keys", "dim", "keys/s", "GB/s", "p50 µs", "p99 µs", "x numpy", "reps")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "--:" for i in range(len(head))) + "|"]
    order = {"numpy": 0, "local": 1, "remote": 2}
    for r in sorted(results, key=lambda r: (r.dim, r.n, r.op, order[r.where])):
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.op} | {r.where} | {r.mode} | {r.n:,} | {r.dim} | {_si(r.keys_per_s)} | "
                     f"{r.gb_per_s:.3f} | {us(r.p50)} | {us(r.p99)} | {ratio} | {r.reps} |")
    return "\n".join(lines)


def targets(results: list[Result]) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met?) for each target of the performance model; None: not measured."""
    out = []

    def find(op, where, mode, n, dim):
        return [r for r in results if (r.op, r.where, r.n, r.dim) == (op, where, n, dim) and r.mode.startswith(mode)]

    local = [r for r in results if r.where == "local" and r.n >= 10_000]
    for op in ("pull", "push"):
        rs = [r for r in local if r.op == op]
        got = ", ".join(f"{r.n:,}x{r.dim}: {r.ratio:.2f}" for r in rs)
        out.append((f"local {op} of >= 10,000 keys >= 0.5x numpy", got or "not measured",
                    all(r.ratio >= 0.5 for r in rs) if rs else None))
    rs = [r for r in results if (r.op, r.where, r.mode, r.n) == ("pull", "remote", "rtt", 1_000)]
    out.append(("remote 1,000-key pull round trip p50 <= 300 µs",
                ", ".join(f"dim {r.dim}: {r.p50 * 1e6:.0f} µs" for r in rs) or "not measured",
                all(r.p50 <= 300e-6 for r in rs) if rs else None))
    for op in ("pull", "push"):
        for dim, goal in ((64, "values >= 1 GB/s"), (1, ">= 60 M keys/s")):
            rs = find(op, "remote", "window", 100_000, dim)
            rtt = find(op, "remote", "rtt", 100_000, dim)
            if not rs:
                out.append((f"remote 100,000-key {op}, dim {dim}: {goal}", "not measured", None))
                continue
            r = rs[0]
            ok = r.gb_per_s >= 1.0 if dim == 64 else r.keys_per_s >= 60e6
            got = f"window: {r.gb_per_s:.2f} GB/s, {_si(r.keys_per_s)} keys/s"
            if rtt:
                got += f"; one at a time: {rtt[0].gb_per_s:.2f} GB/s, {_si(rtt[0].keys_per_s)} keys/s"
            out.append((f"remote 100,000-key {op}, dim {dim}: {goal}", got, ok))
    return out


def machine() -> str:
    import numba
    import zmq

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}; load {_load()}; python "
            f"{platform.python_version()}, numpy {np.__version__}, pyzmq {zmq.__version__} (libzmq "
            f"{zmq.zmq_version()}), numba {numba.__version__}")


def _load() -> str:
    """The 1-minute load average: other busy processes make every figure here slower and noisier."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _revision() -> str:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _ints(text: str) -> list[int]:
    try:
        values = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 1000,100000") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return values


def main(argv: list[str] | None = None) -> int:
    """`pskv bench [--quick] [--sizes ...] [--dims ...] [--window W] [--no-copy] [--no-remote]`."""
    p = argparse.ArgumentParser(prog="pskv bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="sizes 1,1000,100000 and short runs (< 40 s)")
    p.add_argument("--sizes", type=_ints, help="n_keys per request, comma-separated (default 1,1000,100000,1000000)")
    p.add_argument("--dims", type=_ints, default=[1, 64], help="row widths, comma-separated (default 1,64)")
    p.add_argument("--window", type=int, default=8, help="outstanding requests in the throughput runs (default 8)")
    p.add_argument("--budget", type=float, help="seconds per measurement (default 1.0, quick 0.1)")
    p.add_argument("--no-copy", action="store_true", help="remote push with copy=False (no copy of the values)")
    p.add_argument("--no-remote", action="store_true", help="skip the 2-node measurements")
    args = p.parse_args(argv)
    quick = args.quick
    sizes = args.sizes or list(_QUICK_SIZES if quick else _FULL_SIZES)
    plan = Plan(budget=args.budget or (0.1 if quick else 1.0), reps_min=3 if quick else 5,
                reps_max=60 if quick else 200, window=max(1, args.window), copy=not args.no_copy)
    print(f"# pskv bench  {time.strftime('%Y-%m-%d %H:%M')}  (pskv {_revision()})\n\nmachine: {machine()}\n"
          f"sizes {sizes}, dims {args.dims}, window {plan.window}, budget {plan.budget} s, "
          f"remote push copy={plan.copy}\n", flush=True)
    t0 = time.perf_counter()
    results = run(sizes, args.dims, plan, remote=not args.no_remote,
                  say=lambda s: print(s, file=sys.stderr, flush=True))
    print(table(results))
    print("\n## targets\n")
    for name, got, ok in targets(results):
        mark = "n/a " if ok is None else ("MET " if ok else "MISS")
        print(f"- [{mark}] {name}: {got}")
    print(f"\ntotal time {time.perf_counter() - t0:.0f} s; load average at the end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
