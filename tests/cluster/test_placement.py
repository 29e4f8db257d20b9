"""Relocation, location caches, hot-key replication and sampling on real multi-process clusters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCENARIOS = str(Path(__file__).with_name("placement_scenarios.py"))


def _run(cluster_factory, nodes: int, threads: int, *args: str):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, *args], threads=threads)
    status = cluster.wait(timeout=150)
    assert status == 0, cluster.logs_tail()
    for rank in range(nodes):
        assert f"{args[0]} ok" in cluster.output(rank), cluster.logs_tail()
    return cluster


@pytest.mark.parametrize("variant", ["plain", "caches", "replicate", "lease"])
def test_relocation_stress_sums_exactly(cluster_factory, variant):
    """Every thread of 3 nodes pushes, pulls and localizes the same few keys; the sums are exact."""
    _run(cluster_factory, 3, 2, "stress", variant)


@pytest.mark.parametrize("nodes", [2, 3])
def test_locality_ownership_messages_and_chains(cluster_factory, nodes):
    """Ownership starts by range, follows localize (also away from the manager and along chains),
    and pulls of local keys send no message."""
    _run(cluster_factory, nodes, 1, "locality")


@pytest.mark.parametrize("nodes", [2, 3])
def test_lease_keeps_keys_where_another_node_localized_them(cluster_factory, nodes):
    """Within another node's lease a localize is declined (the key stays, exact sums); after it, or
    with lease 0, the key moves."""
    _run(cluster_factory, nodes, 1, "lease")


def test_many_key_phases_keep_exact_values(cluster_factory):
    """Random key sets with localizes: pulls keep values, never drop under positive pushes, +d-d cancels."""
    _run(cluster_factory, 2, 2, "phases")


def test_replication_visibility_sync_threshold(cluster_factory):
    """On 3 nodes (not a power of two): writes visible locally at once and remotely after a sync,
    no delta lost or doubled, changes below the threshold wait for a forced sync."""
    _run(cluster_factory, 3, 2, "replication")


def test_sampling_schemes_keep_their_promises(cluster_factory):
    """naive and preloc give the drawn sequence, pool each drawn key exactly `reuse` times, onlylocal
    only local keys."""
    _run(cluster_factory, 2, 2, "sampling")
