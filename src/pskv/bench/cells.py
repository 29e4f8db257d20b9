"""The cells of `pskv bench`: one (op, where, mode, n_keys, dim) figure each, numpy next to pskv."""

from __future__ import annotations

import collections
import dataclasses
import functools
import gc
import time
from collections.abc import Callable

import numpy as np

from ..net.future import Future

BIG = 64 << 20  # bytes of values from which a request counts as large: fewer repeats
WINDOW_BYTES = 512 << 20  # cap on the pull buffers of one windowed run (W * n * dim * 4)
WAIT = 120.0  # seconds: a request that takes longer means a lost reply; fail instead of hanging


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
    big = n * dim * 4 >= BIG
    reps_min = min(reps_min or plan.reps_min, 5 if big else 10_000)
    reps_max = max(reps_min, 20 if big else plan.reps_max)
    fn()  # warm-up: numba compiles/loads on first call, zmq connects on first send
    gc.collect()
    times: list[float] = []
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


def _round_trip(issue: Callable[[int], Future]) -> None:
    """One request at a time: issue one and wait for it."""
    issue(0).wait(WAIT)


def _windowed(issue: Callable[[int], Future], plan: Plan, window: int, requests: int) -> float:
    """Seconds per request with `window` requests outstanding; issue(i) returns a Future."""
    for f in [issue(i) for i in range(window)]:
        f.wait(WAIT)  # warm-up
    gc.collect()
    pending: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for i in range(requests):
        if len(pending) == window:
            pending.popleft().wait(WAIT)
        pending.append(issue(i))
    while pending:
        pending.popleft().wait(WAIT)
    return (time.perf_counter() - t0) / requests


def touched(shape) -> np.ndarray:
    """A float32 array of zeros whose pages are really mapped. np.zeros is not enough: its untouched
    pages all alias the kernel's one zero page, so a gather from it reads one cached 4 KiB page and
    looks several times faster than a gather from real rows (a pskv shard is written at init)."""
    a = np.empty(shape, np.float32)
    a.fill(0.0)
    return a


class Data:
    """Keys, values and output buffers for one (n_keys, dim), reused by every measurement."""

    def __init__(self, rng: np.random.Generator, rows: int, n: int, dim: int) -> None:
        self.n, self.dim = n, dim
        self.keys = np.ascontiguousarray(rng.permutation(rows)[:n])  # (n,) int64, unique, random order
        self.vals = rng.standard_normal((n, dim), dtype=np.float32) * 1e-3  # (n, dim) float32 updates
        self.out = touched((n, dim))  # (n, dim) pull target


def numpy_cells(data: np.ndarray, d: Data, plan: Plan) -> list[Result]:
    def pull():
        np.take(data, d.keys, axis=0, out=d.out)

    def push():
        data[d.keys] += d.vals

    return [
        _result("pull", "numpy", "call", d.n, d.dim, _timed(pull, plan, d.n, d.dim)),
        _result("push", "numpy", "call", d.n, d.dim, _timed(push, plan, d.n, d.dim)),
    ]


def local_cells(table, d: Data, plan: Plan) -> list[Result]:
    def pull():
        table.pull_async(d.keys, out=d.out).wait(WAIT)

    def push():
        table.push(d.keys, d.vals).wait(WAIT)

    return [
        _result("pull", "local", "call", d.n, d.dim, _timed(pull, plan, d.n, d.dim)),
        _result("push", "local", "call", d.n, d.dim, _timed(push, plan, d.n, d.dim)),
    ]


def remote_cells(table, d: Data, offset: int, plan: Plan, where: str = "remote") -> list[Result]:
    keys = d.keys + offset  # (n,) int64, all owned by node 1
    window = max(1, min(plan.window, WINDOW_BYTES // max(1, d.n * d.dim * 4)))
    bufs = [d.out] + [touched(d.out.shape) for _ in range(window - 1)]  # one pull target per outstanding request
    ops = {
        "pull": lambda i: table.pull_async(keys, out=bufs[i % window]),
        "push": lambda i: table.push(keys, d.vals, copy=plan.copy),
    }
    results = []
    for op, issue in ops.items():
        rtt = _result(
            op,
            where,
            "rtt",
            d.n,
            d.dim,
            _timed(functools.partial(_round_trip, issue), plan, d.n, d.dim, reps_min=max(plan.reps_min, 20)),
        )
        est = max(rtt.seconds / 2, 1e-6)  # pipelining hides at most about half of a round trip
        requests = int(min(2000, max(4 * window, plan.budget / est)))
        if d.n * d.dim * 4 >= BIG:
            requests = min(requests, 4 * window)
        per = _windowed(issue, plan, window, requests)
        results += [rtt, Result(op, where, f"window {window}", d.n, d.dim, per, reps=requests)]
    return results
