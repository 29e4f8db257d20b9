"""pskv.torch.Embedding on two in-process nodes with each technique: every gradient lands exactly once."""

from __future__ import annotations

import numpy as np
import pytest

import pskv

from helpers import free_port, together

torch = pytest.importorskip("torch")
import pskv.torch as ptorch  # noqa: E402

pytestmark = pytest.mark.timeout(60)
ROWS, STEPS = 40, 12


def _ids(rank: int, step: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng([rank, step]).integers(0, ROWS, (6, 3)))  # duplicates too


@pytest.mark.parametrize("technique", ["plain", "relocate", "replicate", "ssp"])
def test_every_gradient_lands_once(technique):
    options = {"relocate": dict(placement=pskv.Relocate()),
               "replicate": dict(replicate=pskv.Replicate(keys=np.arange(0, ROWS, 4))),
               "ssp": dict(consistency=pskv.SSP(1))}.get(technique, {})
    at = f"127.0.0.1:{free_port()}"
    nodes = together(*[lambda r=r: pskv.init(coordinator=at, num_nodes=2, rank=r, failure_timeout=10.0)
                       for r in range(2)])
    try:
        assert all(isinstance(n, pskv.Node) for n in nodes), nodes
        together(*[lambda n=n: n.table("e", ROWS, 2, updater=pskv.SGD(lr=1.0), **options) for n in nodes])

        def train(node) -> np.ndarray:
            w = node.worker()
            table = w.table("e")
            emb = ptorch.Embedding(table)
            for step in range(STEPS):
                ids = _ids(node.rank, step)
                if technique == "relocate":
                    table.localize(ids.reshape(-1)).wait(10)
                emb(ids).sum().backward()  # d/drow = 1 per use
                if technique == "ssp":
                    emb.wait()
                    w.clock()
            emb.wait()
            w.wait_all()
            if technique == "replicate":
                w.wait_replica_sync()
            w.barrier()
            if technique == "replicate":  # the other node's last changes reached this one's copies
                w.wait_replica_sync()
                w.barrier()
            got = table.pull(np.arange(ROWS), timeout=10)
            w.close()
            return got

        results = together(*[lambda n=n: train(n) for n in nodes])
        uses = np.zeros(ROWS)
        for rank in range(2):
            for step in range(STEPS):
                np.add.at(uses, _ids(rank, step).reshape(-1).numpy(), 1)
        for got in results:
            assert np.array_equal(got, -np.repeat(uses[:, None], 2, axis=1)), technique
    finally:
        together(*[lambda n=n: n.shutdown(timeout=5) for n in nodes if isinstance(n, pskv.Node)])
