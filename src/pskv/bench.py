"""`pskv bench`: pull/push speed of pskv next to plain numpy and raw pyzmq, in one process and across two nodes.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_kv.py           # full run, 1-2 min on 2 idle cores
    PYTHONPATH=src .venv/bin/python -m pskv bench --quick            # fewer sizes/repeats, < 40 s
    pskv bench --sizes 1000,100000 --dims 64 --window 8 --no-copy
    pskv bench --floor-only --rounds 7 --budget 1                    # only the raw-pyzmq floor table
    pskv bench --auth --no-copy --sizes 1,1000,100000 --dims 64 --rounds 0   # what authentication costs

For every n_keys in --sizes and dim in --dims, on float32 tables, with unique random keys:

  numpy   np.take(data, keys, axis=0, out=buf)  and  data[keys] += vals  on a (rows, dim) array
  local   a 1-node cluster: t.pull_async(keys, out=buf).wait()  and  t.push(keys, vals).wait()
  remote  2 node processes (this process is node 0, a child process node 1); node 0 pulls and
          pushes keys that node 1 owns. mode `rtt`: one request at a time, .wait() each (p50/p99
          latency); mode `window`: W requests outstanding (throughput).

  auth    with --auth, the remote cells again on a second 2-node cluster that shares a secret
          (net.auth: CURVE, so every message is encrypted), as where `remote+auth`; a last table
          puts each next to its unauthenticated twin.

  floor   node 1 also serves a raw pyzmq ROUTER (np.take for a pull, data[keys] += vals for a
          push, zero-copy frames, one message per op) and node 0 is the client of both, on a
          (200,000, 64) float32 table "floor" (keys owned by node 1): 1-key and 1,000-key round
          trips, 100,000-key pulls with and without out=, pushes, 8 outstanding 1-key pulls.
          --rounds paired rounds; in each, raw and pskv calls alternate call by call (windowed
          runs block by block). The table gives the medians and pskv speed / raw speed.

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
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .net.auth import new_secret

_FULL_SIZES = (1, 1_000, 100_000, 1_000_000)
_QUICK_SIZES = (1, 1_000, 100_000)
_BIG = 64 << 20  # bytes of values from which a request counts as large: fewer repeats
_WINDOW_BYTES = 512 << 20  # cap on the pull buffers of one windowed run (W * n * dim * 4)
_WAIT = 120.0  # seconds: a request that takes longer means a lost reply; fail instead of hanging
_CHILD = "import sys, pskv.bench as b; sys.exit(b._serve_node(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))"
_FLOOR_ROWS = 100_000  # rows per node of the floor's table ("floor", dim 64); its 100,000-key pulls take them all
_FLOOR_DIM = 64


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


def _remote_cells(table, d: _Data, offset: int, plan: Plan, where: str = "remote") -> list[Result]:
    keys = d.keys + offset  # (n,) int64, all owned by node 1
    window = max(1, min(plan.window, _WINDOW_BYTES // max(1, d.n * d.dim * 4)))
    bufs = [d.out] + [_touched(d.out.shape) for _ in range(window - 1)]  # one pull target per outstanding request
    ops = {"pull": lambda i: table.pull_async(keys, out=bufs[i % window]),
           "push": lambda i: table.push(keys, d.vals, copy=plan.copy)}
    results = []
    for op, issue in ops.items():
        rtt = _result(op, where, "rtt", d.n, d.dim,
                      _timed(lambda: issue(0).wait(_WAIT), plan, d.n, d.dim, reps_min=max(plan.reps_min, 20)))
        est = max(rtt.seconds / 2, 1e-6)  # pipelining hides at most about half of a round trip
        requests = int(min(2000, max(4 * window, plan.budget / est)))
        if d.n * d.dim * 4 >= _BIG:
            requests = min(requests, 4 * window)
        per = _windowed(issue, plan, window, requests)
        results += [rtt, Result(op, where, f"window {window}", d.n, d.dim, per, reps=requests)]
    return results


# ---- the floor: raw pyzmq next to pskv, same run, paired rounds ------------------------------------
# Node 1 also serves a raw pyzmq ROUTER on the same arrays' shapes and dtypes; node 0 is the client
# of both. Raw messages: [op (1 byte), keys (int64, zero-copy), (values)] -> [rows] or [b""]. A
# raw pull gathers with np.take and sends the rows zero-copy; a raw push does data[keys] += vals.
_RAW_PULL, _RAW_PUSH = b"p", b"u"


def _raw_server(port: int, rows: int, dim: int, stop) -> None:
    """The raw pyzmq server thread of node 1: answers until `stop` is set."""
    import zmq

    data = _touched((rows, dim))  # (rows, dim) float32, like node 1's shard
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    try:
        while not stop.is_set():
            if not poller.poll(50):
                continue
            frames = sock.recv_multipart(copy=False)
            ident, op, keys = frames[0], frames[1].bytes, np.frombuffer(frames[2].buffer, np.int64)
            if op == _RAW_PULL:
                sock.send_multipart([ident, np.take(data, keys, axis=0)], copy=False)
            else:
                data[keys] += np.frombuffer(frames[3].buffer, np.float32).reshape(len(keys), dim)
                sock.send_multipart([ident, b""], copy=False)
    finally:
        sock.close(linger=0)


class _RawClient:
    """Node 0's side of the raw floor: one DEALER socket, one message per op."""

    def __init__(self, port: int, dim: int) -> None:
        import zmq

        self.dim = dim
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://127.0.0.1:{port}")

    def send_pull(self, keys: np.ndarray) -> None:
        self.sock.send_multipart([_RAW_PULL, keys], copy=False)

    def recv_rows(self, n: int, out: np.ndarray | None = None) -> np.ndarray:
        rows = np.frombuffer(self.sock.recv(copy=False).buffer, np.float32).reshape(n, self.dim)
        if out is None:
            return rows  # a view of the received frame, as a raw pyzmq user would keep it
        np.copyto(out, rows)
        return out

    def pull(self, keys: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        self.send_pull(keys)
        return self.recv_rows(len(keys), out)

    def push(self, keys: np.ndarray, vals: np.ndarray) -> None:
        self.sock.send_multipart([_RAW_PUSH, keys, vals], copy=False)
        self.sock.recv(copy=False)

    def close(self) -> None:
        self.sock.close(linger=0)


@dataclasses.dataclass
class Floor:
    """One figure of the floor table: raw pyzmq and pskv, the medians of paired rounds."""

    figure: str
    unit: str  # "µs" (lower is better), "GB/s" or "ops/s" (higher is better)
    raw: list[float]
    pskv: list[float]

    @property
    def ratios(self) -> list[float]:
        """pskv speed / raw speed per round (>= 1: pskv at or past the floor)."""
        if self.unit == "µs":
            return [r / p for r, p in zip(self.raw, self.pskv)]
        return [p / r for r, p in zip(self.raw, self.pskv)]


def _raw_windowed(raw: _RawClient, keys: np.ndarray, window: int, requests: int) -> float:
    """Ops/s of raw 1-message-per-op pulls with `window` outstanding."""
    for _ in range(window):
        raw.send_pull(keys)
    for _ in range(window):
        raw.recv_rows(len(keys))
    t0 = time.perf_counter()
    for _ in range(window):
        raw.send_pull(keys)
    for _ in range(requests - window):
        raw.recv_rows(len(keys))
        raw.send_pull(keys)
    for _ in range(window):
        raw.recv_rows(len(keys))
    return requests / (time.perf_counter() - t0)


def _pskv_windowed(table, keys: np.ndarray, window: int, requests: int) -> float:
    for f in [table.pull_async(keys) for _ in range(window)]:
        f.wait(_WAIT)
    pending: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for _ in range(requests):
        if len(pending) == window:
            pending.popleft().wait(_WAIT)
        pending.append(table.pull_async(keys))
    while pending:
        pending.popleft().wait(_WAIT)
    return requests / (time.perf_counter() - t0)


def _interleaved(fns: list[Callable[[], object]], budget: float, reps_min: int = 20) -> list[float]:
    """Median seconds of each fn, called in turn (order rotating each turn) for at least reps_min
    turns and `budget` seconds, after 3 warm-up turns: on a shared machine, calls next to each
    other see the same load, where blocks measured one after the other may not."""
    for _ in range(3):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    turn = 0
    while turn < reps_min or time.perf_counter() - start < budget:
        for j in range(len(fns)):
            i = (turn + j) % len(fns)
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
        turn += 1
        if turn >= 50_000:
            break
    return [float(np.median(t)) for t in times]


def floor(table, raw: _RawClient, offset: int, rows: int, rounds: int, budget: float, window: int,
          big: int = 100_000, say: Callable[[str], None] = print) -> list[Floor]:
    """Paired rounds of raw pyzmq and pskv on the same keys (all owned by node 1). Within a round,
    the raw and pskv calls of a figure alternate call by call (windowed runs: block by block, the
    first alternating from round to round). Returns one Floor per figure; the last compares pskv
    with itself: a default pull (no out=) against one with out=."""
    rng = np.random.default_rng(1)
    dim = raw.dim
    keys = {n: np.ascontiguousarray(rng.permutation(rows)[:n] + offset) for n in (1, 1_000, big)}
    vals = {n: rng.standard_normal((n, dim), dtype=np.float32) * 1e-3 for n in (1_000, big)}
    out = {n: _touched((n, dim)) for n in (1, 1_000, big)}
    gb = big * dim * 4 / 1e9
    requests = max(200, int(budget * 4000))
    us = 1e6
    k1, k3, kb = keys[1], keys[1_000], keys[big]
    names = [(f"pull 1 key x {dim}, round trip p50", "µs"),
             (f"pull 1,000 keys x {dim}, round trip p50", "µs"),
             (f"push 1,000 keys x {dim}, round trip p50", "µs"),
             (f"pull {big:,} x {dim} with out=, GB/s", "GB/s"),
             (f"pull {big:,} x {dim} without out=, GB/s", "GB/s"),
             (f"push {big:,} x {dim}, GB/s", "GB/s"),
             (f"{window} outstanding 1-key pulls, ops/s", "ops/s"),
             (f"pskv pull {big:,} x {dim}: without out= (pskv) vs with out= (raw column), GB/s", "GB/s")]
    results = [Floor(name, unit, [], []) for name, unit in names]

    def add(i: int, r: float, p: float) -> None:
        results[i].raw.append(r)
        results[i].pskv.append(p)

    for rnd in range(rounds):
        say(f"  floor round {rnd + 1}/{rounds}")
        gc.collect()
        r, p = _interleaved([lambda: raw.pull(k1, out[1]),
                             lambda: table.pull(k1, out=out[1], timeout=_WAIT)], budget)
        add(0, us * r, us * p)
        r, p = _interleaved([lambda: raw.pull(k3, out[1_000]),
                             lambda: table.pull(k3, out=out[1_000], timeout=_WAIT)], budget)
        add(1, us * r, us * p)
        r, p = _interleaved([lambda: raw.push(k3, vals[1_000]),
                             lambda: table.push(k3, vals[1_000]).wait(_WAIT)], budget)
        add(2, us * r, us * p)
        r_out, p_out, r_new, p_new = _interleaved([lambda: raw.pull(kb, out[big]),
                                                   lambda: table.pull(kb, out=out[big], timeout=_WAIT),
                                                   lambda: raw.pull(kb),
                                                   lambda: table.pull(kb, timeout=_WAIT)], budget, 5)
        add(3, gb / r_out, gb / p_out)
        add(4, gb / r_new, gb / p_new)
        add(7, gb / p_out, gb / p_new)
        r, p = _interleaved([lambda: raw.push(kb, vals[big]),
                             lambda: table.push(kb, vals[big]).wait(_WAIT)], budget, 5)
        add(5, gb / r, gb / p)
        blocks = []
        for b in range(4):  # small blocks, alternating
            first_raw = (rnd + b) % 2 == 0
            pair = [lambda: _raw_windowed(raw, k1, window, requests // 4),
                    lambda: _pskv_windowed(table, k1, window, requests // 4)]
            got = [f() for f in (pair if first_raw else pair[::-1])]
            blocks.append(got if first_raw else got[::-1])
        add(6, float(np.median([x[0] for x in blocks])), float(np.median([x[1] for x in blocks])))
    return results


def floor_table(results: list[Floor]) -> str:
    """The floor as markdown: medians over rounds; ratio = pskv speed / raw speed (median of the
    per-round ratios, with their range): >= 1.0 means pskv is at or past raw pyzmq."""
    fmt = lambda unit, x: f"{x:,.0f}" if unit != "GB/s" else f"{x:.2f}"  # noqa: E731
    lines = ["| figure | raw pyzmq | pskv | pskv speed / raw (median, range) |", "|---|--:|--:|--:|"]
    for r in results:
        rt = r.ratios
        lines.append(f"| {r.figure} | {fmt(r.unit, float(np.median(r.raw)))} {r.unit} | "
                     f"{fmt(r.unit, float(np.median(r.pskv)))} {r.unit} | "
                     f"{np.median(rt):.2f} ({min(rt):.2f}-{max(rt):.2f}) |")
    return "\n".join(lines)


class _Skip(Exception):
    """No local cells: straight to the 2-node part."""


# ---- the two clusters ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_node(rows: int, dims: str, raw_port: int = 0) -> int:
    """Node 1 of the remote benchmark (runs in the child process): declare the tables, serve raw
    pyzmq on `raw_port` (0: not), then serve until node 0 shuts down."""
    import threading

    from .config import NodeConfig
    from .node import Node

    node = Node(NodeConfig.from_env())
    stop = threading.Event()
    raw = None
    try:
        for dim in (int(x) for x in dims.split(",") if x):
            node.table(f"d{dim}", rows=rows, dim=dim)
        node.table("floor", rows=2 * _FLOOR_ROWS, dim=_FLOOR_DIM)
        if raw_port:
            raw = threading.Thread(target=_raw_server, args=(raw_port, 2 * _FLOOR_ROWS, _FLOOR_DIM, stop),
                                   name="raw-pyzmq", daemon=True)
            raw.start()
        worker = node.worker()
        worker.barrier()  # until node 0 is done: a node that said BYE stops hearing the coordinator's
        worker.close()    # TICKs and gives up after failure_timeout (see benchmarks/RESULTS.md)
    finally:
        stop.set()
        if raw is not None:
            raw.join(5)
        node.shutdown()
    return 0


def _start_child(rows: int, dims: list[int], address: str, raw_port: int = 0,
                 secret: str | None = None) -> subprocess.Popen:
    import pskv

    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    src = str(Path(pskv.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(PSKV_COORDINATOR=address, PSKV_NUM_NODES="2", PSKV_RANK="1")
    if secret:
        env["PSKV_SECRET_FILE"] = secret
    argv = [sys.executable, "-c", _CHILD, str(rows), ",".join(map(str, dims)), str(raw_port)]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def run(sizes: list[int], dims: list[int], plan: Plan, remote: bool = True,
        say: Callable[[str], None] = print, floor_rounds: int = 0, cells: bool = True,
        floors: list | None = None, auth: bool = False) -> list[Result]:
    """Measure every cell (unless not `cells`); return the results (ratios filled in). With
    `floor_rounds`, also measure the raw-pyzmq floor (`floor`) in as many paired rounds and
    append its figures to `floors`. With `auth`, the remote cells again on an authenticated cluster."""
    from .config import NodeConfig
    from .node import Node

    rows = max(sizes)
    rng = np.random.default_rng(0)
    shapes = [(n, dim) for dim in dims for n in sizes]
    results: list[Result] = []
    node = Node(NodeConfig()) if cells else None  # a private 1-node cluster, whatever PSKV_* says
    try:
        if node is None:
            dims, shapes = [], []
            raise _Skip
        tables = {dim: node.table(f"d{dim}", rows=rows, dim=dim) for dim in dims}
        for dim in dims:
            data = _touched((rows, dim))  # the numpy baseline's array, same shape as the shard
            for n in sizes:
                d = _Data(rng, rows, n, dim)
                say(f"  numpy + local  n_keys={n:>9,} dim={dim}")
                results += _numpy_cells(data, d, plan) + _local_cells(tables[dim], d, plan)
            del data
    except _Skip:
        pass
    finally:
        if node is not None:
            node.shutdown()
    del node
    gc.collect()
    if remote or floor_rounds:
        results += _two_nodes(rows, dims, shapes if remote else [], plan, rng, say, floor_rounds, floors)
    if remote and auth:
        with tempfile.TemporaryDirectory(prefix="pskv-bench-") as tmp:
            secret = str(new_secret(Path(tmp) / "secret"))
            results += _two_nodes(rows, dims, shapes, plan, rng, say, 0, None, secret)
    base = {(r.op, r.n, r.dim): r.seconds for r in results if r.where == "numpy"}
    for r in results:
        if (r.op, r.n, r.dim) in base:
            r.ratio = base[(r.op, r.n, r.dim)] / r.seconds
    return results


def _two_nodes(rows: int, dims: list[int], shapes: list, plan: Plan, rng, say, floor_rounds: int,
               floors: list | None, secret: str | None = None) -> list[Result]:
    """The remote cells (and the floor) on this process as node 0 and a child as node 1."""
    from .config import NodeConfig
    from .node import Node

    results: list[Result] = []
    where = "remote+auth" if secret else "remote"
    address = f"127.0.0.1:{_free_port()}"
    raw_port = _free_port() if floor_rounds else 0
    child = _start_child(2 * rows, dims, address, raw_port, secret)
    node = None
    try:
        node = Node(NodeConfig(coordinator=address, num_nodes=2, rank=0, secret_file=secret))
        for dim in dims:
            node.table(f"d{dim}", rows=2 * rows, dim=dim)  # collective: node 1 declares them too
        node.table("floor", rows=2 * _FLOOR_ROWS, dim=_FLOOR_DIM)
        worker = node.worker()
        handles = {dim: worker.table(f"d{dim}") for dim in dims}
        for n, dim in shapes:
            say(f"  {where:<14} n_keys={n:>9,} dim={dim}")
            results += _remote_cells(handles[dim], _Data(rng, rows, n, dim), rows, plan, where)
        if floor_rounds:
            raw = _RawClient(raw_port, _FLOOR_DIM)
            try:
                got = floor(worker.table("floor"), raw, _FLOOR_ROWS, _FLOOR_ROWS, floor_rounds,
                            min(plan.budget, 0.5), plan.window, say=say)
            finally:
                raw.close()
            if floors is not None:
                floors += got
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
    order = {"numpy": 0, "local": 1, "remote": 2, "remote+auth": 3}
    for r in sorted(results, key=lambda r: (r.dim, r.n, r.op, order[r.where])):
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.op} | {r.where} | {r.mode} | {r.n:,} | {r.dim} | {_si(r.keys_per_s)} | "
                     f"{r.gb_per_s:.3f} | {us(r.p50)} | {us(r.p99)} | {ratio} | {r.reps} |")
    return "\n".join(lines)


def auth_table(results: list[Result]) -> str:
    """Each remote cell next to its authenticated twin: p50 round trip, GB/s, and speed with / without."""
    plain = {(r.op, r.mode, r.n, r.dim): r for r in results if r.where == "remote"}
    lines = ["| op | mode | n_keys | dim | p50 µs | p50 µs auth | GB/s | GB/s auth | auth / plain speed |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for a in sorted((r for r in results if r.where == "remote+auth"), key=lambda r: (r.dim, r.n, r.op, r.mode)):
        p = plain.get((a.op, a.mode, a.n, a.dim))
        if p is None:
            continue
        us = lambda r: "" if r.p50 is None else f"{r.p50 * 1e6:,.0f}"  # noqa: E731
        lines.append(f"| {a.op} | {a.mode} | {a.n:,} | {a.dim} | {us(p)} | {us(a)} | {p.gb_per_s:.3f} | "
                     f"{a.gb_per_s:.3f} | {p.seconds / a.seconds:.2f} |")
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
    p.add_argument("--rounds", type=int, default=None,
                   help="paired rounds of the raw-pyzmq floor (default 5, quick 3; 0: no floor)")
    p.add_argument("--floor-only", action="store_true", help="only the raw-pyzmq floor table")
    p.add_argument("--auth", action="store_true",
                   help="the remote cells also on an authenticated cluster (a shared secret: CURVE), side by side")
    args = p.parse_args(argv)
    quick = args.quick
    sizes = args.sizes or list(_QUICK_SIZES if quick else _FULL_SIZES)
    plan = Plan(budget=args.budget or (0.1 if quick else 1.0), reps_min=3 if quick else 5,
                reps_max=60 if quick else 200, window=max(1, args.window), copy=not args.no_copy)
    print(f"# pskv bench  {time.strftime('%Y-%m-%d %H:%M')}  (pskv {_revision()})\n\nmachine: {machine()}\n"
          f"sizes {sizes}, dims {args.dims}, window {plan.window}, budget {plan.budget} s, "
          f"remote push copy={plan.copy}\n", flush=True)
    t0 = time.perf_counter()
    rounds = (3 if quick else 5) if args.rounds is None else max(0, args.rounds)
    if args.no_remote and not args.floor_only:
        rounds = 0
    floors: list[Floor] = []
    results = run(sizes, args.dims, plan, remote=not args.no_remote and not args.floor_only,
                  say=lambda s: print(s, file=sys.stderr, flush=True), floor_rounds=max(rounds, args.floor_only),
                  cells=not args.floor_only, floors=floors, auth=args.auth)
    if results:
        print(table(results))
        print("\n## targets\n")
        for name, got, ok in targets(results):
            mark = "n/a " if ok is None else ("MET " if ok else "MISS")
            print(f"- [{mark}] {name}: {got}")
    if any(r.where == "remote+auth" for r in results):
        print("\n## authentication: the remote cells without and with a cluster secret (CURVE)\n")
        print(auth_table(results))
    if floors:
        print(f"\n## the floor: raw pyzmq and pskv, {len(floors[0].raw)} paired rounds, medians\n")
        print(floor_table(floors))
    print(f"\ntotal time {time.perf_counter() - t0:.0f} s; load average at the end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
