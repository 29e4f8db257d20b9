"""apps/kge._hottest: `--replicate N` takes the N hottest rows over both tables, relations first on ties."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.apps.kge import _hottest
from pskv.data.kg import KG

pytestmark = pytest.mark.timeout(30)


def _kg(train) -> KG:
    train = np.array(train, np.int64)
    empty = np.zeros((0, 3), np.int64)
    return KG("t", tuple(f"e{i}" for i in range(6)), ("r0", "r1", "r2"), train, empty, empty)


def test_the_hottest_rows_of_both_tables():
    # relation uses: r0 x4, r1 x1, r2 x0; entity uses (head and tail): e0 x5, e1 x1, e2 x1, e3 x1, e4 x0, e5 x0
    kg = _kg([[0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 0, 0], [0, 1, 0]])
    ent, rel = _hottest(kg, 1)
    assert ent.tolist() == [0] and rel.tolist() == []  # e0 (5 uses) beats r0 (4)
    ent, rel = _hottest(kg, 3)
    assert ent.tolist() == [0] and rel.tolist() == [0, 1]  # e0 5, r0 4, then r1/e1/e2/e3 tie at 1: r1 wins
    ent, rel = _hottest(kg, 4)
    assert ent.tolist() == [0, 1] and rel.tolist() == [0, 1]  # then the entities in id order
    assert [a.tolist() for a in _hottest(kg, 0)] == [[], []]


def test_all_rows_when_n_exceeds_them():
    kg = _kg([[1, 2, 3]])
    ent, rel = _hottest(kg, 100)
    assert ent.tolist() == list(range(6)) and rel.tolist() == [0, 1, 2]
