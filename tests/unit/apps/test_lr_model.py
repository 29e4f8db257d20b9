"""The lr app's local pieces: kernels against numpy, AUC against its definition, the model file."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.apps import lr_model
from pskv.apps.lr_model import BIAS_KEY, Local
from pskv.data.sparse import SparseData

pytestmark = pytest.mark.timeout(60)


def _data(rng, rows=300, features=40):
    counts = rng.integers(1, 6, rows)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    keys = np.concatenate([rng.choice(features, c, replace=False) for c in counts]).astype(np.uint64) * \
        np.uint64(2**58 + 1)  # distinct features within a row, spread over the key space
    values = rng.uniform(-1, 2, indptr[-1]).astype(np.float32)
    return SparseData(rng.integers(0, 2, rows).astype(np.float32), indptr, keys, values)


def _dense(data, weights_by_key):
    m = np.full(data.rows, weights_by_key.get(BIAS_KEY, 0.0))
    for i in range(data.rows):
        for p in range(data.indptr[i], data.indptr[i + 1]):
            m[i] += weights_by_key.get(int(data.keys[p]), 0.0) * data.values[p]
    return m


def test_margins_and_block_gradients_match_numpy():
    rng = np.random.default_rng(0)
    data = _data(rng)
    loc = Local(data)
    w = rng.normal(size=len(loc.keys))
    m = np.empty(data.rows)
    lr_model.margins(loc.indptr, loc.col, loc.values, True, w, loc.bias, m)
    assert np.allclose(m, _dense(data, dict(zip(loc.keys.tolist(), w))))
    blocks = 4
    block_of = loc.block_of(blocks)
    g_all, h_all = np.zeros(len(loc.keys)), np.zeros(len(loc.keys))
    for b, (indptr, col, values) in enumerate(loc.split(block_of, blocks)):
        lr_model.block_gradient(indptr, col, values, True, loc.labels, m, loc.bias, block_of[loc.bias] == b,
                                g_all, h_all, 0.5)
    p = 1 / (1 + np.exp(-m))
    x = np.zeros((data.rows, len(loc.keys)))
    for i in range(data.rows):
        np.add.at(x[i], loc.col[loc.indptr[i]:loc.indptr[i + 1]], loc.values[loc.indptr[i]:loc.indptr[i + 1]])
    x[:, loc.bias] = 1.0
    assert np.allclose(g_all, 0.5 * x.T @ (p - data.labels))
    k = np.stack([(block_of[np.nonzero(x[i])[0]][:, None] == np.arange(blocks)).sum(axis=0) for i in range(data.rows)])
    h_ref = sum(0.5 * (x ** 2 * (block_of == b)).T @ (p * (1 - p) * k[:, b]) for b in range(blocks))
    assert np.allclose(h_all, h_ref)


def test_auc_is_the_share_of_correctly_ordered_pairs():
    rng = np.random.default_rng(1)
    prob = rng.integers(0, 20, 400) / 20.0  # many ties
    labels = rng.integers(0, 2, 400).astype(np.float32)
    pos, neg = prob[labels == 1], prob[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert lr_model.auc(prob, labels) == pytest.approx(pairs / (len(pos) * len(neg)), abs=1e-12)
    hist = lr_model.score_histogram(prob, labels)
    assert lr_model.auc_of_histogram(hist) == pytest.approx(lr_model.auc(prob, labels), abs=1e-3)


def test_a_saved_model_predicts_like_the_weights(tmp_path):
    rng = np.random.default_rng(2)
    data = _data(rng)
    keys = np.append(np.unique(data.keys), np.uint64(BIAS_KEY))
    weights = rng.normal(size=len(keys))
    weights[::3] = 0.0
    path = lr_model.save_model(tmp_path / "m.npz", keys, weights, {int(keys[1]): "f=1"})
    model = lr_model.load_model(path)
    assert len(model["keys"]) == np.count_nonzero(weights)
    expected = 1 / (1 + np.exp(-_dense(data, dict(zip(keys.tolist(), weights)))))
    assert np.allclose(lr_model.predict(model, data), expected)
