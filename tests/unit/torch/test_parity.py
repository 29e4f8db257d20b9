"""pskv.torch.DataParallel on one node (in process), what DDP users expect (issue 33): a warning for
backward() twice without step(), buffers kept (or not) through the buffers table, and the README's
`node.worker().barrier()` beside a DataParallel's own worker."""

from __future__ import annotations

import warnings

import pytest

import pskv

torch = pytest.importorskip("torch")
import pskv.torch as ptorch  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _bn_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 6, generator=g), torch.randint(0, 2, (16,), generator=g)


def test_backward_twice_without_step_warns_once(node):
    """A second backward() before step() warns once, naming step(); after step() a single backward is quiet."""
    dp = ptorch.DataParallel(_bn_net(), node, updater=pskv.SGD(lr=0.1))
    x, y = _batch()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.nn.functional.cross_entropy(dp(x), y).backward()
        messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        assert len(messages) == 1, messages
        assert messages[0].startswith("DataParallel: backward() ran again before dp.step(); each bucket of gradients")
        dp.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.nn.functional.cross_entropy(dp(x), y).backward()
            dp.step()
    finally:
        dp.close()


def test_buffers_table_holds_the_first_workers_buffers(node):
    """With buffers broadcast (the default), each step writes the model's buffers, stamped with the
    step, to the buffers table: what the other workers read, exactly (float64 rows)."""
    model = _bn_net()
    dp = ptorch.DataParallel(model, node, updater=pskv.SGD(lr=0.1))
    try:
        for s in range(3):
            x, y = _batch(s)
            torch.nn.functional.cross_entropy(dp(x), y).backward()
            dp.step()
        dp.worker.wait_all(30)
        rows = dp._btable.pull(dp._bkeys)  # (1, 65) float64: 8 means, 8 variances, 1 count, the step
        bn = model[1]
        assert rows[0, :8].tolist() == bn.running_mean.double().tolist()
        assert rows[0, 8:16].tolist() == bn.running_var.double().tolist()
        assert rows[0, 16] == 3 == int(bn.num_batches_tracked) and rows[0, 64] == 3
    finally:
        dp.close()


def test_broadcast_buffers_false_uses_no_buffers_table(node):
    """broadcast_buffers=False: the buffers table is declared (a collective) but never written."""
    model = _bn_net()
    dp = ptorch.DataParallel(model, node, updater=pskv.SGD(lr=0.1), broadcast_buffers=False)
    try:
        x, y = _batch()
        torch.nn.functional.cross_entropy(dp(x), y).backward()
        dp.step()
        assert dp._btable is None and int(model[1].num_batches_tracked) == 1
    finally:
        dp.close()


def test_node_worker_barrier_beside_a_data_parallel_does_not_wait_for_it(node):
    """The README's pattern: `node.worker().barrier()` from the thread that made DataParallel(model,
    node) completes at once (its own worker is counted as arrived), and so does dp.barrier()."""
    dp = ptorch.DataParallel(_bn_net(), node, updater=pskv.SGD(lr=0.1))
    try:
        w = node.worker()
        w.barrier(timeout=20)  # BarrierTimeout if it waited for dp's worker
        w.barrier(timeout=20)
        w.close()
        dp.barrier(timeout=20)
    finally:
        dp.close()
