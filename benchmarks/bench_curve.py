"""CURVE, plain TCP and ipc between two processes of one host (issue 31), at the Transport level.

    .venv/bin/python benchmarks/bench_curve.py               # 3 rounds of every mode
    .venv/bin/python benchmarks/bench_curve.py --rounds 1    # quick look

Two processes, each with a pskv `Transport` as a node makes it (net.transport): the server holds a
(100,000, 64) float32 table and answers each request [keys] with [np.take(rows, keys)], sent
zero-copy to the client's inbox; the client sends one request, waits for its reply, and so on.
Workloads: `1k`, 1,000-key round trips (8 KB keys out, 256 KB rows back), and `100k`, 100,000-key
pulls (800 KB out, 25.6 MB back). Modes:

  curve       tcp + CURVE (a secret; PSKV_SHARED_MEMORY=0): what every connection was before issue 31
  plain       tcp without CURVE (no secret)
  ipc         the secret set, and ipc on (PSKV_SHARED_MEMORY=1): same-host messages over ipc, no CURVE
  curve-io2   curve with zmq.Context(io_threads=2) in both processes (a node's context: Transport.__init__)
  curve-io4   curve with io_threads=4

Printed per mode: the round trip's median (µs) and the pull's bandwidth (GB/s of rows), and the CPU
seconds both processes spent per operation (getrusage: every thread, ZeroMQ's I/O threads included),
the figure issue 31 is about. Rounds interleave the modes (a fresh pair of processes per mode per
round) so a shared machine's load changes hit every mode alike; the tables give each figure's median
over the rounds and its ratio to `curve` in the same run. Not a pskv cluster on purpose: with
PSKV_SHARED_MEMORY=1 a pull of a co-located node's keys becomes a shared-memory copy (store.shm), so a
cluster would not measure the transport.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS, DIM = 100_000, 64
MODES = {  # name -> (secret, ipc, io_threads)
    "curve": (True, False, 1),
    "plain": (False, False, 1),
    "ipc": (True, True, 1),
    "curve-io2": (True, False, 2),
    "curve-io4": (True, False, 4),
}
WORK = {"1k": (1_000, 300), "100k": (100_000, 8)}  # name -> (keys per request, requests per round)
_QUIT, _MARK = b"q", b"m"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _transport(mode: str, secret: str):
    import zmq

    from pskv.net import auth
    from pskv.net.transport import Transport

    with_secret, ipc, io_threads = MODES[mode]
    ctx = zmq.Context(io_threads=io_threads)
    return Transport("127.0.0.1", context=ctx, keys=auth.load(secret) if with_secret else None, ipc=ipc), ctx


def _close(transport, ctx) -> None:
    transport.close()
    ctx.term()


def serve(mode: str, secret: str, client: str, pipe) -> None:
    """The server process: answer [keys] with their rows until QUIT; report the CPU since the last MARK."""
    transport, ctx = _transport(mode, secret)
    try:
        rows = np.random.default_rng(0).random((ROWS, DIM), dtype=np.float32)  # (ROWS, DIM) float32
        transport.set_address(0, client)
        pipe.send(transport.address)
        mark = _cpu()
        while True:
            frames = transport.recv(1.0)
            if frames is None:
                continue
            frame = frames[0].buffer if hasattr(frames[0], "buffer") else memoryview(frames[0])
            first = bytes(frame[:1])
            if first == _QUIT:
                pipe.send(_cpu() - mark)
                return
            if first == _MARK:
                mark = _cpu()
                transport.send(0, [_MARK])
                continue
            keys = np.frombuffer(frame, np.int64)  # (n,) int64
            transport.send(0, [np.take(rows, keys, axis=0)], copy=False)
    finally:
        _close(transport, ctx)


def _wait(transport, proc) -> list:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.is_alive():
        frames = transport.recv(1.0)
        if frames is not None:
            return frames
    raise RuntimeError(f"no reply from the server process (alive: {proc.is_alive()})")


def one_pair(mode: str, secret: str) -> dict:
    """This process as the client of a server process per workload: per workload (median seconds per
    request, client CPU seconds per request, server CPU seconds per request)."""
    client, ctx = _transport(mode, secret)
    rng = np.random.default_rng(1)
    out = {}
    try:
        for server, (name, (n, count)) in enumerate(WORK.items()):  # rank 0 is the client: servers are 1, 2
            server += 1
            there, here = mp.Pipe()
            proc = mp.get_context("spawn").Process(target=serve, args=(mode, secret, client.address, there),
                                                   daemon=True)
            proc.start()
            try:
                client.set_address(server, here.recv())
                keys = [np.sort(rng.choice(ROWS, n, replace=False)).astype(np.int64) for _ in range(4)]
                for k in keys[:2]:  # warm-up: connections, handshakes, buffers
                    client.send(server, [k])
                    _wait(client, proc)
                client.send(server, [_MARK])
                _wait(client, proc)
                times, cpu = [], _cpu()
                for i in range(count):
                    start = time.perf_counter()
                    client.send(server, [keys[i % 4]])
                    reply = _wait(client, proc)
                    times.append(time.perf_counter() - start)
                    assert len(reply[0]) == n * DIM * 4, len(reply[0])
                client_cpu = (_cpu() - cpu) / count
                client.send(server, [_QUIT])
                out[name] = (statistics.median(times), client_cpu, here.recv() / count)
            finally:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
    finally:
        _close(client, ctx)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    from pskv.net import auth

    results: dict = {(m, w): [] for m in modes for w in WORK}
    with tempfile.TemporaryDirectory() as tmp:
        secret = str(auth.new_secret(Path(tmp) / "bench.secret"))
        for r in range(args.rounds):
            for mode in modes:
                for name, figures in one_pair(mode, secret).items():
                    results[mode, name].append(figures)
                    rtt, ccpu, scpu = figures
                    print(f"round {r + 1} {mode:10s} {name:5s} median {rtt * 1e6:9.0f} µs  cpu client "
                          f"{ccpu * 1e3:7.2f} ms/op  server {scpu * 1e3:7.2f} ms/op", flush=True)
    print()
    print(f"medians of {args.rounds} round(s); ratios to curve in the same run; CPU = client + server, every thread")
    print()
    print("| mode | 1k round trip, µs | vs curve | 1k CPU, ms/op | vs curve | 100k pull, GB/s | vs curve "
          "| 100k CPU, ms/op | vs curve |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: | --: |")
    med = {key: (statistics.median(f[0] for f in v), statistics.median(f[1] + f[2] for f in v))
           for key, v in results.items()}
    base = "curve" if "curve" in modes else modes[0]
    for mode in modes:
        rtt, cpu = med[mode, "1k"]
        prtt, pcpu = med[mode, "100k"]
        gbs = WORK["100k"][0] * DIM * 4 / prtt / 1e9
        base_gbs = WORK["100k"][0] * DIM * 4 / med[base, "100k"][0] / 1e9
        print(f"| {mode} | {rtt * 1e6:,.0f} | {rtt / med[base, '1k'][0]:.2f} | {cpu * 1e3:.2f} | "
              f"{cpu / med[base, '1k'][1]:.2f} | {gbs:.2f} | {gbs / base_gbs:.2f} | {pcpu * 1e3:.1f} | "
              f"{pcpu / med[base, '100k'][1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
