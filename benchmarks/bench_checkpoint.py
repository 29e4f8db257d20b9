"""Checkpoint and restore speed against a plain numpy.save + fsync of the same bytes, in one run.

    python benchmarks/bench_checkpoint.py [--gib 1.0] [--nodes 1 2 4] [--dir /tmp/pskv-bench-ckpt]

For each node count: a cluster declares one float32 table of --gib GiB (dim 256, every row filled),
takes a checkpoint (timed by node 0 from the call to its return, fsyncs included), then a new
cluster of the same size restores it (timed from pskv.init(restore=) to the end of the table's
declaration: verifying every checksum, re-sharding, loading). The baseline is numpy.save of the
same array into one file plus fsync, and np.load of it, in this process. Ratios > 1: pskv is faster.
Absolute times on a shared machine are noise; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 256


def _node(mode: str, directory: Path, rows: int, out: Path) -> None:
    import pskv

    start = time.perf_counter()
    with pskv.init(**({"restore": str(directory)} if mode == "restore" else {})) as node:
        table = node.table("big", rows, DIM)
        if mode == "restore":
            if node.rank == 0:
                (out / "restore.txt").write_text(str(time.perf_counter() - start))
            return
        lo, hi = node.view.key_ranges(rows).manager_range(node.rank)
        chunk = 1 << 16
        for a in range(lo, hi, chunk):  # fill this node's rows (local sets: no network)
            keys = np.arange(a, min(a + chunk, hi))
            table.set(keys, np.full((len(keys), DIM), float(node.rank + 1), np.float32)).wait()
        worker = node.worker()
        worker.barrier()
        t0 = time.perf_counter()
        info = node.checkpoint(directory)
        seconds = time.perf_counter() - t0
        if node.rank == 0:
            (out / "save.txt").write_text(str(seconds))
            print(f"  checkpoint {info.path.name}", flush=True)
        worker.close()


def _pskv(nodes: int, mode: str, directory: Path, rows: int) -> float:
    from pskv.launch import start_local

    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, __file__, "--node", mode, str(directory), str(rows), tmp]
        with start_local(nodes, argv, failure_timeout=60) as cluster:
            if cluster.wait(900) != 0:
                raise SystemExit(cluster.logs_tail())
        return float((Path(tmp) / ("save.txt" if mode == "save" else "restore.txt")).read_text())


def _numpy(directory: Path, rows: int) -> tuple[float, float]:
    array = np.full((rows, DIM), 1.0, np.float32)
    path = directory / "plain.npy"
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    save = time.perf_counter() - t0
    del array
    t0 = time.perf_counter()
    back = np.load(path)
    load = time.perf_counter() - t0
    assert back.shape == (rows, DIM)
    path.unlink()
    return save, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pskv-bench-ckpt")
    parser.add_argument("--node", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.node:
        mode, directory, rows, out = args.node
        _node(mode, Path(directory), int(rows), Path(out))
        return
    rows = int(args.gib * 2**30) // (DIM * 4)
    gib = rows * DIM * 4 / 2**30
    print(f"table: {rows:,} x {DIM} float32 = {gib:.2f} GiB; directory {args.dir}")
    for nodes in args.nodes:
        saves, loads, psaves, ploads = [], [], [], []
        for _ in range(args.rounds):
            shutil.rmtree(args.dir, ignore_errors=True)
            args.dir.mkdir(parents=True)
            s, l = _numpy(args.dir, rows)
            saves.append(s)
            loads.append(l)
            psaves.append(_pskv(nodes, "save", args.dir / "ckpt", rows))
            ploads.append(_pskv(nodes, "restore", args.dir / "ckpt", rows))
        s, l, ps, pl = (statistics.median(x) for x in (saves, loads, psaves, ploads))
        print(f"{nodes} node(s): checkpoint {ps:6.2f} s ({gib / ps:5.2f} GiB/s) vs numpy.save+fsync {s:6.2f} s "
              f"({gib / s:5.2f} GiB/s): ratio {s / ps:4.2f};  restore {pl:6.2f} s vs np.load {l:6.2f} s: ratio {l / pl:4.2f}",
              flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
