"""Key ranges: which node manages which keys of a table.

A table's keys [0, rows) are split into one range per node the cluster started with: range i is
[bounds[i], bounds[i+1]). As in Lapse, the manager of a key always knows the key's *owner*, the
node that stores its value. The owner starts as the manager; relocation (`Table.localize`) moves
owners without touching the ranges; the manager records the owner in `Shard.owner`.

Range i is managed by node i until it leaves the cluster (elastic membership, `node.leave()`
without backups): then it hands the range to another member, and `managers[i]` names that node
from the next membership epoch on. A node that joined later manages no range at first; it owns a
fair share of rows (moved to it by relocation). `nodes` is the rank space: every rank that ever
was a member is below it, and it doubles as the "on its way here" destination of routing.

A KeyRanges is never changed: a membership change makes a new one (`with_managers`), which the
node puts in place of the old; a thread that read `state.ranges` once routes a whole request
with one consistent map.
"""

from __future__ import annotations

import bisect

import numpy as np

from .. import kernels


class KeyRanges:
    """The ranges of a table of `rows` keys over the `num_ranges` nodes it started with (sizes differ
    by at most one), their managers, and the rank space `nodes`."""

    def __init__(self, rows: int, num_ranges: int, managers=None, nodes: int | None = None) -> None:
        self.rows = rows
        self.num_ranges = num_ranges
        self.bounds = np.array([i * rows // num_ranges for i in range(num_ranges + 1)], dtype=np.int64)  # (R + 1,)
        self._bounds = self.bounds.tolist()
        identity = managers is None
        self.managers = np.arange(num_ranges, dtype=np.int64) if identity else np.asarray(managers, np.int64)  # (R,)
        self._managers = self.managers.tolist()
        self.identity = identity or bool((self.managers == np.arange(num_ranges)).all())
        self.nodes = max(num_ranges, int(nodes or 0), int(self.managers.max()) + 1)

    @property
    def num_nodes(self) -> int:  # (the name routing used before ranges could move)
        return self.nodes

    def with_managers(self, managers, nodes: int) -> KeyRanges:
        """The same ranges with `managers` (R,) and rank space `nodes`."""
        return KeyRanges(self.rows, self.num_ranges, managers, nodes)

    def range_bounds(self, r: int) -> tuple[int, int]:
        """[lo, hi) of range r."""
        return self._bounds[r], self._bounds[r + 1]

    def manager_range(self, rank: int) -> tuple[int, int]:
        """The range node `rank` started with: [lo, hi); empty (0, 0) for a node that joined later."""
        return self.range_bounds(rank) if rank < self.num_ranges else (0, 0)

    def managed_by(self, rank: int) -> list[int]:
        """The ranges `rank` manages."""
        return [r for r, m in enumerate(self._managers) if m == rank]

    def range_of(self, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the range of each key."""
        return np.searchsorted(self.bounds, keys, side="right") - 1

    def manager_of(self, keys: np.ndarray) -> np.ndarray:
        """(n,) int64 the manager of each key."""
        r = self.range_of(keys)
        return r if self.identity else self.managers[r]

    def one_range(self, keys: np.ndarray) -> int:
        """The range of every key of `keys` (n >= 1) if one range holds them all, else -1."""
        lo, hi = kernels.key_range(keys)
        r = bisect.bisect_right(self._bounds, lo) - 1  # (a list: np.searchsorted costs more for one key)
        return r if hi < self._bounds[r + 1] else -1

    def one_manager(self, keys: np.ndarray) -> int:
        """The manager of every key of `keys` (n >= 1) if one range holds them all, else -1."""
        r = self.one_range(keys)
        return self._managers[r] if r >= 0 else -1

    def is_node(self, rank: int) -> bool:
        return 0 <= rank < self.nodes

    def __repr__(self) -> str:
        moved = "" if self.identity else f" managers={self._managers}"
        return f"<KeyRanges rows={self.rows} ranges={self.num_ranges} nodes={self.nodes}{moved}>"


class SparseRanges(KeyRanges):
    """The ranges of a sparse table's uint64 key space (store.sparse): range i is
    [i * 2**64 // R, (i + 1) * 2**64 // R) in unsigned order; keys arrive as int64 with the same bits.
    A range moves whole, with every key, when its manager leaves (`managers`, server.handoff); a
    node that joined manages none until a leave hands it one."""

    def __init__(self, num_ranges: int, managers=None, nodes: int | None = None) -> None:
        super().__init__(1, num_ranges, managers, nodes)
        self.rows = 1 << 64
        self._ubounds = [i * (1 << 64) // num_ranges for i in range(num_ranges + 1)]  # python ints, last 2**64
        self._starts = np.array(self._ubounds[:-1], np.uint64)  # (R,) each range's first key

    def with_managers(self, managers, nodes: int) -> SparseRanges:
        return SparseRanges(self.num_ranges, managers, nodes)

    def range_bounds(self, r: int) -> tuple[int, int]:
        return self._ubounds[r], self._ubounds[r + 1]

    def range_of(self, keys: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._starts, keys.view(np.uint64), side="right").astype(np.int64) - 1

    def one_range(self, keys: np.ndarray) -> int:
        u = keys.view(np.uint64)
        lo, hi = int(u.min()), int(u.max())
        r = bisect.bisect_right(self._ubounds, lo) - 1
        return r if hi < self._ubounds[r + 1] else -1

    def ranges_within(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(range, lo', hi') for each range that meets the unsigned key interval [lo, hi)."""
        out = []
        for r in range(self.num_ranges):
            a, b = max(lo, self._ubounds[r]), min(hi, self._ubounds[r + 1])
            if a < b:
                out.append((r, a, b))
        return out

    def __repr__(self) -> str:
        return f"<SparseRanges uint64 ranges={self.num_ranges} nodes={self.nodes}>"
