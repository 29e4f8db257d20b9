"""The KGE app on real data on local clusters: trained embeddings rank far better than random ones."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from pskv.apps.kge import evaluate
from pskv.data.kg import Filter, load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _run_kge(cluster_factory, nodes: int, threads: int, *args: str, epochs: int = 8) -> dict[str, float]:
    """Run the app on a local cluster (stopped by the fixture on every path); return its test metrics."""
    command = [sys.executable, "-m", "pskv.apps.kge", "--epochs", str(epochs), "--dim", "64", "--eval-every", "4",
               "--progress", "lines", *args]
    cluster = cluster_factory(nodes, command, threads=threads)
    status = cluster.wait(timeout=100)
    out = cluster.output(0)
    assert status == 0, cluster.logs_tail()
    assert len(re.findall(r"epoch +\d+ +loss", out)) == epochs, out
    assert epochs <= 4 or re.search(r"epoch +4 +loss \S+ +valid_mrr", out), out
    final = re.fullmatch(r"test MRR (\d\.\d+)", out.strip().splitlines()[-1])
    assert final, out
    hits1 = re.search(r"Hits@1 (\d\.\d+)", out)
    return {"mrr": float(final.group(1)), "hits@1": float(hits1.group(1))}


def _random_baseline(name: str, dim: int = 64) -> dict[str, float]:
    """Filtered test MRR and Hits@1 of the app's initial (normal, std 0.1) embeddings, over 3 seeds."""
    kg = load(name)
    filt = Filter(kg.all_triples(), kg.num_entities, kg.num_relations)
    sums = np.zeros(5)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        E = rng.normal(0, 0.1, (kg.num_entities, dim)).astype(np.float32)
        R = rng.normal(0, 0.1, (kg.num_relations, dim)).astype(np.float32)
        sums += evaluate(E, R, kg.test, filt, "complex")
    return {"mrr": sums[0] / sums[4], "hits@1": sums[1] / sums[4]}


def test_kge_nations_two_nodes_two_threads_beats_random_embeddings(cluster_factory):
    """ComplEx on Nations, 2 nodes x 2 threads, 8 epochs: MRR about twice the random baseline
    (which is high: 14 entities) and Hits@1 over 2.5 times it."""
    trained, baseline = _run_kge(cluster_factory, 2, 2, "--data", "nations"), _random_baseline("nations")
    assert trained["mrr"] > 1.6 * baseline["mrr"], (trained, baseline)
    assert trained["hits@1"] > 2.5 * baseline["hits@1"], (trained, baseline)


def test_kge_lapse_toy_data_one_node_two_threads_beats_random_embeddings(cluster_factory):
    """ComplEx on Lapse's toy KGE data (ids, .del files), 1 node x 2 threads: MRR over 3x random."""
    _lapse_toy_or_skip()
    trained, baseline = _run_kge(cluster_factory, 1, 2, "--data", "lapse-toy"), _random_baseline("lapse-toy")
    assert trained["mrr"] > 3 * baseline["mrr"], (trained, baseline)
    assert trained["mrr"] > 0.3, trained


def test_kge_with_relocation_pool_sampling_and_replication_still_learns(cluster_factory):
    """2 nodes x 1 thread with --localize, --sampling pool --reuse 4 and --replicate 4 on Nations:
    the techniques change where rows live and which negatives come, not what is learnt."""
    trained = _run_kge(cluster_factory, 2, 1, "--data", "nations", "--localize", "--sampling", "pool", "--reuse", "4",
                       "--replicate", "4", epochs=4)
    assert trained["mrr"] > 1.4 * _random_baseline("nations")["mrr"], trained


def test_kge_with_prefetch_still_learns(cluster_factory):
    """2 nodes x 1 thread on Nations with --prefetch (each batch's rows pulled while the one before
    trains): the rows a batch reads are one batch stale at most, and it learns as the plain runs do."""
    trained = _run_kge(cluster_factory, 2, 1, "--data", "nations", "--prefetch")
    assert trained["mrr"] > 1.6 * _random_baseline("nations")["mrr"], trained


def test_kge_stalled_worker_stops_the_run_with_stacks_instead_of_hanging(tmp_path):
    """A node whose workers finish no batch within --stall-timeout exits 3 with every thread's stack, and
    `pskv run` stops the other node and fails (here the timeout, 1 ms, is shorter than any batch)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "kge", "--nodes", "2", "--threads", "1", "--",
                           "--data", "nations", "--epochs", "2", "--dim", "16", "--stall-timeout", "0.001",
                           "--progress", "none"], capture_output=True, text=True, timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "no worker of this node finished a batch" in out and "--stall-timeout 0.001" in out, out
    assert "Thread 0x" in out or "Current thread 0x" in out, out  # faulthandler's stack dump


def _lapse_toy_or_skip() -> None:
    """Lapse's toy data lies beside the repository (../shared), not in it: skip where it is not."""
    from pskv.data.fetch import DataError, lapse_toy_dir

    try:
        lapse_toy_dir()
    except DataError:
        pytest.skip("Lapse's toy data is not beside this checkout (set PSKV_LAPSE_TOY to its folder)")


# ---- prefetch (issue 31): one worker's epoch on tables in this process -------------------------------
class _Done:
    def __init__(self, result=None) -> None:
        self.result = result

    def wait(self, timeout=None):
        return self.result


class _Table:
    """Rows that change at once (a node's own rows), updated by plain addition; logs each call."""

    def __init__(self, name: str, rows: int, calls: list) -> None:
        self.name, self.calls = name, calls
        self.data = np.random.default_rng(rows).normal(0, 0.1, (rows, 8)).astype(np.float32)

    def pull_async(self, keys):
        self.calls.append(f"pull {self.name}")
        return _Done(self.data[keys])

    def push(self, keys, updates, *, copy=True):
        self.calls.append(f"push {self.name}")
        np.add.at(self.data, keys, -0.1 * updates)
        return _Done()


def _epoch_calls(*flags: str) -> tuple[list[str], float]:
    """One worker's epoch of 3 batches of 10 triples (negatives drawn by the app): (the calls, the loss)."""
    from pskv.apps import common, kge
    from pskv.apps.negatives import Negatives

    args = kge._parser().parse_args(["--batch", "10", "--neg", "4", "--dim", "8", *flags])
    calls: list[str] = []
    ent, rel = _Table("ent", 50, calls), _Table("rel", 5, calls)
    negatives = Negatives(ent, draw=lambda rng, k: rng.integers(0, 50, k), rng=np.random.default_rng(2))
    rng = np.random.default_rng(3)
    tri = np.column_stack([rng.integers(0, 50, 30), rng.integers(0, 5, 30), rng.integers(0, 50, 30)])
    clock = common.Clock(type("Worker", (), {"clock": lambda self: None})(), args)
    progress = type("P", (), {"update": lambda self, n: None})()
    loss = kge._epoch(args, tri, ent, rel, negatives, np.random.default_rng(4), progress, clock, more=False)
    return calls, loss


def test_kge_prefetch_pulls_the_next_batch_before_pushing_this_one():
    """With --prefetch a worker asks for batch i+1's rows (its positives' and negatives' entities in one
    pull, its relations) before it pushes batch i's gradients, and asks for none past the epoch's last
    batch; by default, and under BSP, the old order. Either way the epoch learns (loss finite, positive)."""
    pulls, pushes = ["pull rel", "pull ent"], ["push ent", "push rel"]
    calls, loss = _epoch_calls("--prefetch")
    assert calls == pulls * 2 + pushes + pulls + pushes * 2
    assert 0 < loss < np.inf
    for flags in ([], ["--prefetch", "--consistency", "bsp"]):
        calls, loss = _epoch_calls(*flags)
        assert calls == (pulls + pushes) * 3 and 0 < loss < np.inf
