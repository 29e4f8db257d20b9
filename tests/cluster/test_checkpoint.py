"""Checkpoints on real clusters: saved by 3 nodes and restored bit for bit on 2 and on 1 (other key
ranges), a consistent cut while every node pushes, a node killed while writing one (the previous
checkpoint stays whole), and a restored table declared differently (TableMismatch on every node)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pskv
from pskv.checkpoint import format as fmt

sys.path.insert(0, str(Path(__file__).parent))
from checkpoint_scenarios import ADAGRAD, ROWS  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
SCENARIOS = str(Path(__file__).parent / "checkpoint_scenarios.py")


def _run(cluster_factory, nodes: int, scenario: str, out: Path, ckpt: Path, expect: int = 0, **kwargs):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, scenario, str(out), str(ckpt)],
                              failure_timeout=5.0, **kwargs)
    status = cluster.wait(timeout=120)
    assert (status == 0) == (expect == 0), f"status {status}\n{cluster.logs_tail()}"
    return cluster


def test_three_nodes_save_two_and_one_restore_bit_for_bit(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 3, "save", tmp_path, ckpt)
    saved = pskv.load_checkpoint(ckpt)
    assert (saved["w"].values == np.load(tmp_path / "w.npy")).all()  # the cut: every push before, none after
    assert (saved["c"].values == np.load(tmp_path / "c.npy")).all()
    assert saved["w"].state["accumulator"].min() >= 0.1 and saved["w"].state["accumulator"].max() > 0.1
    cluster = _run(cluster_factory, 2, "restore", tmp_path, ckpt)
    assert "extra {'epoch': 7}" in cluster.output(0)
    for name in ("w", "c"):
        assert (np.load(tmp_path / f"{name}-restored-2.npy") == saved[name].values).all(), name
    again = pskv.load_checkpoint(tmp_path / "again-2")  # rows and updater state came back exact
    assert (again["w"].state["accumulator"] == saved["w"].state["accumulator"]).all()
    assert (again["w"].values == saved["w"].values).all()
    with pskv.init(restore=str(ckpt)) as node:  # and on one node (a plain process)
        w = node.table("w", ROWS, 4, updater=ADAGRAD)
        assert (w.pull(np.arange(ROWS)) == saved["w"].values).all()


def test_checkpoint_is_a_consistent_cut_while_every_node_pushes(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, "cut", tmp_path, ckpt)
    column = pskv.load_checkpoint(ckpt)["c"].values
    for rank in (0, 1):
        before, after = map(int, (tmp_path / f"cut-{rank}.txt").read_text().split())
        count = int(column[:, rank].sum())
        assert before <= count <= after, (rank, before, count, after)
        prefix = np.bincount(np.arange(count) % ROWS, minlength=ROWS)  # the first `count` pushes, no hole
        assert (column[:, rank] == prefix).all(), rank


def test_node_killed_while_writing_leaves_the_previous_checkpoint_whole(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    cluster = _run(cluster_factory, 3, "die", tmp_path, ckpt, expect=1)
    assert "first checkpoint-000001" in cluster.output(0)
    found = [(s, done) for s, _, done in fmt.steps(ckpt)]
    assert found == [(1, True), (2, False)], found
    assert fmt.resolve(ckpt).name == "checkpoint-000001"
    first = pskv.load_checkpoint(ckpt)
    with pskv.init(restore=str(ckpt)) as node:
        w = node.table("w", ROWS, 4, updater=ADAGRAD)
        assert (w.pull(np.arange(ROWS)) == first["w"].values).all()


def test_restored_table_declared_differently_fails_on_every_node(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, "save", tmp_path, ckpt)
    cluster = _run(cluster_factory, 3, "mismatch", tmp_path, ckpt, expect=1)
    for rank in range(3):
        assert "TableMismatch: table 'w' differs from checkpoint" in cluster.output(rank), cluster.logs_tail()
        assert "updater" in cluster.output(rank)


def test_corrupted_checkpoint_stops_every_node_before_any_table(cluster_factory, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, "save", tmp_path, ckpt)
    victim = next(fmt.resolve(ckpt).glob("t0.node1.rows.npy"))
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x55
    victim.write_bytes(bytes(data))
    cluster = _run(cluster_factory, 2, "restore", tmp_path, ckpt, expect=1)
    for rank in range(2):
        assert "CheckpointError" in cluster.output(rank) and "t0.node1.rows.npy fails its checksum" in \
            cluster.output(rank), cluster.logs_tail()


def test_launch_restore_and_the_checkpoint_commands(cluster_factory, tmp_path):
    """`pskv launch -n 4 --restore DIR` (PSKV_RESTORE) brings back a 2-node checkpoint; `pskv checkpoint
    list` and `inspect` show it and verify its checksums."""
    ckpt = tmp_path / "ckpt"
    _run(cluster_factory, 2, "save", tmp_path, ckpt)
    proc = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", "4", "--restore", str(ckpt), "--",
                           sys.executable, SCENARIOS, "restore", str(tmp_path), "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (np.load(tmp_path / "w-restored-4.npy") == np.load(tmp_path / "w.npy")).all()
    listing = subprocess.run([sys.executable, "-m", "pskv", "checkpoint", "list", str(ckpt)], capture_output=True,
                             text=True, timeout=60)
    assert "checkpoint-000001  epoch 7 (step 1), 2 node(s), tables c, w" in listing.stdout, listing.stdout + listing.stderr
    inspect = subprocess.run([sys.executable, "-m", "pskv", "checkpoint", "inspect", str(ckpt)], capture_output=True,
                             text=True, timeout=60)
    assert inspect.returncode == 0 and "checksums: all 10 files match" in inspect.stdout, inspect.stdout
    assert "table 'w': 997 x 4 float32, updater adagrad, with state, 2 node file(s)" in inspect.stdout
    (fmt.resolve(ckpt) / "t1.node0.rows.npy").write_bytes(b"garbage")
    bad = subprocess.run([sys.executable, "-m", "pskv", "checkpoint", "inspect", str(ckpt)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "t1.node0.rows.npy has 7 bytes" in bad.stderr, bad.stderr
