"""pskv.data.Lookahead: which intents it signals for which clock, and when it advances (no cluster)."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.apps.negatives import Negatives
from pskv.data import Lookahead
from pskv.errors import ConfigError

pytestmark = pytest.mark.timeout(30)


class FakeWorker:
    def __init__(self, log: list) -> None:
        self.log, self.intent_clock = log, 0

    def advance_clock(self, ticks: int = 1) -> int:
        self.intent_clock += ticks
        self.log.append(("advance", ticks))
        return self.intent_clock


class FakeTable:
    def __init__(self, name: str, worker: FakeWorker) -> None:
        self.name, self.worker = name, worker

    def intent(self, keys, start: int, end=None) -> None:
        self.worker.log.append((self.name, tuple(int(k) for k in keys), start))


def test_signals_ahead_batches_early_and_advances_once_per_batch():
    log: list = []
    w = FakeWorker(log)
    w.intent_clock = 10  # a worker that advanced before: windows count from its clock
    a, b = FakeTable("a", w), FakeTable("b", w)
    batches = [np.array([i, i + 1]) for i in range(5)]
    got = []
    for batch in Lookahead(batches, lambda x: {a: x, b: x[:1]}, ahead=2):
        got.append(batch)
        log.append(("train", int(batch[0])))
    assert [int(x[0]) for x in got] == [0, 1, 2, 3, 4]
    assert log == [
        ("a", (0, 1), 10), ("b", (0,), 10), ("a", (1, 2), 11), ("b", (1,), 11), ("a", (2, 3), 12), ("b", (2,), 12),
        ("advance", 0),
        ("train", 0), ("a", (3, 4), 13), ("b", (3,), 13), ("advance", 1),
        ("train", 1), ("a", (4, 5), 14), ("b", (4,), 14), ("advance", 1),
        ("train", 2), ("advance", 1),
        ("train", 3), ("advance", 1),
        ("train", 4), ("advance", 1),
    ]
    assert w.intent_clock == 15


def test_ahead_zero_signals_each_batch_as_it_comes_and_empty_input_does_nothing():
    log: list = []
    w = FakeWorker(log)
    t = FakeTable("t", w)
    assert list(Lookahead([], lambda x: {t: x})) == []
    assert log == []
    out = list(Lookahead([np.array([5]), np.array([6])], lambda x: {t: x}, ahead=0))
    assert len(out) == 2
    assert log == [("t", (5,), 0), ("advance", 0), ("t", (6,), 1), ("advance", 1), ("advance", 1)]
    with pytest.raises(ConfigError, match="ahead"):
        Lookahead([], lambda x: {}, ahead=-1)


def test_predrawn_negatives_are_the_draws_in_their_order():
    draw = lambda rng, n: rng.integers(0, 1000, n)  # noqa: E731
    plain = Negatives(None, draw=draw, rng=np.random.default_rng(3))
    early = Negatives(None, draw=draw, rng=np.random.default_rng(3))
    expected = [plain.draw(n)[0] for n in (4, 7, 4)]
    drawn = [early.predraw(n) for n in (4, 7)]  # two batches ahead, then the third as it comes
    got = [early.draw(4)[0], early.draw(7)[0], early.draw(4)[0]]
    for x, y in zip(expected, got):
        assert np.array_equal(x, y)
    assert np.array_equal(drawn[0], got[0]) and np.array_equal(drawn[1], got[1])
    with pytest.raises(ConfigError, match="pool"):
        Negatives(None, scheme="pool").predraw(3)
