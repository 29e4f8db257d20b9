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
from checkpoint_compose_scenarios import CHECKPOINTS, ROWS  # noqa: E402

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
