"""A shard's stripe locks: the lock lists it keeps made stay bounded."""

from __future__ import annotations


def test_a_shard_keeps_a_bounded_number_of_stripe_lock_lists():
    """Every distinct set of stripes a write touches made a lock list that the shard kept for good: up to
    2**16 per shard, ~15 MB (the soak's RSS crept). Past _MASKS_KEPT they are made and not kept."""
    import numpy as np

    from pskv.store import shard as shard_module
    from pskv.store.shard import Shard
    from pskv.store.spec import TableSpec, as_init
    from pskv import updaters

    spec = TableSpec("t", 4096, 1, np.dtype("float32"), updaters.get("add"), as_init(0.0), table_id=0)
    shard = Shard(spec, 0, 4096, 0)
    rng = np.random.default_rng(0)
    for _ in range(5000):
        keys = rng.choice(4096, 6, replace=False)
        shard.push(keys, np.ones((6, 1), np.float32))
    assert len(shard._some) <= shard_module._MASKS_KEPT
    assert float(shard.data[:4096].sum()) == 5000 * 6
