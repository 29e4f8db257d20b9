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
