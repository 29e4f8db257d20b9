"""A table's request path (pskv.client.path): the stages each call passes, composed once from the
table's options when it is declared, and the one write gate that every write and move passes."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import pskv
from helpers import free_port, together
from pskv.client.path import compose

pytestmark = pytest.mark.timeout(60)

PLAIN = {"request": "local > shared > route", "pull": "local > shared > route", "push": "gate > local > shared > route",
         "set": "gate > local > shared > route", "push_pull": "gate > local > shared > route", "localize": "skip > gate > move",
         "pull_if_local": "peek", "prepare_sample": "sample"}


@pytest.mark.parametrize("kwargs, stages", [
    ({}, PLAIN),
    ({"placement": pskv.Relocate(location_caches=True)},
     {call: s.replace("route", "route (location cache)") for call, s in PLAIN.items()}),
    ({"replicate": pskv.Replicate(keys=[1])},
     {**{call: s.replace("local", "replica > local") for call, s in PLAIN.items()}, "push_pull": "refused"}),
    ({"consistency": pskv.SSP(1), "replicate": pskv.Replicate(keys=[1])},
     {**PLAIN, "request": "replica > local > shared > route", "pull": "row cache > clock bound > replica > local > shared > route",
      "push": "gate > clock > replica > local > buffer", "set": "gate > clock > ordered > replica > local > shared > route",
      "push_pull": "refused"}),
    ({"consistency": pskv.BSP(), "cache": pskv.Cache(rows=0)},
     {**PLAIN, "pull": "clock bound > local > shared > route", "push": "gate > clock > local > buffer",
      "set": "gate > clock > ordered > local > shared > route", "push_pull": "refused"}),
    ({"aggregate": pskv.NodeAggregate()},
     {**PLAIN, "pull": "aggregate", "push": "aggregate", "set": "gate > initial > local > shared > route",
      "push_pull": "refused", "localize": "refused"}),
    ({"aggregate": pskv.NodeAggregate(), "consistency": pskv.BSP()},
     {**PLAIN, "pull": "aggregate", "push": "aggregate", "set": "gate > clock > initial > local > shared > route",
      "push_pull": "refused", "localize": "refused"}),
    ({"key_space": "uint64", "rows": None},
     {"request": "ranges", "pull": "ranges", "push": "gate > clock > ranges", "set": "gate > clock > ranges",
      "push_pull": "gate > clock > ranges", "localize": "refused", "pull_if_local": "refused",
      "prepare_sample": "refused"}),
    ({"key_space": "uint64", "rows": None, "consistency": pskv.SSP(1), "cache": pskv.Cache(rows=4)},  # (no row cache)
     {"request": "ranges", "pull": "clock bound > ranges", "push": "gate > clock > local > buffer",
      "set": "gate > clock > ordered > ranges", "push_pull": "refused", "localize": "refused",
      "pull_if_local": "refused", "prepare_sample": "refused"}),
], ids=["dense", "location-caches", "replicate", "ssp-replicate", "bsp-no-cache", "aggregate", "aggregate-bsp",
        "sparse", "sparse-ssp"])
def test_each_table_gets_the_stages_of_its_options(node, kwargs, stages):
    """The stage list of each call is fixed when the table is declared, from its options alone."""
    node.table("t", **{"rows": 8, "dim": 2, **kwargs})
    assert node.catalog.get("t").stages() == stages


def test_with_backups_writes_go_to_the_heads_and_localize_subscribes(node):
    """With backups (composed here for a 1-node table's parts): pulls read the rows held here, every
    write goes to its range's head, a localize makes this node a reader, push_pull is refused."""
    node.table("t", rows=8, dim=2, replicate=pskv.Replicate(keys=[1]))
    path = compose(dataclasses.replace(node.catalog.get("t")), node._ctx, backups=True)
    assert path.describe() == {**PLAIN, "request": "replica > held rows > heads",
                               "pull": "replica > held rows > heads", "push": "gate > replica > held rows > heads",
                               "set": "gate > replica > held rows > heads", "push_pull": "refused",
                               "localize": "skip > gate > subscribe"}
    assert node.catalog.get("t").stages()["push"] == "gate > replica > local > shared > route"  # (its own path unchanged)


def test_every_write_and_move_waits_at_the_closed_gate():
    """While a checkpoint holds the gate, push, set, push_pull, localize and a pool sampling preparation
    (which localizes) wait, and go on once it opens; an aggregated push does not wait (its rounds are
    held instead: a BSP round another node waits for must still be sent)."""
    address = f"127.0.0.1:{free_port()}"
    nodes = together(*[lambda r=r: pskv.init(coordinator=address, num_nodes=2, rank=r, heartbeat_interval=0.1)
                       for r in range(2)])
    try:
        far = pskv.Sampling(np.array([0, 0, 0, 0, 1, 1, 1, 1.0]), scheme="pool")  # node 1's keys only
        together(*[lambda n=n: (n.table("t", rows=8, dim=1, sampling=far), n.table("a", rows=8, aggregate=pskv.NodeAggregate()))
                   for n in nodes])
        worker = nodes[0].worker()
        t, one = worker.table("t"), np.ones((1, 1), np.float32)
        calls = {"push": lambda: t.push([6], one).wait(10), "set": lambda: t.set([7], one).wait(10),
                 "push_pull": lambda: t.push_pull([5], one).wait(10), "localize": lambda: t.localize([4]).wait(10),
                 "prepare_sample": lambda: t.prepare_sample(2)}
        gate = nodes[0]._checkpointer.gate
        gate.close()
        done: dict = {}
        threads = [threading.Thread(target=lambda c=c, f=f: done.setdefault(c, f()), daemon=True)
                   for c, f in calls.items()]
        for th in threads:
            th.start()
        assert worker.table("a").push([1], one).done()  # (aggregated: into the node's round at once)
        for th in threads:
            th.join(0.2)
        assert sorted(done) == []  # all held at the gate
        gate.open()
        for th in threads:
            th.join(10)
        assert sorted(done) == sorted(calls)
        assert t.pull([5, 6, 7]).ravel().tolist() == [1.0, 1.0, 1.0]
        worker.close()
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in nodes])
