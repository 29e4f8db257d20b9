"""Sparse tables (key_space="uint64") under elastic membership without backups: a node that leaves
hands each key range it manages, every key with its row and updater state, to the member that
manages the fewest (server.handoff, SparseShard.give) and forwards what still reaches it; a node
that joins holds no key until a leave hands it a range. Every row then equals a replay of every
acknowledged push (Adagrad: the state moved too), pull_range returns every written key once, and a
checkpoint taken after the leave restores onto 2 nodes exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import replay_pushes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCENARIOS = Path(__file__).with_name("sparse_elastic_scenarios.py")
sys.path.insert(0, str(SCENARIOS.parent))
from sparse_elastic_scenarios import COLUMNS, pool  # noqa: E402


def _counts(out: Path, ranks) -> dict[int, np.ndarray]:
    """rank -> (pool size,) how many of its pushes to each pool key were acknowledged (and every one sent was)."""
    n, counts = len(pool()), {}
    for r in ranks:
        sent = np.bincount(np.fromfile(out / f"sent-{r}", np.int64), minlength=n)
        acked = np.bincount(np.fromfile(out / f"acked-{r}", np.int64), minlength=n)
        assert (sent == acked).all(), f"node {r} did not see all its pushes complete"
        counts[r] = acked
    return counts


def _check_exact(out: Path, updater: str, counts: dict[int, np.ndarray], extra: dict[int, int] | None = None,
                 keys_name: str = "final") -> None:
    """pull_range(0, 2**64) holds exactly the pushed pool keys, once each, sorted; each column r of each
    row equals a replay of node r's acknowledged pushes to it (plus `extra[r]` more)."""
    keys, rows = np.load(out / f"{keys_name}-keys.npy"), np.load(out / f"{keys_name}-rows.npy")
    written = sum(counts.values()) > 0
    assert np.array_equal(keys, pool()[written]), "pull_range does not return every written key exactly once"
    replay = replay_pushes(updater, COLUMNS, int(max(c.max() for c in counts.values())) + 1)
    for r, c in counts.items():
        wrong = rows[:, r] != replay[c[written] + (extra or {}).get(r, 0)]
        assert not wrong.any(), f"column {r}: {int(wrong.sum())} rows differ from a replay of its pushes"


def _held(text: str, marker: str) -> int:
    return int(text.split(marker)[1].split("holds ")[1].split()[0])


def test_a_node_leaves_a_sparse_table_during_a_push_storm_and_a_checkpoint_restores_onto_two(cluster_factory,
                                                                                              tmp_path):
    """3 nodes push random uint64 keys without pause; node 1 leaves (its range goes whole to one of the
    others) while 0 and 2 go on; exact rows, every key once; a checkpoint after the leave restores
    onto 2 nodes exactly (rows and Adagrad state: one more push moves each row as a replay does)."""
    out, ckpt, updater = tmp_path / "out", tmp_path / "ckpt", "adagrad"
    out.mkdir()
    cluster = cluster_factory(3, [sys.executable, str(SCENARIOS), "storm", str(out), updater, "1", "1", str(ckpt)])
    assert cluster.wait(timeout=180) == 0, cluster.logs_tail()
    assert "node 1 left after" in cluster.output(1), cluster.logs_tail()
    for rank in (0, 2):
        assert "membership epoch 2, members [0, 2]" in cluster.output(rank), cluster.logs_tail()
        assert "checkpoint taken" in cluster.output(rank), cluster.logs_tail()
    counts = _counts(out, range(3))
    _check_exact(out, updater, counts)
    held = [_held(cluster.output(r), "storm done") for r in (0, 2)]
    assert sum(held) == len(np.load(out / "final-keys.npy")), held  # every written key on one member only
    restored = cluster_factory(2, [sys.executable, str(SCENARIOS), "restore", str(out), updater, str(ckpt)],
                               restore=str(ckpt))
    assert restored.wait(timeout=120) == 0, restored.logs_tail()
    _check_exact(out, updater, counts, extra={0: 1}, keys_name="after")


def test_a_node_joins_a_sparse_table_then_another_leaves(cluster_factory, tmp_path):
    """2 nodes push; node 2 joins (it holds no key: it manages no range yet) and pushes too; then node
    1 leaves and its range goes to node 2 (it manages the fewest); exact rows, every key once."""
    from helpers import wait_or_dump, wait_until
    out, updater = tmp_path / "out", "adagrad"
    out.mkdir()
    command = [sys.executable, str(SCENARIOS), "storm", str(out), updater, "2", "1"]
    first = cluster_factory(2, command)
    for rank in range(2):
        wait_until(lambda: "storm running" in first.output(rank), 60, lambda: first.logs_tail())
    joiner = cluster_factory(1, command, join=first.coordinator_address, env={"PSKV_SECRET_FILE": first.secret_file})
    for cluster in (first, joiner):
        assert wait_or_dump(cluster, 150) == 0, first.logs_tail() + joiner.logs_tail()
    text = joiner.output(0)
    assert "storm started as node 2, members [0, 1, 2], holds 0 keys, manages []" in text, text
    assert "node 1 left after" in first.output(1), first.logs_tail()
    assert "members [0, 2], holds" in text and "manages [(9223372036854775808, 18446744073709551616)]" in text, text
    for rank in (0,):
        assert "node 2 joined; membership epoch 2" in first.output(rank), first.logs_tail()
        assert "node 1 left; membership epoch 3, members [0, 2]" in first.output(rank), first.logs_tail()
    counts = _counts(out, range(3))
    _check_exact(out, updater, counts)
    held = [_held(first.output(0), "storm done"), _held(text, "storm done")]
    assert sum(held) == len(np.load(out / "final-keys.npy")) and min(held) > 0, held
