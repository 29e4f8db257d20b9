"""Hot-key replication (pskv.Replicate) composed with checkpoints and elastic membership (issue 30):
a restore with other replicated keys gives every key its saved value and state; a node that joins
starts from the cluster's current values of the replicated keys and syncs with everyone after."""

from __future__ import annotations

import ast
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


def _reads(text: str, prefix: str) -> list[float]:
    return ast.literal_eval(text.split(prefix)[1].split("\n")[0].strip())


@pytest.mark.parametrize("nodes", [2, 1])
def test_a_joining_node_starts_from_the_current_replicas(cluster_factory, tmp_path, nodes):
    """Node 0 pushes 5 to hot key 0 (synced), a node joins, node 0 pushes 1 more: every node reads 6,
    the joiner 5 as it joins; the joiner's push of 100 to hot key 3 reaches every node (with one
    node at the start too)."""
    from helpers import wait_or_dump, wait_until
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, SCENARIOS, "join", str(out)]
    first = cluster_factory(nodes, command, failure_timeout=5.0)
    wait_until(lambda: (out / "ready").exists(), 60, lambda: first.logs_tail(30))
    joiner = cluster_factory(1, command, join=first.coordinator_address, env={"PSKV_SECRET_FILE": first.secret_file})
    for cluster in (first, joiner):
        assert wait_or_dump(cluster, 90) == 0, first.logs_tail(30) + joiner.logs_tail(30)
    text = joiner.output(0)
    assert _reads(text, f"members {list(range(nodes + 1))}, reads ")[0] == 5.0, text
    key3 = 10.0 + 100.0 + (2.0 if nodes > 1 else 0.0)
    want = [6.0, 0.0, 0.0, key3, 0.0, 0.0, 0.0, 0.0]
    for r in range(nodes):
        assert _reads(first.output(r), f"final {r} ") == want, first.logs_tail(30)
    assert _reads(text, f"final {nodes} ") == want, text


def test_a_node_leaves_with_unsynced_changes_and_a_node_joins_after(cluster_factory, tmp_path):
    """Node 1 pushes 7 to hot key 0 and leaves (replica syncs only when asked): node 0 reads 7; a node
    that joins later reads 7 too (node 0 answers for the changes of the node gone), then 8 with node 0's 1."""
    from helpers import wait_or_dump, wait_until
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, SCENARIOS, "leave", str(out)]
    first = cluster_factory(2, command, failure_timeout=5.0)
    wait_until(lambda: (out / "left").exists(), 60, lambda: first.logs_tail(30))
    joiner = cluster_factory(1, command, join=first.coordinator_address, env={"PSKV_SECRET_FILE": first.secret_file})
    for cluster in (first, joiner):
        assert wait_or_dump(cluster, 90) == 0, first.logs_tail(30) + joiner.logs_tail(30)
    assert _reads(first.output(0), "after the leave node 0 reads ")[0] == 7.0, first.logs_tail(30)
    assert "node 1 left" in first.output(1), first.logs_tail(30)
    text = joiner.output(0)
    assert _reads(text, "members [0, 2], reads ")[0] == 7.0, text
    want = [8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert _reads(first.output(0), "final 0 ") == want, first.logs_tail(30)
    assert _reads(text, "final 2 ") == want, text
