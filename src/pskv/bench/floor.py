"""The floor of `pskv bench`: raw pyzmq next to pskv in the same run, paired rounds."""

from __future__ import annotations

import collections
import dataclasses
import gc
import time
from collections.abc import Callable

import numpy as np

from .cells import WAIT, touched

FLOOR_ROWS = 100_000  # rows per node of the floor's table ("floor", dim 64); its 100,000-key pulls take them all
FLOOR_DIM = 64

# ---- the floor: raw pyzmq next to pskv, same run, paired rounds ------------------------------------
# Node 1 also serves a raw pyzmq ROUTER on the same arrays' shapes and dtypes; node 0 is the client
# of both. Raw messages: [op (1 byte), keys (int64, zero-copy), (values)] -> [rows] or [b""]. A
# raw pull gathers with np.take and sends the rows zero-copy; a raw push does data[keys] += vals.
_RAW_PULL, _RAW_PUSH = b"p", b"u"


def raw_server(port: int, rows: int, dim: int, stop, host: str = "127.0.0.1", keys=None) -> None:
    """The raw pyzmq server thread of node 1: answers until `stop` is set. `keys`: a
    net.auth.ClusterKeys to speak CURVE as pskv does (None: plain, as pskv --insecure)."""
    import zmq

    data = touched((rows, dim))  # (rows, dim) float32, like node 1's shard
    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        keys.server(sock)
    sock.bind(f"tcp://{host}:{port}")
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


class RawClient:
    """Node 0's side of the raw floor: one DEALER socket, one message per op."""

    def __init__(self, port: int, dim: int, host: str = "127.0.0.1", keys=None) -> None:
        import zmq

        self.dim = dim
        self.sock: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            keys.client(self.sock)
        self.sock.connect(f"tcp://{host}:{port}")

    def send_pull(self, keys: np.ndarray) -> None:
        # (an ndarray is a buffer; numpy's annotations say so only for Python >= 3.12)
        self.sock.send_multipart([_RAW_PULL, keys], copy=False)  # type: ignore[list-item]

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
        self.sock.send_multipart([_RAW_PUSH, keys, vals], copy=False)  # type: ignore[list-item]  # (as above)
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
            return [r / p for r, p in zip(self.raw, self.pskv, strict=True)]
        return [p / r for r, p in zip(self.raw, self.pskv, strict=True)]


def _raw_windowed(raw: RawClient, keys: np.ndarray, window: int, requests: int) -> float:
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
        f.wait(WAIT)
    pending: collections.deque = collections.deque()
    t0 = time.perf_counter()
    for _ in range(requests):
        if len(pending) == window:
            pending.popleft().wait(WAIT)
        pending.append(table.pull_async(keys))
    while pending:
        pending.popleft().wait(WAIT)
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


def floor(
    table,
    raw: RawClient,
    offset: int,
    rows: int,
    rounds: int,
    budget: float,
    window: int,
    big: int = 100_000,
    say: Callable[[str], None] = print,
) -> list[Floor]:
    """Paired rounds of raw pyzmq and pskv on the same keys (all owned by node 1). Within a round,
    the raw and pskv calls of a figure alternate call by call (windowed runs: block by block, the
    first alternating from round to round). Returns one Floor per figure; the last compares pskv
    with itself: a default pull (no out=) against one with out=."""
    rng = np.random.default_rng(1)
    dim = raw.dim
    keys = {n: np.ascontiguousarray(rng.permutation(rows)[:n] + offset) for n in (1, 1_000, big)}
    vals = {n: rng.standard_normal((n, dim), dtype=np.float32) * 1e-3 for n in (1_000, big)}
    out = {n: touched((n, dim)) for n in (1, 1_000, big)}
    gb = big * dim * 4 / 1e9
    requests = max(200, int(budget * 4000))
    us = 1e6
    k1, k3, kb = keys[1], keys[1_000], keys[big]
    names = [
        (f"pull 1 key x {dim}, round trip p50", "µs"),
        (f"pull 1,000 keys x {dim}, round trip p50", "µs"),
        (f"push 1,000 keys x {dim}, round trip p50", "µs"),
        (f"pull {big:,} x {dim} with out=, GB/s", "GB/s"),
        (f"pull {big:,} x {dim} without out=, GB/s", "GB/s"),
        (f"push {big:,} x {dim}, GB/s", "GB/s"),
        (f"{window} outstanding 1-key pulls, ops/s", "ops/s"),
        (f"pskv pull {big:,} x {dim}: without out= (pskv) vs with out= (raw column), GB/s", "GB/s"),
    ]
    results = [Floor(name, unit, [], []) for name, unit in names]

    def add(i: int, r: float, p: float) -> None:
        results[i].raw.append(r)
        results[i].pskv.append(p)

    for rnd in range(rounds):
        say(f"  floor round {rnd + 1}/{rounds}")
        gc.collect()
        r, p = _interleaved([lambda: raw.pull(k1, out[1]), lambda: table.pull(k1, out=out[1], timeout=WAIT)], budget)
        add(0, us * r, us * p)
        r, p = _interleaved(
            [lambda: raw.pull(k3, out[1_000]), lambda: table.pull(k3, out=out[1_000], timeout=WAIT)], budget
        )
        add(1, us * r, us * p)
        r, p = _interleaved([lambda: raw.push(k3, vals[1_000]), lambda: table.push(k3, vals[1_000]).wait(WAIT)], budget)
        add(2, us * r, us * p)
        r_out, p_out, r_new, p_new = _interleaved(
            [
                lambda: raw.pull(kb, out[big]),
                lambda: table.pull(kb, out=out[big], timeout=WAIT),
                lambda: raw.pull(kb),
                lambda: table.pull(kb, timeout=WAIT),
            ],
            budget,
            5,
        )
        add(3, gb / r_out, gb / p_out)
        add(4, gb / r_new, gb / p_new)
        add(7, gb / p_out, gb / p_new)
        r, p = _interleaved([lambda: raw.push(kb, vals[big]), lambda: table.push(kb, vals[big]).wait(WAIT)], budget, 5)
        add(5, gb / r, gb / p)
        blocks = []
        for b in range(4):  # small blocks, alternating
            first_raw = (rnd + b) % 2 == 0
            pair = [
                lambda: _raw_windowed(raw, k1, window, requests // 4),
                lambda: _pskv_windowed(table, k1, window, requests // 4),
            ]
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
        lines.append(
            f"| {r.figure} | {fmt(r.unit, float(np.median(r.raw)))} {r.unit} | "
            f"{fmt(r.unit, float(np.median(r.pskv)))} {r.unit} | "
            f"{np.median(rt):.2f} ({min(rt):.2f}-{max(rt):.2f}) |"
        )
    return "\n".join(lines)
