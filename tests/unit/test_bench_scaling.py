"""benchmarks/bench_scaling.py's traffic model on cases that can be worked out by hand (no cluster)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_scaling as bs  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_classic_two_nodes_with_many_draws_sends_four_messages_and_half_the_rows():
    """Uniform keys, every key drawn: a node asks the other for its half, as requester and as server."""
    op = bs.Op("x", "t", 100, 4, 100_000, "uniform")
    m = bs.classic(op, 2)
    assert m["messages"] == pytest.approx(4.0)
    assert m["bytes"] == pytest.approx(4 * 40 + 50 * (8 + 8 + 16 + 16))


def test_aggregate_halves_the_messages_and_replication_adds_a_sync_per_peer():
    op = bs.Op("x", "t", 1_000, 8, 50_000, "uniform")
    c, a = bs.classic(op, 4), bs.aggregated(op, 4)
    assert a["messages"] == pytest.approx(c["messages"] / 2)
    hot = np.arange(10)
    r = bs.classic(op, 4, hot)
    assert r["messages"] == pytest.approx(c["messages"] + 2 * 3)  # REPLICA_SYNC + ACK to 3 peers


def test_relocation_with_full_locality_sends_nothing():
    op = bs.Op("x", "t", 1_000, 8, 500, "uniform")
    m = bs.relocated(op, 4, locality=1.0)
    assert m["messages"] == pytest.approx(0.0, abs=1e-9) and m["bytes"] == pytest.approx(0.0, abs=1e-6)
    assert bs.relocated(op, 4, locality=0.5)["bytes"] < bs.classic(op, 4)["bytes"]
