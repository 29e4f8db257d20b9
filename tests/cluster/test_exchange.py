"""Table.exchange (issue 31 item 6): a push and a pull in one message per node. On clusters without shared
memory (every remote key a message): read-my-writes on every step and exact totals, for dense, sparse and
replicated tables (fused: the nodes count fused messages), an SSP table and a cluster with backups (a push,
then a pull: none fused), keys moving under relocation (exact totals); and across 2 emulated hosts."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SCENARIOS = str(Path(__file__).with_name("exchange_scenarios.py"))
_CAN_EMULATE = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "tc"))


def _fused(cluster, rank: int) -> int:
    out = cluster.output(rank)
    assert "exchange ok" in out, out
    return int(re.search(r"exchange ok fused=(\d+)", out).group(1))


@pytest.mark.parametrize("kind, nodes, threads", [("dense", 3, 2), ("sparse", 2, 1), ("replicate", 2, 2),
                                                  ("relocate", 2, 1)])
def test_exchanges_fuse_and_sum_exactly(cluster_factory, kind, nodes, threads):
    cluster = cluster_factory(nodes, [sys.executable, SCENARIOS, "exchange", kind], threads=threads,
                              env={"PSKV_SHARED_MEMORY": "0"})
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    assert all(_fused(cluster, rank) > 0 for rank in range(nodes))


@pytest.mark.parametrize("kind, backups", [("ssp", None), ("dense", 1)], ids=["ssp", "backups"])
def test_exchanges_apart_where_a_push_cannot_carry_a_pull(cluster_factory, kind, backups):
    """An SSP table's push waits in the push buffer; with backups a write goes down its chain: a push, then a
    pull (with backups after the push's ACK), read-my-writes and exact all the same, nothing fused."""
    cluster = cluster_factory(3 if backups else 2, [sys.executable, SCENARIOS, "exchange", kind], threads=2,
                              env={"PSKV_SHARED_MEMORY": "0"}, backups=backups)
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    assert all(_fused(cluster, rank) == 0 for rank in range(3 if backups else 2))


@pytest.mark.skipif(not _CAN_EMULATE, reason="emulated hosts need root and iproute2's ip and tc")
def test_exchanges_across_emulated_hosts(cluster_factory):
    """2 hosts x 2 nodes (shared memory on each host, CURVE between them): exact, and fused across hosts."""
    cluster = cluster_factory(4, [sys.executable, SCENARIOS, "exchange", "dense"], threads=1,
                              env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}, emulated_hosts=2)
    assert cluster.wait(timeout=200) == 0, cluster.logs_tail()
    assert all(_fused(cluster, rank) > 0 for rank in range(4))
