"""Server path and the GIL (issue 31): does serving remote requests starve a node's own worker?

    .venv/bin/python benchmarks/bench_server_gil.py                 # 3 rounds of every workload, pinned
    .venv/bin/python benchmarks/bench_server_gil.py --quick         # 1 round
    .venv/bin/python benchmarks/bench_server_gil.py --no-pin        # the OS places every thread
    .venv/bin/python benchmarks/bench_server_gil.py --pyspy         # + py-spy: who holds node 0's GIL
    .venv/bin/python benchmarks/bench_server_gil.py --before OTHER/src   # alternate with another checkout
    .venv/bin/python benchmarks/bench_server_gil.py --micro [--before OTHER/src]  # the server thread alone

A 2-node loopback cluster, 2 threads per node. Node 0's worker thread 0 runs a CPU-bound loop of
its own for SECONDS per phase, alone (`quiet`) and while node 1's two threads hammer node 0 with
requests (`load`: pulls and pushes of 1,000 and of 10 keys of node 0's range, WINDOW outstanding
per thread). Workloads of node 0's worker: `python` (a pure Python loop: what the GIL starves),
`local` (pulls and pushes of 100 of node 0's own keys through pskv: Python, numpy and numba
kernels, the same stripe locks as the server), `numba` (a nogil numba kernel over 1M floats:
only the CPU is shared). Printed per workload: the worker's ops/s quiet and under load, their
ratio (the figure of merit: 1.0 means remote load costs node 0's worker nothing), and the
requests node 1 got answered per second while loading (the server's side of the same story:
a server thread that waits for the GIL serves fewer).

Pinned (the default, 2+ CPUs): node 0's worker thread runs alone on CPU 0 and everything else
(node 0's server thread, node 1, ZeroMQ's threads) on CPU 1, so what the worker loses under load
is the GIL, not the CPU. Phases alternate quiet/load per round, and the medians are printed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROWS = 200_000  # node 0 manages [0, 100_000)
DIM = 16
SECONDS = 2.0  # measured per phase
WARM = 0.5  # the load runs this long before and after the measured window
WINDOW = 4  # requests outstanding per loading thread
WORKLOADS = ("python", "local", "numba")
_TAG = "GILBENCH "


def _spin(n: int) -> int:
    s = 0
    for i in range(n):
        s += i ^ (i >> 3)
    return s


def _numba_kernel():
    import numba

    @numba.njit(nogil=True, cache=True)
    def dot(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * a[i]
        return s
    return dot


def _pin(cpus: set[int]) -> None:
    try:
        os.sched_setaffinity(0, cpus)  # (pid 0 on Linux: the calling thread; threads started later inherit it)
    except (AttributeError, OSError):
        pass


def _worker_loop(workload: str, table, seconds: float) -> float:
    """node 0's own work for `seconds`: ops per second."""
    rng = np.random.default_rng(7)
    keys = rng.integers(0, ROWS // 2, 100)
    vals = np.ones((100, DIM), np.float32)
    kernel = _numba_kernel() if workload == "numba" else None
    big = np.ones(1 << 20)
    ops = 0
    end = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < end:
        for _ in range(10):
            if workload == "python":
                _spin(2000)
            elif workload == "local":
                table.pull(keys)
                table.push(keys, vals)
            else:
                kernel(big)
        ops += 10
    return ops / (time.monotonic() - start)


def _hammer(table, seconds: float, window: int, seed: int) -> tuple[int, int]:
    """node 1: requests to node 0's keys, `window` outstanding; (answered in the middle SECONDS, all)."""
    rng = np.random.default_rng(seed)
    half = ROWS // 2
    shapes = [rng.integers(0, half, n) for n in (1000, 10, 1000, 10)]
    pushes = [np.full((len(k), DIM), 0.5, np.float32) for k in shapes]
    pending: collections.deque = collections.deque()
    begin = time.monotonic()
    lo, hi = begin + WARM, begin + WARM + SECONDS
    end = begin + seconds
    counted = total = i = 0
    while time.monotonic() < end:
        which = i % 4
        keys = shapes[which]
        pending.append(table.pull_async(keys) if i % 2 == 0 else table.push(keys, pushes[which]))
        i += 1
        if len(pending) >= window:
            pending.popleft().wait()
            total += 1
            if lo <= time.monotonic() < hi:
                counted += 1
    while pending:
        pending.popleft().wait()
    return counted, total


def node_main(rounds: int, pin: bool, pyspy: str | None) -> None:
    import pskv

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = pin and len(cpus) >= 2
    if pin:
        _pin({cpus[1]})  # every thread of both nodes but node 0's worker
    node = pskv.init()
    node.table("t", rows=ROWS, dim=DIM)
    phases = [(w, load) for _ in range(rounds) for w in WORKLOADS for load in (False, True)]
    results: list[dict] = []

    def work(w: pskv.Worker) -> None:
        t = w.table("t")
        if w.rank == 0 and w.thread == 0 and pin:
            _pin({cpus[0]})
        _worker_loop("numba", t, 0.1)  # compile / load the kernels before the first phase
        if w.rank == 1:
            _hammer(t, 0.3, WINDOW, 99)
        for n, (workload, load) in enumerate(phases):
            w.barrier()
            if w.rank == 0 and w.thread == 0:
                time.sleep(WARM if load else 0.0)
                served = node.server.requests
                spy = None
                if pyspy and load and workload == "python" and n == 1:
                    spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--gil", "--threads", "--idle", "-r", "200", "-f", "raw",
                                            "-d", str(int(SECONDS)), "-p", str(os.getpid()), "-o", pyspy],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rate = _worker_loop(workload, t, SECONDS)
                results.append({"workload": workload, "load": load, "ops_per_s": rate,
                                "served": node.server.requests - served})
                if spy is not None:
                    spy.wait()
            elif w.rank == 1 and load:
                counted, _ = _hammer(t, SECONDS + 2 * WARM, WINDOW, 1000 * n + w.thread)
                results.append({"workload": workload, "load": load, "thread": w.thread,
                                "answered_per_s": counted / SECONDS})
        w.barrier()

    node.run(work, threads=2)
    for r in results:
        print(_TAG + json.dumps({"rank": node.rank, **r}), flush=True)
    node.shutdown()


def run(rounds: int, pin: bool, pyspy: str | None = None, src: str | None = None) -> list[dict]:
    """One cluster; `src`: the pskv sources the nodes import (another checkout's src/, for a before/after)."""
    from pskv.launch import start_local

    cmd = [sys.executable, __file__, "--node", "--rounds", str(rounds), *([] if pin else ["--no-pin"]),
           *(["--pyspy", pyspy] if pyspy else [])]
    env = {"PSKV_SHARED_MEMORY": "0"}  # (co-located nodes would read each other's rows, not ask the server)
    if src:
        env["PYTHONPATH"] = src
    with start_local(2, cmd, threads=2, env=env) as cluster:
        if cluster.wait(timeout=900) != 0:
            raise SystemExit(f"the benchmark cluster failed:\n{cluster.logs_tail()}")
        rows = [json.loads(line.split(_TAG, 1)[1]) for r in range(2)
                for line in cluster.output(r).splitlines() if _TAG in line]
    return rows


def micro(n: int = 1000) -> list[dict]:
    """The server thread alone, in this process: n requests wait in node 0's inbox (real sockets), then
    Dispatcher.run serves them; microseconds per message, with and without a pure Python thread beside it."""
    from pskv import updaters
    from pskv.net.dispatch import Dispatcher, Verdict
    from pskv.net.endpoint import Endpoint
    from pskv.net.requests import RequestTracker
    from pskv.net.transport import Transport
    from pskv.net.wire import Header, Kind, encode
    from pskv.placement.ranges import KeyRanges
    from pskv.server.serve import HANDLES, Server
    from pskv.store.shard import Store
    from pskv.store.spec import TableSpec, Zeros

    def once(nkeys: int, kind, busy: bool) -> float:
        server_t, client_t = Transport(), Transport()
        for t in (server_t, client_t):
            t.set_address(0, server_t.address)
            t.set_address(1, client_t.address)
        store = Store()
        store.add(TableSpec("t", ROWS, DIM, np.dtype(np.float32), updaters.Add(), Zeros(), table_id=1), 0, ROWS // 2)
        endpoint = Endpoint(0, server_t, RequestTracker(), lambda: 7)
        ranges = KeyRanges(ROWS, 2)
        server = Server(store, endpoint, endpoint.tracker, lambda table: ranges)
        dispatcher = Dispatcher(server_t, 0, lambda h: Verdict.ACCEPT)
        dispatcher.register(HANDLES, server.handle)
        rng = np.random.default_rng(0)
        vals = np.full((nkeys, DIM), 0.5, np.float32) if kind == Kind.PUSH else None
        for i in range(n):
            h = Header(kind, cluster=7, sender=1, origin=1, table=1, request_id=i + 1, dim=DIM)
            client_t.send(0, encode(h, keys=rng.integers(0, ROWS // 2, nkeys), values=vals))
        time.sleep(0.3)
        stop, spin_stop = threading.Event(), threading.Event()
        spinner = threading.Thread(target=lambda: [_spin(2000) for _ in iter(spin_stop.is_set, True)])
        if busy:
            spinner.start()
        t0 = time.perf_counter()
        thread = threading.Thread(target=dispatcher.run, args=(stop,))
        thread.start()
        while server.requests < n and time.perf_counter() - t0 < 120:
            time.sleep(0.001)
        took = time.perf_counter() - t0
        stop.set()
        spin_stop.set()
        thread.join()
        if busy:
            spinner.join()
        server_t.close()
        client_t.close()
        return took / n * 1e6

    from pskv.net.wire import Kind
    once(10, Kind.PULL, False)  # (kernels loaded)
    rows = []
    for nkeys in (10, 1000):
        for kind in (Kind.PULL, Kind.PUSH):
            for busy in (False, True):
                rows.append({"kind": kind.name, "keys": nkeys, "busy": busy,
                             "us_per_msg": round(float(np.median([once(nkeys, kind, busy) for _ in range(3)])), 1)})
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    out = []
    for workload in WORKLOADS:
        quiet = [r["ops_per_s"] for r in rows if r["rank"] == 0 and r["workload"] == workload and not r["load"]]
        loaded = [r["ops_per_s"] for r in rows if r["rank"] == 0 and r["workload"] == workload and r["load"]]
        served = [r["served"] / SECONDS for r in rows if r["rank"] == 0 and r["workload"] == workload and r["load"]]
        answered = collections.defaultdict(float)
        for i, r in enumerate(r for r in rows if r["rank"] == 1 and r["workload"] == workload):
            answered[i // 2] += r["answered_per_s"]  # (the two threads of one phase)
        q, lo = float(np.median(quiet)), float(np.median(loaded))
        out.append({"workload": workload, "quiet_ops_s": round(q, 1), "load_ops_s": round(lo, 1),
                    "ratio": round(lo / q, 3), "ratios": [round(a / b, 3) for a, b in zip(loaded, quiet)],
                    "answered_req_s": round(float(np.median(list(answered.values()))), 1),
                    "served_msgs_s": round(float(np.median(served)), 1)})
    return out


def gil_shares(path: str) -> dict[str, float]:
    """py-spy raw output (--gil: only samples of the thread holding the GIL) -> share per thread name."""
    counts: collections.Counter = collections.Counter()
    for line in Path(path).read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        thread = stack.split(";", 1)[0]
        name = "pskv-server" if "pskv-server" in thread else "worker 0" if "pskv-worker-0.0" in thread else \
            "worker 1" if "pskv-worker-0.1" in thread else "other"
        counts[name] += int(n)
    total = sum(counts.values()) or 1
    return {k: round(v / total, 3) for k, v in counts.most_common()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 round instead of 3")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--no-pin", dest="pin", action="store_false", help="let the OS place every thread")
    p.add_argument("--pyspy", nargs="?", const="auto", default=None,
                   help="sample node 0 with py-spy --gil during the first python/load phase")
    p.add_argument("--before", metavar="SRC", default=None,
                   help="also run the nodes on another checkout's src/ (alternating with this one) and print both")
    p.add_argument("--micro", action="store_true", help="only the in-process server-thread measurement")
    p.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    if args.node:
        node_main(rounds, args.pin, args.pyspy)
        return 0
    if args.micro:
        if os.environ.get("GILBENCH_JSON"):
            print(json.dumps(micro()))
            return 0
        variants = {"before": args.before, "this": None} if args.before else {"this": None}
        results: dict[str, list] = collections.defaultdict(list)
        for _ in range(rounds):  # (alternating, so both see the same machine)
            for name, src in variants.items():
                env = {**os.environ, "GILBENCH_JSON": "1", **({"PYTHONPATH": src} if src else {})}
                out = subprocess.run([sys.executable, __file__, "--micro"], env=env, capture_output=True, text=True,
                                     check=True)
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"the server thread alone (in process), 1,000 requests queued; us per message, median of {rounds}")
        for name, runs in results.items():
            for i, row in enumerate(runs[0]):
                us = float(np.median([r[i]["us_per_msg"] for r in runs]))
                print(f"{name:<7} {row['kind']:<5} keys={row['keys']:<5} python thread beside: {row['busy']!s:<5} "
                      f"{us:8.1f} us/msg")
        return 0
    pyspy = None
    if args.pyspy:
        pyspy = args.pyspy if args.pyspy != "auto" else os.path.join(tempfile.mkdtemp(prefix="gilbench-"), "spy.txt")
    variants = {"this": None} if not args.before else {"before": args.before, "this": None}
    rows: dict[str, list] = {name: [] for name in variants}
    for _ in range(rounds if args.before else 1):  # (before/after: clusters alternate, one round each)
        for name, src in variants.items():
            rows[name] += run(1 if args.before else rounds, args.pin, pyspy if name == "this" else None, src)
    print(f"server path and the GIL: 2 nodes x 2 threads, rows={ROWS} dim={DIM}, {SECONDS:g} s per phase, "
          f"{rounds} round(s), pinned={args.pin}; node 1: pull/push of 1000/10 keys, {WINDOW} outstanding x 2 threads")
    print(f"{'variant':<7} {'workload':<8} {'quiet ops/s':>12} {'load ops/s':>11} {'ratio':>6} {'answered req/s':>15} "
          f"{'served msg/s':>13} {'lost ms/1k req':>15}  ratios")
    for name in variants:
        for s in summarize(rows[name]):
            lost = (1 - s["ratio"]) * 1e6 / max(s["answered_req_s"], 1e-9)  # worker ms lost per 1,000 requests
            print(f"{name:<7} {s['workload']:<8} {s['quiet_ops_s']:>12} {s['load_ops_s']:>11} {s['ratio']:>6} "
                  f"{s['answered_req_s']:>15} {s['served_msgs_s']:>13} {lost:>15.1f}  {s['ratios']}")
    if pyspy and Path(pyspy).is_file():
        print(f"node 0, python workload under load, GIL holder per py-spy sample: {gil_shares(pyspy)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
