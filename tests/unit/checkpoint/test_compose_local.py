"""Checkpoints composed with the other features and with crashes (issue 30), without a cluster:
prune after the new checkpoint is durable, an evaluator whose checkpoint is pruned under it, one
decision of every node after a checkpoint's second barrier, and a manifest that refuses files
which do not hold every row exactly once."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from pskv.checkpoint import format as fmt

pytestmark = pytest.mark.timeout(60)


def _complete(directory, step: int) -> None:
    """A minimal complete checkpoint: a manifest with no tables."""
    path = fmt.step_dir(directory, step)
    path.mkdir(parents=True)
    fmt.write_json(path / fmt.MANIFEST, {"format": fmt.FORMAT, "version": fmt.VERSION, "created": time.time(),
                                         "step": step, "nodes": 1, "tables": {}, "files": {}, "extra": {}})


def test_prune_fsyncs_the_new_checkpoint_and_its_parent_before_removing_older_ones(tmp_path, monkeypatch):
    """keep=1 after a third checkpoint: checkpoint-000003 and the directory holding it are fsynced
    before checkpoint-000001 and -000002 are removed (else a crash could lose all three)."""
    for step in (1, 2, 3):
        _complete(tmp_path, step)
    events = []
    real_fsync, real_rmtree = os.fsync, shutil.rmtree

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rmtree(path, *args, **kwargs):
        events.append(("rmtree", os.path.realpath(path)))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    removed = fmt.prune(tmp_path, 1)
    assert sorted(p.name for p in removed) == ["checkpoint-000001", "checkpoint-000002"]
    first_removal = next(i for i, (what, _) in enumerate(events) if what == "rmtree")
    synced = {path for what, path in events[:first_removal] if what == "fsync"}
    assert os.path.realpath(tmp_path) in synced, events
    assert os.path.realpath(fmt.step_dir(tmp_path, 3)) in synced, events


def _with_table(directory, step: int, value: float, final: bool = False) -> None:
    """A complete 1-node checkpoint of table 'w' (4 x 1, every row `value`)."""
    path = fmt.step_dir(directory, step)
    path.mkdir(parents=True)
    files = {"w.keys.npy": fmt.write_array(path / "w.keys.npy", np.arange(4, dtype=np.int64)),
             "w.rows.npy": fmt.write_array(path / "w.rows.npy", np.full((4, 1), value, np.float32))}
    table = {"name": "w", "rows": 4, "dim": 1, "dtype": "float32", "updater": {"name": "add"}, "init": {},
             "consistency": "async", "state_width": 0, "files": [{"keys": "w.keys.npy", "rows": "w.rows.npy",
                                                                   "state": None, "count": 4}]}
    fmt.write_json(path / fmt.MANIFEST, {"format": fmt.FORMAT, "version": fmt.VERSION, "created": time.time(),
                                         "step": step, "nodes": 1, "tables": {"w": table}, "files": files,
                                         "extra": {"final": final}})


@pytest.mark.parametrize("first", ["rows", "manifest"], ids=["rows-removed-first", "manifest-removed-first"])
def test_evaluator_goes_on_when_keep_prunes_the_checkpoint_it_reads(tmp_path, capsys, first):
    """The run prunes checkpoint 1 (keep=1) while `pskv evaluate` reads it: the evaluator says so and
    evaluates checkpoint 2, the newest complete one, instead of dying with a traceback."""
    import pskv
    from pskv.checkpoint.watch import watch

    _with_table(tmp_path, 1, 1.0)

    def evaluate(path, manifest):
        if path.name == "checkpoint-000001":  # the run writes checkpoint 2 and prunes this one meanwhile
            _with_table(tmp_path, 2, 2.0, final=True)
            (path / ("w.rows.npy" if first == "rows" else fmt.MANIFEST)).unlink()
        return {"value": float(pskv.load_checkpoint(path)["w"].values[0, 0])}

    results = watch(tmp_path, evaluate, poll=0.01, timeout=10)
    assert results == [{"step": 2, "value": 2.0}]
    err = capsys.readouterr().err
    assert "checkpoint-000001 was removed (keep= of the run) while it was read" in err, err


def test_evaluator_raises_for_missing_files_of_the_newest_checkpoint(tmp_path):
    """Missing files of the newest checkpoint are damage, not pruning: the error is raised."""
    import pskv
    from pskv.checkpoint.watch import watch

    _with_table(tmp_path, 1, 1.0, final=True)
    (fmt.step_dir(tmp_path, 1) / "w.rows.npy").unlink()
    with pytest.raises(pskv.CheckpointError, match="w.rows.npy is missing"):
        watch(tmp_path, lambda p, m: {"value": pskv.load_checkpoint(p)["w"].values[0, 0]}, poll=0.01, timeout=10)


class _Nodes:
    """Two Checkpointers in threads of this process: a shared barrier (a generation count per node,
    so a node that skips a barrier pairs the wrong ones and the test sees it) and an epoch per node
    that a test changes after a given barrier."""

    def __init__(self, directory) -> None:
        import threading

        self.directory = directory
        self._barrier = threading.Barrier(2, timeout=10)
        self.passed = [0, 0]  # barriers each node passed
        self.epoch = [1, 1]
        self.change_at: dict[int, int] = {}  # node -> after how many barriers its epoch becomes 2

    def checkpointer(self, rank: int):
        from pskv.catalog import Catalog
        from pskv.checkpoint.collective import Checkpointer

        class Tracker:
            def drain(self, check, timeout):
                return True

        def barrier():
            self._barrier.wait()
            self.passed[rank] += 1
            if self.change_at.get(rank) == self.passed[rank]:
                self.epoch[rank] = 2

        return Checkpointer(rank, Catalog(rank), Tracker(), lambda: None, members=lambda: [0, 1], barrier=barrier,
                            flush_replicas=lambda: None, clock=lambda: 0, epoch=lambda: self.epoch[rank])


@pytest.mark.parametrize("first", [0, 1], ids=["decider-sees-it-first", "other-sees-it-first"])
def test_nodes_that_see_an_epoch_change_at_different_times_decide_alike(tmp_path, first):
    """A node died right after barrier 2 (backups): one node learns the new epoch before the other.
    Both must take the same decision (both complete, or both try again), never one of each: that
    desynchronised the barriers (a hang until collective_timeout, or CheckpointError)."""
    from helpers import together

    nodes = _Nodes(tmp_path)
    nodes.change_at = {first: 2, 1 - first: 3}  # after barrier 2 for one node, after barrier 3 for the other
    a, b = nodes.checkpointer(0), nodes.checkpointer(1)
    results = together(lambda: a.take(tmp_path), lambda: b.take(tmp_path), timeout=40)
    assert not any(isinstance(r, BaseException) for r in results), results
    assert results[0].step == results[1].step == (2 if first == 0 else 1), results
    assert nodes.passed[0] == nodes.passed[1]
    assert fmt.resolve(tmp_path) == results[0].path


def test_manifest_refuses_files_that_miss_a_row_and_keeps_older_checkpoints(node, tmp_path):
    """A row that is in no node's file (as a row in TRANSFER was) makes the checkpoint fail on every
    node with CheckpointError: no manifest, and keep=1 prunes nothing; the next one is complete."""
    import pskv
    from pskv import _hooks

    table = node.table("w", 10, 2)
    table.push(np.arange(10), np.ones((10, 2), np.float32)).wait(10)
    first = node.checkpoint(tmp_path, keep=1)
    shard = node.catalog.get("w").shard
    taken = []

    def lose_a_row(node, step, path):
        taken.append(shard.extract(np.array([3], np.int64)))

    with _hooks.installed("checkpoint.writing", lose_a_row):
        with pytest.raises(pskv.CheckpointError, match=r"table 'w': 1 of 10 rows are in no node's file"):
            node.checkpoint(tmp_path, keep=1)
    assert [(s, done) for s, _, done in fmt.steps(tmp_path)] == [(1, True), (2, False)]
    assert fmt.resolve(tmp_path) == first.path
    shard.insert(*taken[0])
    third = node.checkpoint(tmp_path, keep=1)
    assert third.step == 3 and [s for s, _, _ in fmt.steps(tmp_path)] == [3]
    assert (pskv.load_checkpoint(tmp_path)["w"].values == 1).all()


def test_coverage_allows_equal_copies_of_a_row_and_names_differing_ones(tmp_path):
    """A row in two node files (a backup reader's copy) is fine when rows and state are equal there."""
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    entry = {"rows": 6, "files": []}
    for node, keys in ((0, [0, 1, 2, 3]), (1, [2, 3, 4, 5])):
        keys = np.array(keys, np.int64)
        mine = rows[keys].copy()
        if node == 1:
            mine[1] += 1  # key 3 differs
        names = {n: f"t0.node{node}.{n}.npy" for n in ("keys", "rows", "state")}
        fmt.write_array(tmp_path / names["keys"], keys)
        fmt.write_array(tmp_path / names["rows"], mine)
        fmt.write_array(tmp_path / names["state"], rows[keys] * 2)
        entry["files"].append({**names, "count": len(keys)})
    assert fmt.coverage(tmp_path, "w", entry) == "table 'w': 1 rows differ between the node files holding them"
    assert fmt.coverage(tmp_path, "w", entry, window=4) == "table 'w': 1 rows differ between the node files holding them"
    entry["files"][1] = {**entry["files"][0]}  # node 0's files twice: keys 4 and 5 in none, equal copies of 0-3
    assert fmt.coverage(tmp_path, "w", entry, window=3) == "table 'w': 2 of 6 rows are in no node's file"
