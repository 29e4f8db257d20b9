"""Options compose (issue 30): every pair of table options and kinds that pskv.client.matrix says
works, trained at once on one cluster and checked exactly, checkpointed and restored onto another
node count without the options; the options that take backups, with a node leaving; those that take
joins and leaves, with a node joining and another leaving (compose_pairs_scenarios.py).

Shared memory (issue 31) is a cluster setting in the matrix too: the nodes of these clusters share a
host, so with it on (`shared`) every node asserts that each table it applies to was served through
the other nodes' shards in shared memory, and with PSKV_SHARED_MEMORY=0 that nothing was; with
backups it has no effect (the backed test asserts none)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCENARIOS = str(Path(__file__).with_name("compose_pairs_scenarios.py"))


def _env(shared: bool, **more) -> dict | None:
    env = {**more, **({} if shared else {"PSKV_SHARED_MEMORY": "0"})}
    return env or None


def _ok(cluster, nodes, line: str, timeout: float = 240) -> None:
    assert cluster.wait(timeout=timeout) == 0, cluster.logs_tail()
    for r in nodes:
        assert line in cluster.output(r), cluster.logs_tail()


@pytest.mark.parametrize("shared", [True, False], ids=["shared-memory", "messages"])
def test_every_pair_composes_then_restores_onto_other_nodes_and_options(cluster_factory, tmp_path, shared):
    """2 nodes x 2 threads train a table per supported pair (pushes, sets, localizes, samples, push_pull)
    and every node reads exact sums; the checkpoint restored onto 3 nodes, each table declared without
    options, holds the same rows: with shared memory read through it, without, onto 3 nodes with backups."""
    ckpt = tmp_path / "ckpt"
    first = cluster_factory(2, [sys.executable, SCENARIOS, "pairs", str(ckpt)], threads=2, env=_env(shared))
    _ok(first, range(2), "pairs ok")
    again = cluster_factory(3, [sys.executable, SCENARIOS, "restored", str(ckpt), "2", "2"],
                            backups=None if shared else 1, restore=str(ckpt), env=_env(shared))
    _ok(again, range(3), "restored ok")


def test_options_compose_with_backups_and_a_node_leaves(cluster_factory):
    """3 nodes with backups=1 train a table per option that takes backups (localize: readers; sampling
    with the pool scheme; aggregated rounds at the heads); node 2 leaves and the others read exact sums."""
    cluster = cluster_factory(3, [sys.executable, SCENARIOS, "backed"], threads=2, backups=1)
    _ok(cluster, (0, 1), "backed ok")
    assert "node 2 left" in cluster.output(2), cluster.logs_tail()


@pytest.mark.parametrize("shared", [True, False], ids=["shared-memory", "messages"])
def test_options_compose_with_a_join_and_a_leave(cluster_factory, tmp_path, shared):
    """2 nodes train a table per option that takes joins and leaves; a third joins (its share of every
    table moves to it) and all train; node 1 leaves (it hands everything over); nodes 0 and 2 read exact
    sums (with shared memory: the joiner through it, and after the leave both of them)."""
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, SCENARIOS, "elastic", str(out)]
    first = cluster_factory(2, command, env=_env(shared))
    for r in range(2):
        wait_until(lambda: (out / f"ready-{r}").exists(), 120, lambda: first.logs_tail(30))
    joiner = cluster_factory(1, command, join=first.coordinator_address,
                             env=_env(shared, PSKV_SECRET_FILE=first.secret_file))
    _ok(joiner, [0], "elastic ok node=2")
    _ok(first, [0], "elastic ok node=0")
    assert "node 1 left" in first.output(1), first.logs_tail()
