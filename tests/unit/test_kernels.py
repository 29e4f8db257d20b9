"""kernels.py: the numba kernels' small-array shortcuts give the same answers as the kernels."""

from __future__ import annotations

import numpy as np
import pytest

from pskv import kernels


@pytest.mark.parametrize("n", [1, 2, kernels._SMALL, kernels._SMALL + 1, 1000])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_key_range_is_min_and_max_on_both_paths(n, dtype):
    keys = np.random.default_rng(n).integers(-2**31, 2**31 - 1, n).astype(dtype)
    lo, hi = kernels.key_range(keys)
    assert (lo, hi) == (int(keys.min()), int(keys.max()))
    assert kernels._key_range(keys) == (lo, hi)  # the numba kernel agrees with the shortcut
