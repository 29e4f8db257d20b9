"""The clusters of `pskv bench`: a private 1-node cluster for the local cells, and this process as
node 0 with a child process as node 1 for the remote cells and the floor (started here with
subprocess, not by `pskv launch`)."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..net.auth import new_secret
from .cells import Data, Plan, Result, local_cells, numpy_cells, remote_cells, touched
from .floor import FLOOR_DIM, FLOOR_ROWS, RawClient, floor, raw_server

_CHILD = "import sys, pskv.bench.nodes as b; sys.exit(b.serve_node(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))"


class _Skip(Exception):
    """No local cells: straight to the 2-node part."""


# ---- the two clusters ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_node(rows: int, dims: str, raw_port: int = 0) -> int:
    """Node 1 of the remote benchmark (runs in the child process): declare the tables, serve raw
    pyzmq on `raw_port` (0: not), then serve until node 0 shuts down."""
    import threading

    from ..config import NodeConfig
    from ..node import Node

    node = Node(NodeConfig.from_env())
    stop = threading.Event()
    raw = None
    try:
        for dim in (int(x) for x in dims.split(",") if x):
            node.table(f"d{dim}", rows=rows, dim=dim)
        node.table("floor", rows=2 * FLOOR_ROWS, dim=FLOOR_DIM)
        if raw_port:
            raw = threading.Thread(
                target=raw_server, args=(raw_port, 2 * FLOOR_ROWS, FLOOR_DIM, stop), name="raw-pyzmq", daemon=True
            )
            raw.start()
        worker = node.worker()
        worker.barrier()  # until node 0 is done: a node that said BYE stops hearing the coordinator's
        worker.close()  # TICKs and gives up after failure_timeout (see benchmarks/RESULTS.md)
    finally:
        stop.set()
        if raw is not None:
            raw.join(5)
        node.shutdown()
    return 0


def _start_child(
    rows: int, dims: list[int], address: str, raw_port: int = 0, secret: str | None = None
) -> subprocess.Popen:
    import pskv

    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    src = str(Path(pskv.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(PSKV_COORDINATOR=address, PSKV_NUM_NODES="2", PSKV_RANK="1")
    if secret:
        env["PSKV_SECRET_FILE"] = secret
    argv = [sys.executable, "-c", _CHILD, str(rows), ",".join(map(str, dims)), str(raw_port)]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


def run(
    sizes: list[int],
    dims: list[int],
    plan: Plan,
    remote: bool = True,
    say: Callable[[str], None] = print,
    floor_rounds: int = 0,
    cells: bool = True,
    floors: list | None = None,
    auth: bool = False,
) -> list[Result]:
    """Measure every cell (unless not `cells`); return the results (ratios filled in). With
    `floor_rounds`, also measure the raw-pyzmq floor (`floor`) in as many paired rounds and
    append its figures to `floors`. With `auth`, the remote cells again on an authenticated cluster."""
    from ..config import NodeConfig
    from ..node import Node

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
            data = touched((rows, dim))  # the numpy baseline's array, same shape as the shard
            for n in sizes:
                d = Data(rng, rows, n, dim)
                say(f"  numpy + local  n_keys={n:>9,} dim={dim}")
                results += numpy_cells(data, d, plan) + local_cells(tables[dim], d, plan)
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


def _two_nodes(
    rows: int,
    dims: list[int],
    shapes: list,
    plan: Plan,
    rng,
    say,
    floor_rounds: int,
    floors: list | None,
    secret: str | None = None,
) -> list[Result]:
    """The remote cells (and the floor) on this process as node 0 and a child as node 1."""
    from ..config import NodeConfig
    from ..node import Node

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
        node.table("floor", rows=2 * FLOOR_ROWS, dim=FLOOR_DIM)
        worker = node.worker()
        handles = {dim: worker.table(f"d{dim}") for dim in dims}
        for n, dim in shapes:
            say(f"  {where:<14} n_keys={n:>9,} dim={dim}")
            results += remote_cells(handles[dim], Data(rng, rows, n, dim), rows, plan, where)
        if floor_rounds:
            raw = RawClient(raw_port, FLOOR_DIM)
            try:
                got = floor(
                    worker.table("floor"),
                    raw,
                    FLOOR_ROWS,
                    FLOOR_ROWS,
                    floor_rounds,
                    min(plan.budget, 0.5),
                    plan.window,
                    say=say,
                )
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
