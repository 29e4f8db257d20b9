"""Randomized elastic membership: seeded clusters (2 or 3 nodes, add or adagrad) push without pause
while, five times over, a node joins and then a node drawn by the seed leaves (node 0 included: the
coordinator runs in the launcher); every row must equal a replay of every push, beside a CPU burner.

    make stress                                              # STRESS_ELASTIC_SEEDS seeds (default 12)
    PSKV_STRESS_SEED=7 .venv/bin/python -m pytest -m stress tests/stress/test_elastic_stress.py

The slice in `make test` is tests/cluster/test_elastic.py::test_nodes_join_and_leave_three_times_over_...
(seed 1), without the CPU burner.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "cluster"))
from test_elastic import join_leave_cycles  # noqa: E402

SEEDS = int(os.environ.get("STRESS_ELASTIC_SEEDS", "12"))
BASE = int(os.environ.get("PSKV_STRESS_SEED", "0"))


@pytest.mark.stress
@pytest.mark.timeout(300)
@pytest.mark.parametrize("index", range(SEEDS))
def test_join_leave_stress(cluster_factory, tmp_path, index):
    join_leave_cycles(cluster_factory, tmp_path, BASE * 1000 + 100 + index, rounds=5)
