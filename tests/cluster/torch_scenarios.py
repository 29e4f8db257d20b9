"""Node programs for tests/cluster/test_torch.py: DataParallel on several nodes (and threads).

    python torch_scenarios.py dp OUT_DIR MODE THREADS STEPS

Every worker takes its slice of each global batch of 48 (the same samples and order as one process
would use: worker w of W takes rows [w * 48 / W, (w + 1) * 48 / W) of the batch), trains STEPS
steps, and the first worker writes the parameters to OUT_DIR/weights.npz.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

import pskv
import pskv.torch as ptorch

BATCH = 48


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def data(n: int = 480):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g)


UPDATER = dict(lr=0.1, momentum=0.9, weight_decay=1e-3)


def dp(out: Path, mode: str, threads: int, steps: int) -> None:
    torch.set_num_threads(1)
    x, y = data()
    with pskv.init() as node:
        ptorch.DataParallel.declare(node, net(), mode=mode, updater=pskv.SGD(**UPDATER))

        models = [net() for _ in range(threads)]  # here: torch's seed is global, threads would interleave it

        def train(worker: pskv.Worker) -> None:
            model = models[worker.thread]
            par = ptorch.DataParallel(model, worker, mode=mode, updater=pskv.SGD(**UPDATER))
            index = node.rank * threads + worker.thread  # ranks 0..N-1 here: no node joined
            share = BATCH // par.workers
            for s in range(steps):
                start = (s * BATCH) % len(x) + index * share
                torch.nn.functional.cross_entropy(par(x[start:start + share]), y[start:start + share]).backward()
                par.step()
            if index == 0:
                np.savez(out / "weights.npz", *[p.detach().numpy() for p in model.parameters()])
            print(f"worker {index} of {par.workers} done", flush=True)
            par.close()

        node.run(train, threads=threads)


if __name__ == "__main__":
    if sys.argv[1] == "dp":
        dp(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
