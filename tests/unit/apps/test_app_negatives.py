"""pskv.apps.negatives: the negative sampler kge and word2vec share, on a stand-in table (no cluster)
and once on a real 1-node table."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.apps.negatives import Negatives
from pskv.errors import ConfigError


class FakeTable:
    """The sampling API of a pskv.Table over `rows` rows of width 2 (row k = [k, -k]), recording calls.
    A handle of n gives out up to n keys; with `short`, every pull gives `short` keys fewer (onlylocal)."""

    def __init__(self, rows: int = 10, short: int = 0) -> None:
        self.rows, self.short = rows, short
        self.prepared: list[tuple[int, int, str]] = []  # (handle id, n, scheme)
        self.finished: list[int] = []
        self.pulled: list[tuple[int, int]] = []  # (handle id, k)

    def prepare_sample(self, n: int, *, scheme: str | None = None) -> dict:
        handle = {"id": len(self.prepared), "left": n}
        self.prepared.append((handle["id"], n, scheme))
        return handle

    def pull_sample(self, handle: dict, k: int) -> tuple[np.ndarray, np.ndarray]:
        assert handle["id"] not in self.finished, "pull from a finished handle"
        k = max(0, min(k, handle["left"]) - self.short)
        handle["left"] -= k
        self.pulled.append((handle["id"], k))
        keys = (np.arange(k) + 3 * handle["id"]) % self.rows
        return keys, np.column_stack([keys, -keys]).astype(np.float32)

    def finish_sample(self, handle: dict) -> None:
        assert handle["id"] not in self.finished, "a handle finished twice"
        self.finished.append(handle["id"])


def _uniform(rows: int):
    return lambda rng, n: rng.integers(0, rows, n)


def test_app_drawn_negatives_are_n_keys_in_range_seeded_and_without_rows():
    """scheme None: draw(n) gives exactly n int64 keys in [0, rows), no rows, and the same keys for the
    same seed; the table is never asked and ahead() does nothing."""
    table = FakeTable()
    a = Negatives(table, draw=_uniform(7), rng=np.random.default_rng(3))
    a.ahead(5)
    draws = [a.draw(n) for n in (0, 1, 1000)]
    for n, (keys, rows) in zip((0, 1, 1000), draws):
        assert keys.shape == (n,) and keys.dtype == np.int64 and rows is None
    assert draws[2][0].min() == 0 and draws[2][0].max() == 6
    b = Negatives(table, draw=_uniform(7), rng=np.random.default_rng(3))
    assert all(np.array_equal(b.draw(n)[0], keys) for n, (keys, _) in zip((0, 1, 1000), draws))
    a.close()
    assert table.prepared == [] and table.finished == []


def test_app_drawn_negatives_need_a_draw_function_and_a_generator():
    with pytest.raises(ConfigError, match=r"give draw=\(rng, n\) -> keys and rng="):
        Negatives(FakeTable(), draw=_uniform(7))


def test_sampling_api_negatives_take_prepared_handles_in_order_and_finish_each_once():
    """A draw takes the oldest handle prepared by ahead() (or prepares one), pulls exactly n keys and their
    rows with it, and finishes it; a handle prepared for another size is finished unused; close()
    finishes what was prepared and not drawn."""
    table = FakeTable()
    negatives = Negatives(table, scheme="preloc")
    negatives.ahead(4)
    negatives.ahead(6)
    keys, rows = negatives.draw(4)  # handle 0
    assert keys.tolist() == [0, 1, 2, 3] and keys.dtype == np.int64
    assert np.array_equal(rows, np.column_stack([keys, -keys]))
    assert negatives.draw(6)[0].tolist() == [3, 4, 5, 6, 7, 8]  # handle 1
    assert negatives.draw(2)[0].tolist() == [6, 7]  # nothing prepared: handle 2 made now
    negatives.ahead(5)  # handle 3: the wrong size for the next draw
    assert negatives.draw(3)[0].tolist() == [2, 3, 4]  # handle 4
    negatives.ahead(1)  # handle 5, never drawn
    negatives.close()
    assert [(n, scheme) for _, n, scheme in table.prepared] == [(4, "preloc"), (6, "preloc"), (2, "preloc"),
                                                                  (5, "preloc"), (3, "preloc"), (1, "preloc")]
    assert table.pulled == [(0, 4), (1, 6), (2, 2), (4, 3)]
    assert sorted(table.finished) == list(range(6))


def test_sampling_api_negatives_repeat_a_short_sample_up_to_n():
    """A scheme that gives fewer keys than asked (onlylocal by rejection) is repeated to n keys and rows."""
    table = FakeTable(short=2)
    keys, rows = Negatives(table, scheme="onlylocal").draw(5)
    assert keys.tolist() == [0, 1, 2, 0, 1] and rows[:, 0].tolist() == [0, 1, 2, 0, 1] and rows.shape == (5, 2)


def test_negatives_from_a_real_table_are_its_keys_and_rows():
    """On a 1-node pskv table with a sampling distribution: n keys in range and their current rows."""
    with pskv.init() as node:
        weights = np.zeros(50)
        weights[10:20] = 1.0  # only keys 10..19 may be drawn
        node.table("ent", rows=50, dim=3, init=pskv.Normal(std=1.0, seed=1),
                   sampling=pskv.Sampling(weights, scheme="naive", seed=2))
        seen = {}

        def work(w):
            table = w.table("ent")
            negatives = Negatives(table, scheme="pool")
            negatives.ahead(40)
            keys, rows = negatives.draw(40)
            negatives.close()
            seen.update(keys=keys, rows=rows, pulled=table.pull(keys))

        node.run(work)
    assert seen["keys"].shape == (40,) and 10 <= seen["keys"].min() and seen["keys"].max() < 20
    assert np.array_equal(seen["rows"], seen["pulled"])


def test_pool_localizes_every_drawn_key_at_prepare_and_none_while_drawing(monkeypatch):
    """pool: one localize of all ceil(n / reuse) distinct drawn keys when the handle is prepared, none
    when its keys are handed out (localizing a group just before pulling it made every pull wait for
    its TRANSFERs, issue 11)."""
    from pskv.client.table import Table

    calls = []
    real = Table.localize
    monkeypatch.setattr(Table, "localize", lambda self, keys: calls.append(np.array(keys)) or real(self, keys))
    with pskv.init() as node:
        node.table("ent", rows=500, dim=2, sampling=pskv.Sampling(np.ones(500), scheme="pool", reuse=4,
                                                                  group_size=8))
        t = node.worker().table("ent")
        h = t.prepare_sample(200)
        assert len(calls) == 1 and len(calls[0]) == 50
        np.testing.assert_array_equal(np.sort(calls[0]), np.sort(np.concatenate(h.drawn)))
        keys, rows = t.pull_sample(h, 200)
        assert len(calls) == 1 and len(keys) == 200 and rows.shape == (200, 2)
        t.finish_sample(h)
