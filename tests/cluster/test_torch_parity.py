"""pskv.torch.DataParallel on two node processes, as a DDP user expects (issue 33): BatchNorm's
running statistics equal on both nodes after each step (the first worker's, broadcast), or each
node's own with broadcast_buffers=False; and the README's `node.worker().barrier()` beside it."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # `make test` installs it: never skipped in CI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    import torch
    import pskv
    import pskv.torch as ptorch

    out, broadcast = Path(sys.argv[1]), sys.argv[2] == "1"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 6, generator=g), torch.randint(0, 2, (256,), generator=g)
    with pskv.init() as node:
        dp = ptorch.DataParallel(model, node, mode="sync", updater=pskv.SGD(lr=0.1), broadcast_buffers=broadcast)
        share = 32 // dp.workers
        bn = model[1]
        for s in range(4):
            lo = s * 32 + node.rank * share
            torch.nn.functional.cross_entropy(dp(x[lo:lo + share]), y[lo:lo + share]).backward()
            dp.step()
            np.savez(out / f"bn-{node.rank}-{s}.npz", mean=bn.running_mean.numpy(), var=bn.running_var.numpy(),
                     count=bn.num_batches_tracked.numpy())
        worker = node.worker()  # the README's pattern: it must not wait for dp's own worker
        worker.barrier(timeout=60)
        worker.close()
        dp.barrier(timeout=60)
        print(f"node {node.rank} barriers done", flush=True)
        dp.close()
""")


def _run(cluster_factory, tmp_path, broadcast: bool):
    script = tmp_path / "bn.py"
    script.write_text(SCRIPT)
    cluster = cluster_factory(2, [sys.executable, str(script), str(tmp_path), "1" if broadcast else "0"])
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    for rank in (0, 1):
        assert f"node {rank} barriers done" in cluster.output(rank), cluster.logs_tail()
    return [[np.load(tmp_path / f"bn-{rank}-{s}.npz") for s in range(4)] for rank in (0, 1)]


def test_batchnorm_running_stats_are_equal_on_both_nodes_after_every_step(cluster_factory, tmp_path):
    """Buffers broadcast (the default): after each step both nodes hold node 0's running mean, var and
    count exactly; the statistics moved away from their initial values."""
    got = _run(cluster_factory, tmp_path, True)
    for s in range(4):
        for key in ("mean", "var", "count"):
            assert np.array_equal(got[0][s][key], got[1][s][key]), (s, key, got[0][s][key], got[1][s][key])
        assert int(got[0][s]["count"]) == s + 1
    assert not np.array_equal(got[0][3]["mean"], np.zeros(8, np.float32))


def test_without_broadcast_buffers_each_node_keeps_its_own(cluster_factory, tmp_path):
    """broadcast_buffers=False: each node's running mean follows its own half-batches, so they differ."""
    got = _run(cluster_factory, tmp_path, False)
    assert not np.array_equal(got[0][3]["mean"], got[1][3]["mean"])
    assert int(got[0][3]["count"]) == int(got[1][3]["count"]) == 4
