"""census-income as hashed crossed features (pskv.data.census), on a small generated copy of its CSV layout."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.data import DataError, census
from pskv.data.sparse import SparseData

pytestmark = pytest.mark.timeout(60)

NUMERIC = {"age", "wage_per_hour", "capital_gains", "capital_losses", "dividends", "weeks_worked", "instance_weight"}


def _csv(path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        cells = []
        for name in census._COLUMNS:
            if name == "label":
                cells.append(" 50000+." if rng.random() < 0.3 else " - 50000.")
            elif name in NUMERIC:
                cells.append(f" {int(rng.integers(0, 90))}")
            else:
                cells.append(f" {name[:3]}-{int(rng.integers(0, 4))}")
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")


def test_prepare_writes_one_key_per_field_and_cross(tmp_path, monkeypatch):
    _csv(tmp_path / census._TRAIN, 40, 1)
    _csv(tmp_path / census._TEST, 10, 2)
    monkeypatch.setattr(census, "fetch", lambda name, quiet=False: tmp_path)
    directory = census.prepare()
    train = SparseData.open(directory / "train.pskvsp")
    assert train.rows == 40 and train.values is None
    per_row = len(census._COLUMNS) - 2 + len(census._crosses())  # fields (no weight, no label) and crosses
    assert np.all(np.diff(train.indptr) == per_row) and per_row == 106
    names = census.feature_names(directory)
    assert set(np.unique(np.asarray(train.keys)).tolist()) <= set(names)
    assert all(census.key_of(name) == key for key, name in names.items())
    stats = census.stats(directory)
    assert stats["collisions"] == 0 and stats["features"] == len(names) and stats["test_rows"] == 10
    assert names[census.key_of("sex=sex-1")] == "sex=sex-1"
    assert train.labels.mean() == pytest.approx(stats["positive_rate_train"])


def test_a_damaged_csv_is_a_data_error_with_its_line(tmp_path, monkeypatch):
    _csv(tmp_path / census._TRAIN, 5, 1)
    (tmp_path / census._TEST).write_text("1, 2, 3\n")
    monkeypatch.setattr(census, "fetch", lambda name, quiet=False: tmp_path)
    with pytest.raises(DataError, match=r"census_income_1994_1995_test.csv:1: 3 columns, expected 42"):
        census.prepare()
