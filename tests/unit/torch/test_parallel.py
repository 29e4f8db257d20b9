"""pskv.torch.DataParallel on one node (in process): the contract against torch.optim.SGD, modes, errors."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.errors import ConfigError, DTypeError

torch = pytest.importorskip("torch")
import pskv.torch as ptorch  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _data(n: int = 96):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g)


def _reference(steps: int, batch: int, **sgd):
    model = _net()
    opt = torch.optim.SGD(model.parameters(), **sgd)
    x, y = _data()
    for s in range(steps):
        i = slice((s * batch) % len(x), (s * batch) % len(x) + batch)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("mode", ["sync", "async", "ssp:1"])
def test_one_worker_follows_torch_optim_sgd_with_momentum(node, mode):
    model = _net()
    dp = ptorch.DataParallel(model, node, mode=mode, updater=pskv.SGD(lr=0.1, momentum=0.9, nesterov=True))
    x, y = _data()
    for s in range(12):
        i = slice((s * 32) % len(x), (s * 32) % len(x) + 32)
        torch.nn.functional.cross_entropy(dp(x[i]), y[i]).backward()
        dp.step()
    want = _reference(12, 32, lr=0.1, momentum=0.9, nesterov=True)
    for p, q in zip(model.parameters(), want):
        torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)
        assert p.grad is not None and not p.grad.any()  # zeroed by step()
    assert dp.workers == 1
    dp.close()


def test_zero_grad_to_none_and_an_unused_parameter_are_handled(node):
    class WithUnused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net, self.unused = _net(), torch.nn.Linear(2, 2)  # unused: never in forward, no gradient

        def forward(self, x):
            return self.net(x)

    model = WithUnused()
    extra = model.unused
    before = extra.weight.detach().clone()
    dp = ptorch.DataParallel(model, node, updater=pskv.SGD(lr=0.1))
    x, y = _data()
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(dp(x[:8]), y[:8]).backward()
        dp.step()
    assert torch.equal(extra.weight.detach(), before)
    assert dp.state_dict().keys() == model.state_dict().keys()


def test_errors_name_the_problem(node):
    with pytest.raises(DTypeError, match="is torch.float64; pskv.torch trains float32 parameters"):
        ptorch.DataParallel(_net().double(), node)
    with pytest.raises(ConfigError, match="mode='bogus'"):
        ptorch.DataParallel(_net(), node, mode="bogus")
    with pytest.raises(ConfigError, match="is not declared; call DataParallel.declare"):
        ptorch.DataParallel(_net(), node.worker(), name="other")


def test_embedding_pushes_summed_gradients_to_the_servers_updater(node):
    table = node.table("emb", rows=10, dim=2, updater=pskv.SGD(lr=1.0), init=1.0)
    emb = ptorch.Embedding(node.worker().table("emb"))
    ids = torch.tensor([[1, 3], [3, 3]])
    out = emb(ids)
    assert out.shape == (2, 2, 2) and torch.equal(out, torch.ones(2, 2, 2))
    out.sum().backward()  # d/drow: 1 per use: row 1 once, row 3 three times
    emb.wait()
    assert table.pull([0, 1, 3]).tolist() == [[1, 1], [0, 0], [-2, -2]]
    emb.prefetch(torch.tensor([1, 0]))
    assert emb(torch.tensor([1, 0])).tolist() == [[0, 0], [1, 1]]


def test_embedding_sample_pushes_the_gradient_of_each_drawn_row(node):
    table = node.table("neg", rows=6, dim=1, updater=pskv.SGD(lr=1.0), sampling=pskv.Sampling(np.ones(6)))
    emb = ptorch.Embedding(node.worker().table("neg"))
    handle = emb.table.prepare_sample(8)
    ids, rows = emb.sample(handle, 8)
    assert ids.shape == (8,) and rows.shape == (8, 1)
    rows.sum().backward()
    emb.wait()
    counts = np.bincount(ids.numpy(), minlength=6)
    assert table.pull(np.arange(6))[:, 0].tolist() == (-counts).astype(np.float32).tolist()


def test_workers_with_different_models_fail_with_table_mismatch():
    from helpers import free_port, together

    at = f"127.0.0.1:{free_port()}"
    nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=2, rank=r, failure_timeout=10.0)
                       for r in range(2)])
    try:
        models = [_net(), torch.nn.Sequential(torch.nn.Linear(12, 17), torch.nn.ReLU(), torch.nn.Linear(17, 3))]
        got = together(*[lambda n=n, m=m: ptorch.DataParallel(m, n) for n, m in zip(nodes, models)])
        assert all(isinstance(g, pskv.TableMismatch) for g in got), got
        assert "model/" in str(got[0])  # the table names carry each model's layout
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in nodes if isinstance(n, pskv.Node)])


def test_server_side_adam_follows_torch_optim_adam(node):
    """pskv.Adam on the servers (its per-row step count: every row steps each round here) against
    torch.optim.Adam, one worker."""
    model = _net()
    dp = ptorch.DataParallel(model, node, mode="sync", updater=pskv.Adam(lr=0.01))
    reference = _net()
    opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    x, y = _data()
    for s in range(10):
        i = slice(s * 8, s * 8 + 8)
        torch.nn.functional.cross_entropy(dp(x[i]), y[i]).backward()
        dp.step()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(x[i]), y[i]).backward()
        opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)
    dp.close()
