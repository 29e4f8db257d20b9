"""Hot-key replication (pskv.Replicate) composed with checkpoints (issue 30): a restore with other
replicated keys gives every key its saved value and state."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import pskv

sys.path.insert(0, str(Path(__file__).parent))
from replica_scenarios import ADAGRAD, ROWS  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCENARIOS = str(Path(__file__).parent / "replica_scenarios.py")


def _run(cluster_factory, nodes: int, *args: str):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], failure_timeout=5.0)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("saved_keys,nodes,keys", [
    ("none", 2, "1,2"),  # keys added to the replicated set, same node count
    ("1,2,9", 3, "2,5"),  # 1 and 9 come home, 5 is added, 2 stays; another node count
], ids=["added", "changed-other-node-count"])
def test_restore_with_other_replicated_keys_is_exact(cluster_factory, tmp_path, saved_keys, nodes, keys):
    """Every key reads its saved value on every node after the restore, and a push after it applies to
    the saved value and Adagrad state (so the replicas got the saved state too)."""
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, "save", str(tmp_path), str(ckpt), saved_keys)
    saved = pskv.load_checkpoint(ckpt)
    k = np.arange(ROWS, dtype=np.float32)[:, None]
    assert (saved["a"].values == np.repeat(3 * (k + 1), 2, axis=1)).all()  # (k + 1)(1 + 2)
    _run(cluster_factory, nodes, "restore", str(tmp_path), str(ckpt), keys)
    for r in range(nodes):
        for name in ("a", "g"):
            restored = np.load(tmp_path / f"{name}-restored-{r}.npy")
            assert (restored == saved[name].values).all(), (name, r, restored, saved[name].values)
    expected = {"a": saved["a"].values + 1}
    g, acc = saved["g"].values.copy(), saved["g"].state["accumulator"].copy()
    ADAGRAD.apply(g, acc, np.arange(ROWS), np.full((ROWS, 2), 0.5, np.float32))
    expected["g"] = g
    hot = np.isin(np.arange(ROWS), [int(x) for x in keys.split(",")])
    for r in range(nodes):
        for name in ("a", "g"):
            after = np.load(tmp_path / f"{name}-after-{r}.npy")
            # node 0 pushed; another node's replica adds node 0's change (float32) to the saved value
            synced = saved[name].values + (expected[name] - saved[name].values)
            want = np.where(hot[:, None] & (r != 0), synced, expected[name])
            assert (after == want).all(), (name, r, after, want)
    again = pskv.load_checkpoint(tmp_path / "again")  # node 0's replicas and every home row
    assert (again["g"].values == expected["g"]).all() and (again["a"].values == expected["a"]).all()
    assert (again["g"].state["accumulator"] == acc).all()
