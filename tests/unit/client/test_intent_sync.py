"""client.intent_sync: the copies' sync interval (a table's pskv.Relocate(intent_sync=), else the node's
pskv.init(intent_sync=) / PSKV_INTENT_SYNC), and the clear errors of a bad one."""

from __future__ import annotations

import math

import pytest

import pskv
from pskv.config import NodeConfig

pytestmark = pytest.mark.timeout(60)


def test_a_table_syncs_its_copies_at_its_own_interval_else_at_the_nodes():
    """Node 0.25 s: a table without its own interval syncs 4 times a second, one with 2 s 0.5 times, one
    with inf never (not even a first round: its next one is at inf); an aggregated table has no copies."""
    with pskv.init(intent_sync=0.25) as node:
        node.table("node", rows=10)
        node.table("own", rows=10, placement=pskv.Relocate(intent_sync=2.0))
        node.table("never", rows=10, placement=pskv.Relocate(intent_sync=math.inf))
        node.table("agg", rows=10, aggregate=pskv.NodeAggregate())
        rates = {name: node.catalog.get(name).copies for name in ("node", "own", "never", "agg")}
        assert rates["agg"] is None
        assert (rates["node"].rate, rates["own"].rate, rates["never"].rate) == (4.0, 0.5, 0.0)
        assert rates["never"].next_sync == math.inf and rates["node"].next_sync == 0.0


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_a_bad_interval_is_refused_saying_what_and_where(bad, monkeypatch):
    with pytest.raises(pskv.PskvError, match=r"pskv\.Relocate\(intent_sync=.*must be > 0 \(math\.inf"):
        pskv.Relocate(intent_sync=bad)
    with pytest.raises(pskv.PskvError, match=r"pskv\.init\(intent_sync=.*must be > 0 seconds"):
        NodeConfig.from_env({}, intent_sync=bad)
    monkeypatch.setenv("PSKV_INTENT_SYNC", str(bad))
    with pytest.raises(pskv.PskvError, match=r"PSKV_INTENT_SYNC is .*; it must be > 0 seconds"):
        NodeConfig.from_env()


def test_the_node_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("PSKV_INTENT_SYNC", "inf")
    assert NodeConfig.from_env().intent_sync == math.inf
    assert NodeConfig.from_env(intent_sync=0.1).intent_sync == 0.1  # (the argument wins)
    assert NodeConfig().intent_sync == 0.5
