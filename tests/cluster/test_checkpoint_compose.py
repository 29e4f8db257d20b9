"""Checkpoints composed with the other features on real clusters (issue 30): relocation (no row in
TRANSFER is lost to a checkpoint) and node aggregation (rounds are in a checkpoint whole)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import pskv
from pskv.checkpoint import format as fmt

sys.path.insert(0, str(Path(__file__).parent))
from checkpoint_compose_scenarios import AGG_ROWS, CHECKPOINTS, ROUNDS, ROWS, THREADS  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCENARIOS = str(Path(__file__).parent / "checkpoint_compose_scenarios.py")


def _run(cluster_factory, nodes: int, args: list[str], **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], failure_timeout=5.0, **kwargs)
    status = cluster.wait(timeout=120)
    assert status == 0, f"status {status}\n{cluster.logs_tail()}"
    return cluster


def test_checkpoints_while_every_node_localizes_hold_every_row_once(cluster_factory, tmp_path):
    """2 nodes, Relocate(lease=0): a thread per node localizes 200 random keys every millisecond while
    the main threads checkpoint 8 times. Every checkpoint is complete and loads every row with its
    value (a row in TRANSFER was in neither node's file: 'N of 2000 rows in no file')."""
    ckpt = tmp_path / "ckpt"
    cluster = _run(cluster_factory, 2, ["relocate", str(ckpt)])
    assert [(s, done) for s, _, done in fmt.steps(ckpt)] == [(s, True) for s in range(1, CHECKPOINTS + 1)]
    expected = np.repeat(np.arange(ROWS, dtype=np.float32)[:, None], 2, axis=1)
    for step, path, _ in fmt.steps(ckpt):
        assert (pskv.load_checkpoint(path)["w"].values == expected).all(), step
    assert int(cluster.output(0).split("moves ")[1].split()[0]) >= 3 * CHECKPOINTS


@pytest.mark.parametrize("mode", ["bsp", "async"])
def test_aggregated_table_checkpoint_holds_whole_rounds(cluster_factory, tmp_path, mode):
    """NodeAggregate tables (2 nodes x 2 workers pushing 1 per row per round) checkpointed by the main
    threads while the workers go on: each row holds a whole number of rounds, at least those every
    worker of a node completed before the call, and exactly what the rows were when the files
    began to be written (rounds applied while writing tore the cut)."""
    ckpt = tmp_path / "ckpt"
    cluster = _run(cluster_factory, 2, ["aggregate", str(ckpt), mode])
    before = [int(cluster.output(r).split("before ")[1].split()[0]) for r in range(2)]
    values = pskv.load_checkpoint(ckpt)["g"].values[:, 0]
    for rank in range(2):
        start = np.load(tmp_path / f"start-{rank}.npy")
        assert len(start) == AGG_ROWS // 2
        assert (values[start[:, 0].astype(int)] == start[:, 1]).all(), (rank, values, start)
    per_round = 2 * THREADS if mode == "bsp" else THREADS  # BSP: every node's sums together
    least = 2 * THREADS * max(before) if mode == "bsp" else THREADS * sum(before)
    assert (values % per_round == 0).all() and (values >= least).all(), (values, before)
    assert values.max() <= 2 * THREADS * ROUNDS


def test_checkpoint_with_backups_and_readers_holds_every_row(cluster_factory, tmp_path):
    """backups=1: rows a node localized are copies on it (it reads them; server.readers), equal to the
    head's; the checkpoint is complete and every row holds the sum of the known pushes."""
    from checkpoint_compose_scenarios import reader_pushes

    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, ["readers", str(ckpt)], backups=1)
    expected = np.zeros(AGG_ROWS * 10, np.float32)
    for rank in range(2):
        np.add.at(expected, reader_pushes(rank).reshape(-1), 1)
    assert (pskv.load_checkpoint(ckpt)["w"].values[:, 0] == expected).all()
