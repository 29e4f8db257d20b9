"""The checkpoint format (pskv.checkpoint.format) and the write gate, without a cluster: files and
checksums, damaged checkpoints, which checkpoint a directory means, keep=, and load() assembling a
table from several nodes' files."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import pskv
from pskv.checkpoint import format as fmt
from pskv.checkpoint.collective import Gate

pytestmark = pytest.mark.timeout(60)


def _checkpoint(directory, step=1, rows=10, dim=3) -> tuple:
    """A 2-node checkpoint of table 'w' written by hand: node 0 holds even keys, node 1 odd ones and
    a replica of key 4 (whose replica row wins over node 0's home row)."""
    path = fmt.step_dir(directory, step)
    path.mkdir(parents=True)
    values = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim)
    acc = values * 10
    files, parts = {}, []
    for node in (0, 1):
        keys = np.arange(node, rows, 2, dtype=np.int64)
        names = {n: f"t0.node{node}.{n}.npy" for n in ("keys", "rows", "state")}
        home = values[keys].copy()
        if node == 0:
            home[keys == 4] = -1  # the manager's unused home row of a replicated key
        for n, array in (("keys", keys), ("rows", home), ("state", acc[keys])):
            files[names[n]] = fmt.write_array(path / names[n], array)
        parts.append({**names, "count": len(keys)})
    rep = {"keys": "t0.replicas.keys.npy", "rows": "t0.replicas.rows.npy", "state": None, "count": 1}
    files[rep["keys"]] = fmt.write_array(path / rep["keys"], np.array([4], np.int64))
    files[rep["rows"]] = fmt.write_array(path / rep["rows"], values[[4]])
    manifest = {"format": fmt.FORMAT, "version": fmt.VERSION, "pskv": "test", "created": time.time(), "step": step,
                "nodes": 2, "members": [0, 1], "epoch": 1, "clock": 7, "extra": {"epoch": 5}, "files": files,
                "tables": {"w": {"name": "w", "rows": rows, "dim": dim, "dtype": "float32",
                                 "updater": {"name": "adagrad", "lr": 0.1, "eps": 1e-10, "initial_accumulator": 0.0},
                                 "init": {"init": "Zeros"}, "consistency": "async", "state_width": dim,
                                 "state_layout": {"accumulator": [0, dim]}, "files": parts, "replicas": rep}}}
    fmt.write_json(path / fmt.MANIFEST, manifest)
    return path, values, acc


def test_write_array_is_plain_npy_with_a_crc_of_the_whole_file(tmp_path):
    array = np.random.default_rng(0).normal(size=(1000, 7)).astype(np.float32)
    meta = fmt.write_array(tmp_path / "a.npy", array)
    assert (np.load(tmp_path / "a.npy") == array).all()
    import zlib
    data = (tmp_path / "a.npy").read_bytes()
    assert meta == {"crc32": zlib.crc32(data), "bytes": len(data)}


def test_load_assembles_every_node_file_and_the_replicas(tmp_path):
    path, values, acc = _checkpoint(tmp_path)
    tables = pskv.load_checkpoint(tmp_path)  # the directory: its newest complete checkpoint
    w = tables["w"]
    assert (w.values == values).all() and w.values.shape == (10, 3)
    assert set(w.state) == {"accumulator"} and (w.state["accumulator"][[0, 1, 2, 3, 5]] == acc[[0, 1, 2, 3, 5]]).all()
    assert w.spec["updater"]["name"] == "adagrad" and w.spec["rows"] == 10
    info = fmt.info(path, fmt.read_manifest(path))
    assert info.step == 1 and info.clock == 7 and info.tables == ["w"]


def test_resolve_takes_the_newest_complete_checkpoint(tmp_path):
    _checkpoint(tmp_path, 1)
    newest, _, _ = _checkpoint(tmp_path, 2)
    fmt.step_dir(tmp_path, 3).mkdir()  # a node died while writing it: no manifest
    assert fmt.resolve(tmp_path) == newest
    assert fmt.resolve(newest) == newest
    with pytest.raises(pskv.CheckpointError, match="incomplete, no manifest.json: checkpoint-000001"):
        (fmt.step_dir(tmp_path, 1) / fmt.MANIFEST).unlink()
        (fmt.step_dir(tmp_path, 2) / fmt.MANIFEST).unlink()
        fmt.resolve(tmp_path)
    with pytest.raises(pskv.CheckpointError, match="does not exist"):
        fmt.resolve(tmp_path / "nope")


@pytest.mark.parametrize("damage,words", [
    ("truncate", "truncated"), ("flip", "fails its checksum"), ("delete", "is missing"),
])
def test_damaged_files_are_named(tmp_path, damage, words):
    path, _, _ = _checkpoint(tmp_path)
    victim = path / "t0.node1.rows.npy"
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-5])
    elif damage == "flip":
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0xFF
        victim.write_bytes(bytes(data))
    else:
        victim.unlink()
    with pytest.raises(pskv.CheckpointError, match=words) as err:
        pskv.load_checkpoint(path)
    assert "t0.node1.rows.npy" in str(err.value) and "older one" in str(err.value)


def test_manifest_of_another_version_or_not_a_manifest(tmp_path):
    path, _, _ = _checkpoint(tmp_path)
    manifest = json.loads((path / fmt.MANIFEST).read_text())
    (path / fmt.MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(pskv.CheckpointError, match="format version 99"):
        pskv.load_checkpoint(path)
    (path / fmt.MANIFEST).write_text("{not json")
    with pytest.raises(pskv.CheckpointError, match="cannot be read"):
        pskv.load_checkpoint(path)


def test_prune_keeps_the_newest_complete_and_drops_older_incomplete(tmp_path):
    for step in (1, 2, 3):
        _checkpoint(tmp_path, step)
    fmt.step_dir(tmp_path, 4).mkdir()  # incomplete, newer than every complete one: a checkpoint in progress
    (fmt.step_dir(tmp_path, 0)).mkdir()  # incomplete and old: garbage
    removed = fmt.prune(tmp_path, 2)
    assert sorted(p.name for p in removed) == ["checkpoint-000000", "checkpoint-000001"]
    assert [(s, done) for s, _, done in fmt.steps(tmp_path)] == [(2, True), (3, True), (4, False)]


def test_describe_lists_tables_and_verifies(tmp_path):
    path, _, _ = _checkpoint(tmp_path)
    lines = fmt.describe(tmp_path)
    assert "step 1, 2 node(s), clock 7" in lines[0] and "all 8 files match" in lines[1]
    assert "table 'w': 10 x 3 float32, updater adagrad, with state, 2 node file(s), replicated keys" in lines[2]


def test_gate_holds_writes_and_close_waits_for_a_write_in_progress():
    gate = Gate()
    gate.enter(lambda: None)  # a write in progress
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (gate.close(), closed.set()))
    closer.start()
    time.sleep(0.1)
    assert not closed.is_set()  # close() waits for it
    gate.leave()
    closer.join(5)
    assert closed.is_set()
    entered = threading.Event()
    writer = threading.Thread(target=lambda: (gate.enter(lambda: None), entered.set(), gate.leave()))
    writer.start()
    time.sleep(0.1)
    assert not entered.is_set()  # held while closed
    gate.open()
    writer.join(5)
    assert entered.is_set()


def test_gate_wait_raises_the_nodes_failure():
    gate = Gate()
    gate.close()

    def failed():
        raise pskv.NodeFailure("node 1 died", 1)

    with pytest.raises(pskv.NodeFailure):
        gate.enter(failed)
