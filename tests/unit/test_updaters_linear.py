"""prox, ftrl and block_prox against plain-Python references of their formulas (exact in float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pskv
from pskv import updaters

pytestmark = pytest.mark.timeout(60)


def _soft(v, t):
    return math.copysign(max(abs(v) - t, 0.0), v)


def _summed(idx, upd, n):
    out = np.zeros((n, upd.shape[1]))
    np.add.at(out, idx, upd)
    return out, np.unique(idx)


def test_prox_soft_thresholds_the_summed_step():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(6, 2))
    ref = data.copy()
    idx, upd = np.array([0, 2, 2, 5]), rng.normal(size=(4, 2))
    rule = pskv.updaters.Prox(lr=0.3, l1=0.4, l2=0.2)
    rule.apply(data, None, idx, upd)
    g, touched = _summed(idx, upd, 6)
    for r in touched:
        for j in range(2):
            ref[r, j] = _soft(ref[r, j] - 0.3 * g[r, j], 0.3 * 0.4) / (1 + 0.3 * 0.2)
    assert np.array_equal(data, ref)


def test_ftrl_follows_mcmahan_and_keeps_small_z_at_zero():
    rule = updaters.FTRL(alpha=0.5, beta=1.0, l1=0.3, l2=0.1)
    data, state = np.zeros((2, 1)), np.empty((2, 2))
    rule.init_state(state)
    z = n = w = 0.0
    for g in (0.2, -1.0, 0.7, 2.0):
        rule.apply(data, state, np.array([1]), np.array([[g]]))
        sigma = (math.sqrt(n + g * g) - math.sqrt(n)) / 0.5
        z += g - sigma * w
        n += g * g
        w = 0.0 if abs(z) <= 0.3 else -(z - math.copysign(0.3, z)) / ((1.0 + math.sqrt(n)) / 0.5 + 0.1)
        assert data[1, 0] == pytest.approx(w, rel=1e-12, abs=1e-15)
    assert data[0, 0] == 0.0 and state[0].tolist() == [0.0, 0.0]
    small = np.zeros((1, 1)), np.zeros((1, 2))
    rule.apply(*small, np.array([0]), np.array([[0.25]]))  # |z| = 0.25 <= l1: stays exactly 0
    assert small[0][0, 0] == 0.0


def test_block_prox_takes_a_proximal_newton_step():
    rule = updaters.BlockProx(l1=0.05, l2=0.1, eta=0.8, eps=0.0)
    data = np.array([[0.5, 0.0], [0.01, 0.0]])
    rule.apply(data, None, np.array([0, 0, 1]), np.array([[0.2, 1.0], [0.1, 1.0], [0.001, 0.5]]))
    for r, (w, g, h) in enumerate([(0.5, 0.3, 2.0), (0.01, 0.001, 0.5)]):
        big = h + 0.1
        assert data[r, 0] == pytest.approx(_soft(w - 0.8 * (g + 0.1 * w) / big, 0.8 * 0.05 / big), abs=1e-15)
        assert data[r, 1] == pytest.approx(g + 0.1 * w, abs=1e-15)
    assert data[1, 0] == 0.0  # inside the threshold: exactly zero
    with pytest.raises(pskv.ShapeError, match="dim 2"):
        rule.apply(np.zeros((2, 1)), None, np.array([0]), np.zeros((1, 1)))


@pytest.mark.parametrize("bad", [dict(lr=0.0), dict(l1=-1.0), dict(l2=float("nan"))])
def test_prox_rejects_bad_hyperparameters(bad):
    with pytest.raises(pskv.ConfigError):
        updaters.Prox(**bad)
