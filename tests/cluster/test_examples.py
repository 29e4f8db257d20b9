"""The examples that README.md and docs/ show run as they say (tests/cluster/test_docs.py checks that every python
block of the docs is part of an example file that a test runs, or runs it itself)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"


def test_readme_quickstart_is_the_example_file():
    """The first python block of README.md is the body of examples/quickstart.py, verbatim."""
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert block.strip() in EXAMPLE.read_text()


@pytest.mark.parametrize("launch", [False, True])
def test_quickstart_runs_and_learns(launch):
    """The quickstart runs as written and ends closer to the true weights than it started."""
    cmd = [sys.executable, str(EXAMPLE)]
    if launch:
        cmd = [sys.executable, "-m", "pskv", "launch", "-n", "2", "--threads", "2", "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"mean \|w - w_true\| = ([\d.]+) \(started at ([\d.]+)\)", proc.stdout)
    assert m, proc.stdout
    assert float(m.group(1)) < 0.6 * float(m.group(2))
    assert ("[node 0]" in proc.stdout) == launch


CONSISTENCY = ROOT / "examples" / "consistency.py"


@pytest.mark.parametrize("nodes", [1, 2])
def test_consistency_example_counts_every_push(nodes):
    """Under SSP(1), after the barrier, key t holds one push per clock from thread t of every node."""
    cmd = [sys.executable, "-m", "pskv", "launch", "-n", str(nodes), "--", sys.executable, str(CONSISTENCY)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = f"[{5.0 * nodes}. {5.0 * nodes}.]".replace(".0.", ".")
    assert proc.stdout.count(want) == nodes, proc.stdout


CHECKPOINT = ROOT / "examples" / "checkpoint.py"


def test_checkpoint_example_saves_on_two_nodes_and_restores_on_three(tmp_path):
    """examples/checkpoint.py as the README shows it: 1 node alone, then 2 nodes save and 3 restore."""
    alone = subprocess.run([sys.executable, str(CHECKPOINT), str(tmp_path / "one")], capture_output=True, text=True,
                           timeout=100, cwd=ROOT)
    assert alone.returncode == 0 and "node 0/1: restored, extra {'epoch': 1}" in alone.stdout, alone.stdout + alone.stderr
    ckpt = str(tmp_path / "two")
    launch = [sys.executable, "-m", "pskv", "launch"]
    saved = subprocess.run([*launch, "-n", "2", "--", sys.executable, str(CHECKPOINT), ckpt], capture_output=True,
                           text=True, timeout=100, cwd=ROOT)
    assert saved.returncode == 0 and "[node 1] node 1: saved checkpoint-000001" in saved.stdout, saved.stdout + saved.stderr
    back = subprocess.run([*launch, "-n", "3", "--restore", ckpt, "--", sys.executable, str(CHECKPOINT), ckpt],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert back.returncode == 0 and "node 2/3: restored, extra {'epoch': 1}" in back.stdout, back.stdout + back.stderr
    means = set(re.findall(r"mean \|row\| ([\d.]+)", saved.stdout + back.stdout))
    assert len(means) == 1, means  # the same table everywhere


ELASTIC = ROOT / "examples" / "elastic.py"


def test_elastic_example_a_third_node_joins_with_launch_join(tmp_path):
    """`pskv launch -n 2 --verbose` of examples/elastic.py prints how to join; `pskv launch -n 1 --join` adds a
    node that takes exactly its share: 500 // 3 rows of each of the two key ranges."""
    launch = [sys.executable, "-m", "pskv", "launch"]
    err = open(tmp_path / "first.err", "w+")
    first = subprocess.Popen([*launch, "-n", "2", "--verbose", "--", sys.executable, str(ELASTIC)],
                             stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    try:
        address = None
        for _ in range(600):  # bounded: 60 s
            found = re.search(r"`PSKV_SECRET_FILE=(\S+) pskv launch -n K --join (\S+) ", Path(err.name).read_text())
            if found:
                secret, address = found.groups()
                break
            time.sleep(0.1)
        assert address, Path(err.name).read_text()
        joined = subprocess.run([*launch, "-n", "1", "--join", address, "--", sys.executable, str(ELASTIC)],
                                capture_output=True, text=True, timeout=100, cwd=ROOT,
                                env={**os.environ, "PSKV_SECRET_FILE": secret})
        out, _ = first.communicate(timeout=100)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        err.close()
    assert joined.returncode == 0 and "node 2 of [0, 1, 2] owns 332 rows" in joined.stdout, \
        joined.stdout + joined.stderr + "\n---- the first two nodes:\n" + out + Path(err.name).read_text()
    assert first.returncode == 0, out + Path(err.name).read_text()
    assert "[node 0] node 0 of [0, 1, 2] owns 334 rows" in out and "[node 1] node 1 of [0, 1, 2] owns 334 rows" in out, out


TORCH_DP = ROOT / "examples" / "torch_dp.py"


@pytest.mark.long(35)
def test_torch_example_learns_the_same_on_one_and_two_nodes():
    pytest.importorskip("torch")  # `make test` installs it
    one = subprocess.run([sys.executable, str(TORCH_DP)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert one.returncode == 0, one.stdout + one.stderr
    last = one.stdout.strip().splitlines()[-1]  # "node 0 epoch 2: accuracy 0.9xx"
    assert float(last.split()[-1]) > 0.9, one.stdout
    two = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", "2", "--", sys.executable, str(TORCH_DP)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert two.returncode == 0, two.stdout + two.stderr
    for rank in (0, 1):  # sync mode: the same weights as one process on the global batch
        assert f"[node {rank}] node {rank} {last.split(' ', 2)[2]}" in two.stdout, two.stdout


TORCH_MF = ROOT / "examples" / "torch_mf.py"


@pytest.mark.long(35)
def test_torch_mf_on_two_nodes_reaches_the_mf_apps_test_rmse():
    """examples/torch_mf.py (pskv.torch.Embedding, Adagrad on the servers) on 2 nodes, 8 epochs
    (0.896; 15 by default: 0.892), against `pskv run mf` (numpy, 30 epochs: 0.892) on the same
    MovieLens-100K split: within 0.01 test RMSE."""
    pytest.importorskip("torch")
    launch = [sys.executable, "-m", "pskv"]
    torch_mf = subprocess.run([*launch, "launch", "-n", "2", "--", sys.executable, str(TORCH_MF), "--epochs", "8"],
                              capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert torch_mf.returncode == 0, torch_mf.stdout + torch_mf.stderr
    mf = subprocess.run([*launch, "run", "mf", "--", "--data", "ml-100k", "--progress", "none"],
                        capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert mf.returncode == 0, mf.stdout + mf.stderr

    def rmse(text: str) -> float:
        return float(re.findall(r"test RMSE (\d\.\d+)", text)[-1])

    assert abs(rmse(torch_mf.stdout) - rmse(mf.stdout)) <= 0.01, (torch_mf.stdout[-500:], mf.stdout[-500:])


SPARSE = ROOT / "examples" / "sparse.py"


@pytest.mark.parametrize("nodes", [1, 2])
def test_sparse_example_finds_the_informative_features(nodes):
    """examples/sparse.py (sparse table, push_pull, Prox, filters, pull_range) recovers every informative
    hashed feature and no other, with L1 leaving many weights at exactly 0."""
    cmd = [sys.executable, str(SPARSE)]
    if nodes > 1:
        cmd = [sys.executable, "-m", "pskv", "launch", "-n", str(nodes), "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"(\d+) weights written, (\d+) non-zero; (\d+) of the 25 informative features found, (\d+) others",
                  proc.stdout)
    assert m, proc.stdout
    written, nonzero, found, others = map(int, m.groups())
    assert written == 501 and nonzero < 0.8 * written and found >= 23 and others == 0
