"""pskv.SGD with momentum, nesterov and weight_decay against torch.optim.SGD, step by step."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.errors import ConfigError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("momentum,nesterov,weight_decay", [
    (0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.0), (0.0, False, 1e-2), (0.5, True, 5e-4)])
def test_server_side_sgd_follows_torch_optim_sgd(momentum, nesterov, weight_decay):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(20, 6)).astype(np.float32)
    grads = rng.normal(size=(30, 20, 6)).astype(np.float32)
    rule = pskv.SGD(lr=0.05, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    data = w0.copy()
    state = np.empty((20, rule.state_width(6)), np.float32)
    rule.init_state(state)
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.SGD([p], lr=0.05, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
    for g in grads:
        rule.apply(data, state, np.arange(20), g)
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        np.testing.assert_allclose(data, p.detach().numpy(), rtol=0, atol=0)  # bit for bit: the same roundings as torch
    if momentum:
        np.testing.assert_allclose(state, opt.state[p]["momentum_buffer"].numpy(), rtol=0, atol=0)  # bit for bit: the same roundings as torch


def test_momentum_sums_duplicate_keys_first_and_touches_only_pushed_rows():
    rule = pskv.SGD(lr=0.1, momentum=0.9)
    data = np.ones((4, 1), np.float32)
    state = np.zeros((4, 1), np.float32)
    rule.apply(data, state, np.array([2, 2, 0]), np.array([[1.0], [1.0], [1.0]], np.float32))
    assert state[:, 0].tolist() == [1.0, 0.0, 2.0, 0.0]
    np.testing.assert_allclose(data[:, 0], [0.9, 1.0, 0.8, 1.0], rtol=1e-6)


def test_sgd_config_and_checks():
    assert pskv.SGD(lr=0.1).config() == {"name": "sgd", "lr": 0.1}  # old checkpoints' specs stay equal
    rule = pskv.SGD(lr=0.1, momentum=0.9, nesterov=True)
    assert pskv.updaters.from_config(rule.config()) == rule and rule.state_layout(3) == {"momentum_buffer": (0, 3)}
    assert pskv.SGD(lr=0.1).in_order and not rule.in_order
    with pytest.raises(ConfigError, match=r"SGD\(nesterov=True, momentum=0.0\): nesterov needs momentum > 0"):
        pskv.SGD(lr=0.1, nesterov=True)
    with pytest.raises(ConfigError, match=r"SGD\(momentum=1.5\): momentum must be in \[0, 1\)"):
        pskv.SGD(lr=0.1, momentum=1.5)


def test_a_table_with_momentum_sgd_on_a_node(node):
    table = node.table("w", rows=3, dim=2, updater=pskv.SGD(lr=0.5, momentum=0.5), init=1.0)
    for _ in range(2):
        table.push([1], np.ones((1, 2), np.float32)).wait(10)
    # b1 = 1, w = 1 - 0.5 = 0.5; b2 = 0.5 * 1 + 1 = 1.5, w = 0.5 - 0.75 = -0.25
    assert table.pull([0, 1]).tolist() == [[1.0, 1.0], [-0.25, -0.25]]
