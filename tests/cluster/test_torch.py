"""pskv.torch.DataParallel across node processes: sync mode equals single-process torch.optim.SGD on
the global batch (the issue's contract), with threads aggregated first, then nodes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # `make test` installs it: never skipped in CI

sys.path.insert(0, str(Path(__file__).parent))
import torch_scenarios as sc  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCENARIOS = str(Path(__file__).parent / "torch_scenarios.py")


def _single_process(steps: int) -> list[np.ndarray]:
    model = sc.net()
    opt = torch.optim.SGD(model.parameters(), **sc.UPDATER)
    x, y = sc.data()
    for s in range(steps):
        start = (s * sc.BATCH) % len(x)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[start:start + sc.BATCH]), y[start:start + sc.BATCH]).backward()
        opt.step()
    return [p.detach().numpy() for p in model.parameters()]


def _two_workers_reference(steps: int) -> list[np.ndarray]:
    """What DDP computes on 2 workers: the mean of the two half-batch gradients, then torch's SGD."""
    model = sc.net()
    opt = torch.optim.SGD(model.parameters(), **sc.UPDATER)
    x, y = sc.data()
    half = sc.BATCH // 2
    for s in range(steps):
        start = (s * sc.BATCH) % len(x)
        grads = []
        for w in range(2):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x[start + w * half:start + (w + 1) * half]),
                                              y[start + w * half:start + (w + 1) * half]).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, g0, g1 in zip(model.parameters(), *grads):
            p.grad = g0 * 0.5 + g1 * 0.5  # exact halves: (g0 + g1) / 2 as an allreduce
        opt.step()
    return [p.detach().numpy() for p in model.parameters()]


def test_sync_data_parallel_on_two_nodes_is_ddp_bit_for_bit(cluster_factory, tmp_path):
    """2 nodes: the servers' SGD rounds as torch's (fused multiply-adds), and the owner adds two halves,
    so the weights are bit for bit those of DDP's mean gradient and torch.optim.SGD."""
    steps = 25
    cluster = cluster_factory(2, [sys.executable, SCENARIOS, "dp", str(tmp_path), "sync", "1", str(steps)])
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    got = np.load(tmp_path / "weights.npz")
    for i, w in enumerate(_two_workers_reference(steps)):
        assert np.array_equal(got[f"arr_{i}"], w), (i, np.abs(got[f"arr_{i}"] - w).max())


@pytest.mark.parametrize("nodes,threads", [(2, 2), (3, 1)])
def test_sync_data_parallel_equals_single_process_sgd(cluster_factory, tmp_path, nodes, threads):
    steps = 25
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, "dp", str(tmp_path), "sync", str(threads), str(steps)])
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    assert f"worker 0 of {nodes * threads} done" in cluster.output(0), cluster.logs_tail()
    got = np.load(tmp_path / "weights.npz")
    want = _single_process(steps)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"arr_{i}"], w, rtol=1e-4, atol=1e-5)
    assert not np.allclose(want[0], sc.net()[0].weight.detach().numpy(), atol=1e-3)  # it trained


def test_torchrun_starts_one_pskv_cluster_without_other_setup(tmp_path):
    """`torchrun --nproc-per-node 2 script.py`: RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT are enough."""
    import os
    import subprocess

    from helpers import free_port

    script = str(Path(__file__).parent / "torchrun_script.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
    for _ in range(3):  # another process may take the free port (or the one after it) first
        port = free_port()
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                               "--master-addr", "127.0.0.1", "--master-port", str(port), script],
                              capture_output=True, text=True, timeout=120, env=env)
        if "already in use" not in proc.stdout + proc.stderr:
            break
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        assert f"rank {rank} of 2: {[3.0] * 8}" in proc.stdout, proc.stdout + proc.stderr
