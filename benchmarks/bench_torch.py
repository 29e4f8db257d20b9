"""LeNet-5 on Fashion-MNIST, one epoch, five ways in one run: a single process; torch
DistributedDataParallel (gloo) on 2 processes; a torch.distributed.rpc parameter server as in
PyTorch's batch-RPC tutorial (1 server + 2 trainers); pskv.torch.DataParallel sync and async on 2
nodes. Same model, seed, sample order, global batch (64, split over the workers), SGD lr 0.05
momentum 0.9; every process uses one torch thread.

    python benchmarks/bench_torch.py [--limit 60000] [--workers 2]

Each process times its own training loop (wall) and its CPU time (time.process_time: all its
threads, pskv's server threads included); the table shows the slowest worker's wall time, the sum
of every process's CPU-seconds, and the test accuracy after the epoch, with ratios to DDP.
Wall times compare only within one run on this shared machine; CPU-seconds move less with load.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed.rpc as rpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BATCH, LR, MOMENTUM = 64, 0.05, 0.9


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(limit: int):
    from pskv.apps.mnist import load

    return load("fashion-mnist", limit, 0)


def _batches(n: int, rank: int, world: int):
    """Slices of this worker's share of every global batch of one epoch (the same order everywhere)."""
    import numpy as np
    import torch

    order = torch.from_numpy(np.random.default_rng([0, 1]).permutation(n))
    share = BATCH // world
    for b in range(n // BATCH):
        yield order[b * BATCH + rank * share:b * BATCH + (rank + 1) * share]


def _model():
    import torch

    from pskv.apps.mnist import lenet5

    torch.manual_seed(0)
    return lenet5()


def _report(model, x, y, vx, vy, wall: float, cpu: float, rank: int) -> None:
    from pskv.apps.mnist import accuracy

    acc = accuracy(model, vx, vy)[1] if rank == 0 else None
    print("@@" + json.dumps({"rank": rank, "wall": wall, "cpu": cpu, "acc": acc}), flush=True)


def _train_loop(model, step, x, y, rank, world):
    import torch

    began, cpu = time.monotonic(), time.process_time()
    for mine in _batches(len(x), rank, world):
        loss = torch.nn.functional.cross_entropy(model(x[mine]), y[mine])
        step(loss)
    return time.monotonic() - began, time.process_time() - cpu


def role_single(limit: int) -> None:
    import torch

    x, y, vx, vy = _data(limit)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def step(loss):
        opt.zero_grad()
        loss.backward()
        opt.step()

    _report(model, x, y, vx, vy, *_train_loop(model, step, x, y, 0, 1), 0)


def role_ddp(limit: int, rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    x, y, vx, vy = _data(limit)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = DistributedDataParallel(_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def step(loss):
        opt.zero_grad()
        loss.backward()
        opt.step()

    wall, cpu = _train_loop(model, step, x, y, rank, world)
    _report(model.module, x, y, vx, vy, wall, cpu, rank)
    dist.barrier()  # rank 0 evaluates meanwhile; leaving before it crashed gloo's teardown
    dist.destroy_process_group()


class _BatchPS:
    """PyTorch's batch-RPC parameter server: gradients of all trainers summed, one SGD step, the model
    sent back to every trainer (tutorial: rpc_param_server / batch processing)."""

    def __init__(self, trainers: int):
        import torch

        self.model = _model()
        self.trainers, self.count = trainers, 0
        self.lock = threading.Lock()
        self.future = torch.futures.Future()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update(ps_rref, grads):
        """A trainer's gradients in; a Future of the model after the step of this round."""
        self = ps_rref.local_value()
        with self.lock:
            self.count += 1
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            fut = self.future
            if self.count == self.trainers:
                for p in self.model.parameters():
                    p.grad /= self.trainers
                self.opt.step()
                for p in self.model.parameters():
                    p.grad.zero_()
                self.count, self.future = 0, torch.futures.Future()
                fut.set_result(self.model)
        return fut


def role_rpc(limit: int, rank: int, world: int, port: int) -> None:
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=4)
    if rank == 0:  # the server
        began = time.process_time()
        rpc.init_rpc("ps", rank=0, world_size=world, rpc_backend_options=opts)
        rpc.shutdown()
        print("@@" + json.dumps({"rank": "ps", "wall": 0.0, "cpu": time.process_time() - began, "acc": None}),
              flush=True)
        return
    x, y, vx, vy = _data(limit)
    rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 1:
        ps = rpc.remote("ps", _BatchPS, args=(world - 1,))
        for r in range(2, world):
            rpc.rpc_sync(f"trainer{r}", _set_ps, args=(ps,))
    else:
        while _PS[0] is None:
            time.sleep(0.01)
        ps = _PS[0]
    model = ps.rpc_sync().get_model()
    box = [model]

    def step(loss):
        loss.backward()
        box[0] = rpc.rpc_sync("ps", _BatchPS.update, args=(ps, [p.grad for p in box[0].parameters()]))

    began, cpu = time.monotonic(), time.process_time()
    for mine in _batches(len(x), rank - 1, world - 1):
        step(torch.nn.functional.cross_entropy(box[0](x[mine]), y[mine]))
    wall, cpu = time.monotonic() - began, time.process_time() - cpu
    _report(box[0], x, y, vx, vy, wall, cpu, rank - 1)
    rpc.shutdown()


_PS = [None]


def _set_ps(ps) -> None:
    _PS[0] = ps


def role_pskv(limit: int, mode: str) -> None:
    import pskv
    import pskv.torch as ptorch

    x, y, vx, vy = _data(limit)
    with pskv.init() as node:
        model = _model()
        dp = ptorch.DataParallel(model, node, mode=mode, updater=pskv.SGD(lr=LR, momentum=MOMENTUM))

        def step(loss):
            loss.backward()
            dp.step()

        wall, cpu = _train_loop(dp, step, x, y, node.rank, dp.workers)
        _report(model, x, y, vx, vy, wall, cpu, node.rank)
        dp.close()


def _run(commands: list[list[str]], env: dict | None = None) -> list[dict]:
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})}) for c in commands]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"bench_torch: {' '.join(p.args[-4:])} failed:\n{text[-3000:]}")
        out += [json.loads(line.split("@@", 1)[1]) for line in text.splitlines() if "@@{" in line]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=60000, help="training images (an epoch)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="run only these: single ddp rpc pskv-sync pskv-async")
    args = parser.parse_args()
    from pskv.data import fetch

    fetch("fashion-mnist")
    me, w = [sys.executable, __file__, "--role"], args.workers
    lim = ["--limit", str(args.limit)]
    runs = {
        "single": lambda: _run([[*me, "single", *lim]]),
        "ddp": lambda p=_port(): _run([[*me, "ddp", *lim, "--rank", str(r), "--world", str(w), "--port", str(p)]
                                       for r in range(w)]),
        "rpc": lambda p=_port(): _run([[*me, "rpc", *lim, "--rank", str(r), "--world", str(w + 1), "--port", str(p)]
                                       for r in range(w + 1)]),
        "pskv-sync": lambda: _run([[sys.executable, "-m", "pskv", "launch", "-n", str(w), "--", *me, "pskv", *lim,
                                    "--mode", "sync"]]),
        "pskv-async": lambda: _run([[sys.executable, "-m", "pskv", "launch", "-n", str(w), "--", *me, "pskv", *lim,
                                     "--mode", "async"]]),
    }
    results = {}
    for name, fn in runs.items():
        if args.only and name not in args.only:
            continue
        rows = fn()
        results[name] = (max(r["wall"] for r in rows), sum(r["cpu"] for r in rows),
                         next(r["acc"] for r in rows if r["acc"] is not None))
        print(f"{name:<11} wall {results[name][0]:6.1f} s  cpu {results[name][1]:6.1f} s  "
              f"test accuracy {results[name][2]:.4f}", flush=True)
    base = results.get("ddp")
    print(f"\nLeNet-5, Fashion-MNIST, {args.limit} images, global batch {BATCH}, {w} workers")
    print(f"{'':<11} {'wall s':>7} {'cpu s':>7} {'acc':>7} {'wall/DDP':>9} {'cpu/DDP':>8}")
    for name, (wall, cpu, acc) in results.items():
        ratio = f"{wall / base[0]:>9.2f} {cpu / base[1]:>8.2f}" if base else ""
        print(f"{name:<11} {wall:>7.1f} {cpu:>7.1f} {acc:>7.4f} {ratio}")


def _role(role: str, rest: list[str]) -> None:
    """A process of one of the runs (started by main)."""
    import torch

    q = argparse.ArgumentParser()
    q.add_argument("--limit", type=int, default=60000)
    q.add_argument("--rank", type=int, default=0)
    q.add_argument("--world", type=int, default=1)
    q.add_argument("--port", type=int, default=0)
    q.add_argument("--mode", default="sync")
    o = q.parse_args(rest)
    torch.set_num_threads(1)
    if role == "single":
        role_single(o.limit)
    elif role == "ddp":
        role_ddp(o.limit, o.rank, o.world, o.port)
    elif role == "rpc":
        role_rpc(o.limit, o.rank, o.world, o.port)
    else:
        role_pskv(o.limit, o.mode)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--role"]:
        _role(sys.argv[2], sys.argv[3:])
    else:
        main()
