"""CPU per request on each side of the wire, pskv against raw pyzmq in the same run (issue 31 items 2, 5).

    .venv/bin/python benchmarks/bench_wire_cpu.py                 # every figure, this checkout's src/
    .venv/bin/python benchmarks/bench_wire_cpu.py --only rt1,win8 --src /tmp/other/src

Two nodes on this host (`pskv.launch.start_local`), PSKV_SHARED_MEMORY=0 and PSKV_INSECURE=1, so
every request of node 0 for node 1's keys is a tcp message without CURVE, as raw pyzmq's are.
Node 1 also serves raw pyzmq (pskv.bench.floor.raw_server, a thread of its process); node 0 runs
each figure for raw and for pskv in turn, between barriers, and each node reports the CPU
seconds its whole process spent (every thread: ZeroMQ's I/O thread, pskv-server, the caller)
per request. CPU time moves much less with the machine's load than wall time (read the ratios).

Figures: rt1 / rt1000 (a blocking pull of 1 / 1,000 keys x 64 floats), push1000 (push and wait),
win8 (8 outstanding 1-key pull_async, a sliding window; raw: 8 messages in flight), pull100k.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROWS, DIM, PORT = 200_000, 64, 47555
FIGURES = {"rt1": 3000, "rt1000": 2000, "push1000": 2000, "win8": 10000, "pull100k": 30}


def node_main(only: list[str], scale: float) -> None:
    import pskv
    from pskv.bench.floor import RawClient, raw_server

    node = pskv.init()
    node.table("floor", rows=ROWS, dim=DIM)
    w = node.worker()
    stop = threading.Event()
    if node.rank == 1:
        threading.Thread(target=raw_server, args=(PORT, ROWS, DIM, stop), daemon=True).start()
    w.barrier(60)
    t = w.table("floor")
    k1 = np.array([ROWS // 2 + 7], np.int64)
    k1000 = np.arange(ROWS // 2, ROWS // 2 + 1000, dtype=np.int64)
    kbig = np.arange(ROWS // 2, ROWS, dtype=np.int64)
    out = {n: np.zeros((n, DIM), np.float32) for n in (1, 1000, ROWS // 2)}
    raw = RawClient(PORT, DIM) if node.rank == 0 else None

    def win_pskv(n: int, window: int = 8) -> None:
        pending: collections.deque = collections.deque()
        for _ in range(n):
            if len(pending) == window:
                pending.popleft().wait(30)
            pending.append(t.pull_async(k1))
        while pending:
            pending.popleft().wait(30)

    def win_raw(n: int, window: int = 8) -> None:
        for _ in range(window):
            raw.send_pull(k1)
        for _ in range(n - window):
            raw.recv_rows(1)
            raw.send_pull(k1)
        for _ in range(window):
            raw.recv_rows(1)

    calls = {"rt1": (lambda n: [raw.pull(k1, out[1]) for _ in range(n)],
                     lambda n: [t.pull(k1, out=out[1]) for _ in range(n)]),
             "rt1000": (lambda n: [raw.pull(k1000, out[1000]) for _ in range(n)],
                        lambda n: [t.pull(k1000, out=out[1000]) for _ in range(n)]),
             "push1000": (lambda n: [raw.push(k1000, out[1000]) for _ in range(n)],
                          lambda n: [t.push(k1000, out[1000]).wait(30) for _ in range(n)]),
             "win8": (win_raw, win_pskv),
             "pull100k": (lambda n: [raw.pull(kbig, out[ROWS // 2]) for _ in range(n)],
                          lambda n: [t.pull(kbig, out=out[ROWS // 2]) for _ in range(n)])}
    for name in only:
        n = max(10, int(FIGURES[name] * scale))
        cpu = []
        for side in calls[name]:
            w.barrier(60)
            c0 = time.process_time()
            if node.rank == 0:
                side(n)
            w.barrier(60)
            cpu.append((time.process_time() - c0) / n * 1e6)
        print(f"FIGURE {name}: raw {cpu[0]:.1f} us, pskv {cpu[1]:.1f} us CPU per request "
              f"({cpu[1] / cpu[0]:.2f}x)", flush=True)
    stop.set()
    if raw is not None:
        raw.close()
    w.close()
    node.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated, of {','.join(FIGURES)}")
    ap.add_argument("--scale", type=float, default=1.0, help="requests per figure, times this")
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"), help="the pskv to measure")
    ap.add_argument("--node", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    only = [f for f in args.only.split(",") if f]
    if args.node:
        node_main(only, args.scale)
        return 0
    os.environ["PYTHONPATH"] = os.pathsep.join([args.src] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    os.environ["PSKV_INSECURE"] = "1"
    sys.path.insert(0, args.src)
    from pskv.launch import start_local

    cluster = start_local(2, [sys.executable, str(Path(__file__).resolve()), "--node", "--only", ",".join(only),
                              "--scale", str(args.scale)], env={"PSKV_SHARED_MEMORY": "0"})
    try:
        status = cluster.wait(timeout=900)
        for rank in (0, 1):
            side = "client (node 0)" if rank == 0 else "server (node 1)"
            for line in cluster.output(rank).splitlines():
                if line.startswith("FIGURE"):
                    print(f"{side}: {line[7:]}")
    finally:
        cluster.shutdown(timeout=10)
    return status


if __name__ == "__main__":
    sys.exit(main())
