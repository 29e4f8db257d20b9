"""Key ranges: which node manages which keys of a table.

A table's keys [0, rows) are range-partitioned over the members of the cluster: member i
manages [bounds[i], bounds[i+1]). As in Lapse, the manager of a key is fixed and always knows the
key's *owner*, the node that stores its value. The owner starts as the manager; relocation
(`Table.localize`) moves owners without touching the ranges; the manager records the owner in
`Shard.owner`. The ranges come from the membership view (`View.key_ranges`), the one place a
change of membership would change them.
"""

from __future__ import annotations

import bisect

import numpy as np

from .. import kernels


class KeyRanges:
    """The manager ranges of a table of `rows` keys over `num_nodes` nodes (sizes differ by at most one)."""

    def __init__(self, rows: int, num_nodes: int) -> None:
        self.rows = rows
        self.num_nodes = num_nodes
        self.bounds = np.array([i * rows // num_nodes for i in range(num_nodes + 1)], dtype=np.int64)  # (nodes + 1,)
        self._bounds = self.bounds.tolist()

    def manager_range(self, rank: int) -> tuple[int, int]:
        return int(self.bounds[rank]), int(self.bounds[rank + 1])

    def manager_of(self, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the manager of each key."""
        return np.searchsorted(self.bounds, keys, side="right") - 1

    def one_manager(self, keys: np.ndarray) -> int:
        """The manager of every key of `keys` (n >= 1) if one node manages them all, else -1."""
        lo, hi = kernels.key_range(keys)
        manager = bisect.bisect_right(self._bounds, lo) - 1  # (a list: np.searchsorted costs more for one key)
        return manager if hi < self._bounds[manager + 1] else -1

    def is_node(self, rank: int) -> bool:
        return 0 <= rank < self.num_nodes

    def __repr__(self) -> str:
        return f"<KeyRanges rows={self.rows} nodes={self.num_nodes}>"
