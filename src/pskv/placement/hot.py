"""Which keys of a table to replicate on every node (NuPS hot keys)."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..options import Replicate
from ..store.spec import TableSpec, check_keys


def hot_keys(spec: TableSpec, replicate: Replicate) -> np.ndarray:
    """(m,) sorted keys to replicate: `replicate.keys`, or the `hottest` most frequent rows by `frequencies`."""
    if replicate.hottest is not None:
        freq = np.asarray(replicate.frequencies)
        if freq.shape != (spec.rows,):
            raise ShapeError(f"table {spec.name!r}: frequencies has shape {freq.shape}, expected ({spec.rows},)")
        return np.sort(np.argsort(-freq, kind="stable")[: int(replicate.hottest)]).astype(np.int64)
    return np.unique(check_keys(spec, replicate.keys, "replicate"))
