"""The lr app's dense key space (issue 31) on real clusters: the distinct training features as row ids
make the weight tables dense, so two processes on one host share them in memory and train without a
message, and the model is the one the uint64 (sparse) tables give, bit for bit, by original key."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from pskv.apps import lr_model
from pskv.data.sparse import SparseData, read_libsvm, write_libsvm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _synthetic(path, rows: int, seed: int, features: int) -> None:
    """Binary features drawn zipf-like from the first `features` of a fixed pool of 3000 hashed keys;
    labels from a sparse true weight vector (seeded: the same file every run)."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(99).normal(0, 1.5, 3000) * (np.random.default_rng(98).random(3000) < 0.1)
    p = 1.0 / np.arange(1, features + 1) ** 0.6
    cols = [np.unique(rng.choice(features, 10, p=p / p.sum())) for _ in range(rows)]
    margin = np.array([truth[c].sum() - 0.5 for c in cols])
    labels = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])])
    keys = np.concatenate(cols).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # spread over uint64
    write_libsvm(SparseData(labels, indptr, keys, None), path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Train on 2000 features; the test file also has 500 that training never saw (no row: weight 0)."""
    d = tmp_path_factory.mktemp("lrdense")
    _synthetic(d / "train.libsvm", 3000, 1, 2000)
    _synthetic(d / "test.libsvm", 1000, 2, 2500)
    return d / "train.libsvm", d / "test.libsvm"


def _run(files, tmp_path, name: str, *args: str, nodes: int, shared_memory: bool = True) -> dict:
    """`pskv run lr` to its end (on a timeout: SIGTERM, the launcher stops its nodes; SIGKILL 30 s
    later); returns its summary and the model it wrote."""
    train, test = files
    out = tmp_path / f"{name}.npz"
    env = {**os.environ, "PSKV_DATA_DIR": str(tmp_path / "data")}
    env.pop("PSKV_SHARED_MEMORY", None)  # (the launcher's default: on)
    if not shared_memory:
        env["PSKV_SHARED_MEMORY"] = "0"
    argv = [sys.executable, "-m", "pskv", "run", "lr", "--nodes", str(nodes), "--threads", "1", "--",
            "--data", str(train), "--test", str(test), "--progress", "none", "--l1", "2e-4", "--out", str(out), *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            text, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            text, _ = proc.communicate()
        raise AssertionError(f"{name}: no end after 180 s\n{text[-3000:]}") from None
    assert proc.returncode == 0, text[-3000:]
    head = re.search(r"objective (\d\.\d+), ([\d,]+) non-zero weights, [\d.]+ MiB sent in training "
                     r"\(([\d,]+) messages\)", text)
    last = re.search(r"(test AUC \d\.\d+ test logloss \d\.\d+)", text)
    keys = re.search(r"; ([\d,]+ dense keys|uint64 keys)", text)
    assert head and last and keys, text[-3000:]
    return {"objective": head.group(1), "nonzeros": int(head.group(2).replace(",", "")),
            "messages": int(head.group(3).replace(",", "")), "last": last.group(1), "keys": keys.group(1),
            "model": lr_model.load_model(out), "epochs": re.findall(r"epoch +\d+ +test_auc \S+ +objective \S+", text)}


def _same_model(a: dict, b: dict) -> None:
    np.testing.assert_array_equal(a["model"]["keys"], b["model"]["keys"])
    np.testing.assert_array_equal(a["model"]["weights"], b["model"]["weights"])
    same = ("objective", "nonzeros", "last", "epochs")
    assert [a[k] for k in same] == [b[k] for k in same]


@pytest.mark.long(90)
def test_dbpg_on_two_processes_shares_the_dense_tables_and_trains_the_uint64_model(files, tmp_path):
    """dbpg, 2 nodes x 1 thread, 5 blocks (not a power of 2: the workers' blocks and the server steps'
    key ranges must cut the same): each round's two pushes sum to the same float32 on either key
    space, so the models are equal bit for bit. Dense: a row id per training feature and the bias, no
    message in training (the other node's keys are read and written in shared memory); uint64: the
    keys the other node manages travel as messages, and so do the dense tables' with
    PSKV_SHARED_MEMORY=0 (a round's pushes must be applied before its server steps read them: a
    clock alone does not wait for an asynchronous dense table's pushes)."""
    features = len(np.unique(read_libsvm(files[0]).keys))
    args = ("--epochs", "3", "--blocks", "5")
    dense = _run(files, tmp_path, "dense", *args, nodes=2)
    sparse = _run(files, tmp_path, "sparse", *args, "--key-space", "uint64", nodes=2)
    wire = _run(files, tmp_path, "wire", *args, nodes=2, shared_memory=False)
    assert dense["keys"] == wire["keys"] == f"{features + 1:,} dense keys" and sparse["keys"] == "uint64 keys"
    assert len(dense["epochs"]) == 3
    _same_model(dense, sparse)
    _same_model(wire, sparse)
    assert dense["messages"] == 0 and sparse["messages"] > 0 and wire["messages"] > 0
    assert 0 < dense["nonzeros"] == len(dense["model"]["keys"])


@pytest.mark.long(40)
@pytest.mark.parametrize("algo", ["prox", "ftrl"])
def test_minibatch_algos_train_the_uint64_model(files, tmp_path, algo):
    """prox and ftrl on one worker (one push_pull at a time: a fixed order of updates): the same
    model on either key space, bit for bit; the model file predicts the test file's features,
    those unseen in training at weight 0, to the AUC the run reported (its histogram: within 2e-3)."""
    dense = _run(files, tmp_path, "dense", "--algo", algo, "--epochs", "3", "--batch", "200", nodes=1)
    sparse = _run(files, tmp_path, "sparse", "--algo", algo, "--epochs", "3", "--batch", "200",
                  "--key-space", "uint64", nodes=1)
    _same_model(dense, sparse)
    test = read_libsvm(files[1])
    assert np.isin(test.keys, dense["model"]["keys"], invert=True).any()  # (features training never saw)
    reported = float(dense["last"].split()[2])
    assert lr_model.auc(lr_model.predict(dense["model"], test), test.labels) == pytest.approx(reported, abs=2e-3)
