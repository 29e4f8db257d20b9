"""Sparse tables (key_space="uint64") with backups: a range head is SIGKILLed while every node
pushes random uint64 keys; the survivors finish, every key equals the replay of the acknowledged
pushes of every node (the dead one's: at least its acknowledged, at most what it sent), every
backup copy equals its head, pull_range returns every written key once, and the checkpoint taken
after the failover restores exactly on a new cluster with backups (tests/fault/sparse_ft_scenarios.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import replay_pushes, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

SCENARIOS = str(Path(__file__).parent / "sparse_ft_scenarios.py")
NODES, VICTIM = 3, 1


def _scenarios():
    sys.path.insert(0, str(Path(__file__).parent))
    import sparse_ft_scenarios
    return sparse_ft_scenarios


def _counts(out: Path, name: str, rank: int, pool: int) -> np.ndarray:
    return np.bincount(np.fromfile(out / f"{name}-{rank}", np.int64), minlength=pool)


@pytest.mark.parametrize("updater", ["add", "adagrad"])
def test_a_range_head_dies_during_a_sparse_push_storm(cluster_factory, tmp_path, updater):
    """3 nodes, backups=1: node 1 (head of range 1) is SIGKILLed mid-storm; node 2 promotes its
    copy of range 1 and node 0 fills as its new backup. Exact, per key and column."""
    sc = _scenarios()
    out = tmp_path / "out"
    out.mkdir()
    cluster = cluster_factory(NODES, [sys.executable, SCENARIOS, "storm", str(out), updater], backups=1,
                              failure_timeout=3.0)
    wait_until(lambda: "storm running" in cluster.output(VICTIM), 60,
               lambda: f"node {VICTIM} to be in its storm\n{cluster.logs_tail()}")
    cluster.kill(VICTIM)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    survivors = [r for r in range(NODES) if r != VICTIM]
    for rank in survivors:
        assert f"membership epoch 2, members {survivors}" in cluster.output(rank), cluster.logs_tail()

    pool = sc.pool()
    final = np.load(out / "final.npy")
    sent = {r: _counts(out, "sent", r, sc.POOL) for r in range(NODES)}
    acked = {r: _counts(out, "acked", r, sc.POOL) for r in range(NODES)}
    replay = replay_pushes(updater, NODES, int(max(s.max() for s in sent.values())))
    for r in range(NODES):
        col = final[:, r]
        if r != VICTIM:
            assert (sent[r] == acked[r]).all(), f"survivor {r} did not see all its pushes complete"
            assert (col == replay[acked[r]]).all(), f"node {r}: {int((col != replay[acked[r]]).sum())} keys differ"
        else:
            assert acked[r].sum() > 0
            ok = np.zeros(sc.POOL, bool)
            for m in range(int(sent[r].max()) + 1):
                ok |= (col == replay[m]) & (acked[r] <= m) & (m <= sent[r])
            assert ok.all(), f"dead node {r}: {int((~ok).sum())} keys lost an acknowledged push or got one twice"

    # pull_range: every written key once, sorted, with its row
    keys, rows = np.load(out / "range-keys.npy"), np.load(out / "range-rows.npy")
    written = np.zeros(sc.POOL, bool)
    for r in range(NODES):
        written |= (acked[r] > 0) if r != VICTIM else (final[:, r] != 0)
    assert np.array_equal(keys, np.sort(pool[written])), "pull_range does not hold every written key exactly once"
    order = np.argsort(pool)
    at = order[np.searchsorted(pool[order], keys)]
    assert np.array_equal(rows, final[at]), "pull_range's rows differ from pulls"

    # every backup copy: exactly its head's keys and rows
    bounds = [i * (1 << 64) // NODES for i in range(NODES + 1)]
    copies = sorted(out.glob("backup-*-keys.npy"))
    assert len(copies) == NODES, [p.name for p in copies]  # one copy of each range (B = 1), after the failover
    for path in copies:
        r = int(path.name.split("-")[2])
        inside = (keys >= np.uint64(bounds[r])) & (keys <= np.uint64(bounds[r + 1] - 1))
        ck, cr = np.load(path), np.load(str(path).replace("-keys", "-rows"))
        assert np.array_equal(ck, keys[inside]) and np.array_equal(cr, rows[inside]), f"{path.name} differs from its head"

    # the checkpoint taken after the failover restores exactly (onto 2 nodes with backups: heads and copies)
    restored = cluster_factory(2, [sys.executable, SCENARIOS, "restore", str(out), updater], backups=1,
                               restore=str(out / "ckpt"))
    assert restored.wait(timeout=120) == 0, restored.logs_tail()
    assert all("restored" in restored.output(r) for r in range(2)), restored.logs_tail()
