"""kge's negatives with no --sampling (issue 31): onlylocal on more than one node, naive on one; on a real
2-node cluster no negative's row crosses the network, counted key by key."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pskv.apps import kge

DATA = ("--data", "random:2000,10,4000", "--dim", "16", "--neg", "4", "--epochs", "1", "--eval-every", "0")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("argv", "nodes", "entities", "want"),
    [
        ((), 2, 2000, ("onlylocal", True)),
        ((), 3, 2000, ("onlylocal", True)),
        ((), 2, 1000, ("onlylocal", True)),  # 500 per node: kge.ONLYLOCAL_MIN
        ((), 2, 999, (None, False)),
        ((), 2, 14, (None, False)),  # Nations: 7 entities per node are too few negatives
        ((), 1, 2000, (None, False)),
        (("--localize",), 2, 2000, (None, False)),  # it brings a batch's rows here, negatives too
        (("--intent",), 2, 2000, (None, False)),
        (("--sampling", "naive"), 2, 2000, ("naive", False)),
        (("--sampling", "pool"), 2, 2000, ("pool", False)),
        (("--sampling", "onlylocal"), 1, 2000, ("onlylocal", False)),
    ],
)
def test_auto_sampling_is_onlylocal_on_several_nodes_unless_a_scheme_is_given(argv, nodes, entities, want):
    args = kge._parser().parse_args(list(argv))
    chose = kge.auto_sampling(args, nodes, entities)
    assert (args.sampling, chose) == want


def _remote_entity_keys(rank: int) -> int:
    """Entity keys node `rank` of 2 (1 thread each, --batch 100, seed 0) sends to the other node in one epoch
    when every negative is its own: each batch pulls its positives (heads then tails, as they come) and pushes
    their distinct keys with the negatives', and the final evaluation pulls every entity."""
    kg = kge.load(DATA[1], seed=0)
    train = kg.train[np.random.default_rng(0).permutation(len(kg.train))]
    bounds = np.linspace(0, len(train), 3).astype(np.int64)
    mine = train[bounds[rank] : bounds[rank + 1]]
    order = np.random.default_rng([0, rank, 1]).permutation(len(mine))  # kge_train.train_epoch's, epoch 1
    half = -(-kg.num_entities // 2)  # node 0 holds entities [0, half)
    other = (lambda k: k >= half) if rank == 0 else (lambda k: k < half)
    sent = 0
    for lo in range(0, len(mine), 100):
        tri = mine[order[lo : lo + 100]]
        pos = np.concatenate([tri[:, 0], tri[:, 2]])
        sent += int(other(pos).sum()) + len(np.unique(pos[other(pos)]))  # the pull, the push
    return sent + (kg.num_entities - half if rank == 0 else half)


def _stats(*flags: str) -> tuple[str, dict[int, int]]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PSKV_SHARED_MEMORY": "0"}
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "kge", "--nodes", "2", "--", *DATA, "--stats",
                           "--progress", "none", *flags], capture_output=True, text=True, timeout=150, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stats = [json.loads(line.split("@@stats ", 1)[1]) for line in proc.stdout.splitlines() if "@@stats " in line]
    return proc.stdout, {s["rank"]: s["tables"]["entities"]["remote_keys"] for s in stats}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_default_on_two_nodes_sends_no_negative_across():
    """2 nodes x 1 thread, messages only (no shared memory): with the default, as with --sampling onlylocal,
    the entity keys a node sends the other are exactly its positives' (pulls and pushes) and the final
    evaluation's; with --sampling naive its negatives go too."""
    out, auto = _stats()
    assert "negatives onlylocal (auto; --sampling naive draws among all entities)" in out
    want = {0: _remote_entity_keys(0), 1: _remote_entity_keys(1)}
    assert auto == want
    assert _stats("--sampling", "onlylocal")[1] == want
    naive = _stats("--sampling", "naive")[1]
    assert all(naive[r] > want[r] + 2000 for r in (0, 1)), (naive, want)  # 14,400 negatives a node, half remote
