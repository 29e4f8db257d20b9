"""--checkpoint-dir / --checkpoint-every / --resume of kge and word2vec: a run saves a checkpoint
every few epochs; another run, on another node count, goes on after the newest complete one and
reports only the epochs left (mf: tests/fault/test_resume.py, with a node killed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]


def _run(app: str, nodes: int, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", app, "--nodes", str(nodes), "--", *args,
                           "--progress", "none"], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _epochs(out: str) -> list[int]:
    return [int(e) for e in re.findall(r"epoch +(\d+) ", out)]


@pytest.mark.long
def test_kge_resumes_on_another_node_count(tmp_path):
    ckpt = tmp_path / "ckpt"
    args = ["--data", "nations", "--epochs", "6", "--dim", "32", "--eval-every", "0", "--checkpoint-dir", str(ckpt)]
    first = _run("kge", 2, *args, "--checkpoint-every", "3")
    assert _epochs(first) == [1, 2, 3, 4, 5, 6] and "checkpoint-000002 (epoch 6)" in first
    import shutil
    shutil.rmtree(ckpt / "checkpoint-000002")  # as if the run died in epoch 4, 5 or 6
    second = _run("kge", 3, *args, "--resume")
    assert "resumed from" in second and "after epoch 3" in second
    assert _epochs(second) == [4, 5, 6], second
    mrr = [float(re.search(r"test MRR (\d\.\d+)", out).group(1)) for out in (first, second)]
    assert abs(mrr[0] - mrr[1]) < 0.05, mrr


def test_word2vec_resume_without_checkpoint_dir_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pskv.apps.word2vec", "--data", "lapse-toy", "--resume",
                           "--progress", "none"], capture_output=True, text=True, timeout=100)
    assert proc.returncode != 0 and "--resume needs --checkpoint-dir" in proc.stderr, proc.stderr[-2000:]


def test_word2vec_resumes_and_keeps_k_checkpoints(tmp_path):
    ckpt = tmp_path / "ckpt"
    args = ["--data", "lapse-toy", "--epochs", "4", "--dim", "20", "--checkpoint-dir", str(ckpt), "--keep", "2"]
    first = _run("word2vec", 2, *args)
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint-000003", "checkpoint-000004"]
    import shutil
    shutil.rmtree(ckpt / "checkpoint-000004")
    second = _run("word2vec", 1, *args, "--resume")
    assert _epochs(second) == [4], second
    loss = [float(re.search(r"loss [\d.]+ in epoch \d+, ([\d.]+) in epoch 4", out).group(1)) for out in (first, second)]
    assert abs(loss[0] - loss[1]) < 0.05 * loss[0], loss
