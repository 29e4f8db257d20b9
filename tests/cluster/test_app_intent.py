"""`--intent` in the kge, word2vec and mf apps (pskv.data.Lookahead): the same training as without it
on one worker (the negatives drawn ahead are the same draws), and intents signaled and acted on in a
2 x 2 cluster."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

APPS = {
    "kge": ["--data", "random:400,8,3000", "--dim", "16", "--neg", "4", "--batch", "50", "--eval-every", "0",
            "--eval-triples", "50"],
    "mf": ["--data", "zipf:600x300x20000", "--rank", "8", "--batch", "500", "--no-prefetch"],  # as --intent
    "word2vec": ["--dim", "16", "--window", "2", "--neg", "3", "--batch-words", "200", "--min-count", "1"],
}
LOSS = {"kge": r"epoch +\d+ +loss \S+", "mf": r"epoch +\d+ +train_rmse \S+", "word2vec": r"epoch +\d+ +loss \S+"}


def _corpus(tmp_path) -> str:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(120)]
    p = 1 / np.arange(1, 121)
    lines = [" ".join(rng.choice(words, 12, p=p / p.sum())) for _ in range(300)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(cluster_factory, app: str, nodes: int, threads: int, tmp_path, *extra: str) -> list[str]:
    data = ["--data", _corpus(tmp_path)] if app == "word2vec" else []
    command = [sys.executable, "-m", f"pskv.apps.{app}", *APPS[app], *data, "--epochs", "2", "--progress", "lines",
               "--seed", "3", *extra]
    cluster = cluster_factory(nodes, command, threads=threads)
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    return [cluster.output(r) for r in range(nodes)]


@pytest.mark.parametrize("app", sorted(APPS))
def test_intent_trains_as_without_it_on_one_worker(cluster_factory, tmp_path, app):
    """1 node x 1 thread: every epoch's loss is the same with --intent (nothing moves; the draws and
    their order are the same)."""
    plain = re.findall(LOSS[app], _run(cluster_factory, app, 1, 1, tmp_path)[0])
    intent = re.findall(LOSS[app], _run(cluster_factory, app, 1, 1, tmp_path, "--intent", "--ahead", "3")[0])
    assert len(plain) == 2 and plain == intent, (plain, intent)


@pytest.mark.parametrize("app", sorted(APPS))
def test_intent_signals_and_moves_on_two_nodes(cluster_factory, tmp_path, app):
    """2 nodes x 2 threads with --intent: each node signaled windows and ended every key it started."""
    outs = _run(cluster_factory, app, 2, 2, tmp_path, "--intent", "--stats")
    for out in outs:
        line = next(x for x in out.splitlines() if "@@stats" in x)
        tables = json.loads(line.split("@@stats", 1)[1])["tables"]
        used = [t for t in tables.values() if t.get("intent_windows")]
        assert used, tables
        for t in used:
            assert t["intent_starts"] == t["intent_ends"] > 0, t
