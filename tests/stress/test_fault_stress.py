"""Randomized failover: seeded clusters with backups lose nodes at random moments of a push storm
(which node, how many, when, which updater, who runs the coordinator, replicated keys or not,
localizes meanwhile or not; or a node leaves instead, node.leave()), and
the survivors must end with exactly the acknowledged pushes (tests/fault/test_backups.py checks).

    make stress                                            # STRESS_FAULT_SEEDS seeds (default 12)
    PSKV_STRESS_SEED=7 .venv/bin/python -m pytest -m stress tests/stress/test_fault_stress.py

`test_failover_slice` (two fixed seeds, each once a bug: 11, a request sent while a node left; 3009,
a reader of keys that it heads after a leave) runs in `make test`.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fault"))
from test_backups import ROWS, _check, _readers, _running, _storm, _survivors_finish  # noqa: E402

pytestmark = pytest.mark.slow

SEEDS = int(os.environ.get("STRESS_FAULT_SEEDS", "12"))
BASE = int(os.environ.get("PSKV_STRESS_SEED", "0"))


def _scenario(seed: int) -> dict:
    rng = random.Random(seed)
    nodes = rng.choice([3, 4])
    backups = 1 if nodes == 3 else rng.choice([1, 2])
    kills = rng.randint(1, backups)  # at once: the copies of B backups cover B deaths
    return {"nodes": nodes, "backups": backups, "updater": rng.choice(["add", "adagrad"]),
            "coordinator": rng.choice([True, "node0"]), "hot": rng.choice([0, 20]),
            "victims": rng.sample(range(nodes), kills), "delay": rng.uniform(0.0, 0.8),
            "localize": rng.choice([0, 1]), "leave": rng.random() < 0.25}  # leave: the first victim leaves instead


def _failover(cluster_factory, tmp_path, seed: int) -> None:
    sc = _scenario(seed)
    print(f"\nfailover seed {seed}: {sc}", flush=True)
    leaver = -1
    if sc["leave"]:  # node.leave() of one node, not the one that runs the coordinator
        leaver = sc["victims"][0] if sc["victims"][0] != 0 or sc["coordinator"] is True else 1
        sc["victims"] = [leaver]
    cluster, out = _storm(cluster_factory, tmp_path, sc["nodes"], sc["updater"], changes=len(sc["victims"]),
                          backups=sc["backups"], coordinator=sc["coordinator"], hot=sc["hot"], localize=sc["localize"],
                          leaver=leaver)
    if leaver < 0:
        _running(cluster, sc["victims"][0])
        time.sleep(sc["delay"])
        for victim in sc["victims"]:
            cluster.kill(victim)
    survivors = sorted(set(range(sc["nodes"])) - set(sc["victims"]))
    _survivors_finish(cluster, 1 + len(sc["victims"]), survivors)
    hot = np.arange(0, ROWS, ROWS // sc["hot"]) if sc["hot"] else None
    _check(out, sc["nodes"], dead=sc["victims"], updater=sc["updater"], hot=hot)
    if sc["localize"]:
        _readers(out, survivors)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", [11, 3009])
def test_failover_slice(cluster_factory, tmp_path, seed):
    _failover(cluster_factory, tmp_path, seed)


@pytest.mark.stress
@pytest.mark.timeout(150)
@pytest.mark.parametrize("index", range(SEEDS))
def test_failover_stress(cluster_factory, tmp_path, index):
    _failover(cluster_factory, tmp_path, BASE * 1000 + index)
