"""The apps with --backups: a node is SIGKILLed in the middle of training; the survivors take over
its share of the data, every epoch still covers all of it, and the run ends with status 0."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _app(cluster_factory, app: str, nodes: int, *args: str, **kwargs):
    return cluster_factory(nodes, [sys.executable, "-m", f"pskv.apps.{app}", "--backups", "1", "--progress", "none",
                                   *args], backups=1, failure_timeout=3.0, **kwargs)


def _epochs(text: str) -> list[str]:
    return re.findall(r"epoch +\d+ .*", text)


def test_mf_survives_a_killed_node_and_covers_every_rating(cluster_factory):
    """3 nodes, MovieLens-100K slice: node 2 dies after epoch 2; nodes 0 and 1 train its users from
    their last saved factors; every epoch trains all 27,000 training ratings but at most one (the dead node's
    last count, if it died after its epoch's training), and the final RMSE beats the mean by far."""
    cluster = _app(cluster_factory, "mf", 3, "--data", "ml-100k", "--max-ratings", "30000", "--epochs", "8",
                   "--rank", "20")
    wait_until(lambda: len(_epochs(cluster.output(0))) >= 2, 90, lambda: f"epoch 2\n{cluster.logs_tail()}")
    cluster.kill(2)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    out = cluster.output(0)
    epochs = _epochs(out)
    assert len(epochs) == 8, out
    counts = [int(re.search(r"ratings (\d+)", line).group(1)) for line in epochs]
    train = int(re.search(r"([\d,]+) train", out).group(1).replace(",", ""))
    assert sum(c != train for c in counts) <= 1 and counts[-1] == train, (counts, train)
    assert "membership epoch 2, members [0, 1]" in out
    rmse = float(re.findall(r"^test RMSE (\d+\.\d+)$", out, re.M)[-1])  # (stderr lines may follow it)
    baseline = float(re.search(r"predict the mean rating\): test RMSE (\d+\.\d+)", out).group(1))
    assert rmse < baseline - 0.1, (rmse, baseline)


def _counts(text: str, what: str) -> list[int]:
    return [int(m) for m in re.findall(rf"epoch +\d+ .*{what} (\d+)", text)]


def test_kge_survives_killing_node_zero(cluster_factory):
    """3 nodes on Nations: node 0 (which printed the epochs) dies after epoch 2; node 1 leads from
    then on, prints every later epoch and the test MRR; every epoch trains every triple but at most one."""
    cluster = _app(cluster_factory, "kge", 3, "--data", "nations", "--epochs", "8", "--dim", "32", "--eval-every", "0")
    wait_until(lambda: len(_epochs(cluster.output(0))) >= 2, 90, lambda: f"epoch 2\n{cluster.logs_tail()}")
    cluster.kill(0)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    before, after = _counts(cluster.output(0), "triples"), _counts(cluster.output(1), "triples")
    assert len(before) >= 2 and len(before) + len(after) >= 8 and after, (before, after, cluster.logs_tail())
    counts = before + after
    assert sum(c != max(counts) for c in counts) <= 1 and after[-1] == max(counts), counts
    assert re.search(r"test MRR \d\.\d+", cluster.output(1)), cluster.logs_tail()


def test_word2vec_survives_a_killed_node_with_two_threads(cluster_factory, tmp_path):
    """2 threads on each of 3 nodes: node 1 dies after epoch 1; its two workers' sentences are split
    among the four left; every later epoch reads every word; vectors are written."""
    out = tmp_path / "vectors.txt"
    cluster = _app(cluster_factory, "word2vec", 3, "--data", "lapse-toy", "--epochs", "5", "--dim", "20",
                   "--out", str(out), threads=2)
    wait_until(lambda: len(_epochs(cluster.output(0))) >= 1, 90, lambda: f"epoch 1\n{cluster.logs_tail()}")
    cluster.kill(1)
    assert cluster.wait(timeout=120) == 0, cluster.logs_tail()
    counts = _counts(cluster.output(0), "words")
    assert len(counts) == 5 and sum(c != max(counts) for c in counts) <= 1 and counts[-1] == max(counts), counts
    assert out.exists() and out.stat().st_size > 0
