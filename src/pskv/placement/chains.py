"""Chains: which live nodes hold each key range when ranges have backups. Pure functions of the members.

With `backups = B`, key range r (the keys node r manages at start, placement.ranges) lives on a
*chain* of B + 1 live nodes: the first live node at or after r on the ring 0, 1, ..., N-1, 0, ...
is its *head* (it serves pulls and applies writes first), the next B live ones are its backups, in
order. When a node dies its ranges go to the next live node, which was their first backup, and
the chain grows at its tail by the next live node (re-replication, server.chain). Survivors keep
their order on the ring, so a chain only ever loses members and gains them at its tail.

    N = 4, B = 1, all alive      range 0: [0, 1]  1: [1, 2]  2: [2, 3]  3: [3, 0]
    node 1 dead                  range 0: [0, 2]  1: [2, 3]  2: [2, 3]  3: [3, 0]

A range loses its rows only when every member of its chain that holds a whole copy dies: more
than B nodes at once, or further deaths before a new tail is filled (the coordinator tracks whole
copies and then stops the cluster, membership.coordinator).
"""

from __future__ import annotations

import numpy as np


class Chains:
    """Heads and chains of every key range for the live `alive` of `num_nodes` nodes, `backups` each."""

    def __init__(self, num_nodes: int, backups: int, alive) -> None:
        self.num_nodes = num_nodes
        self.backups = backups
        self.alive = frozenset(alive)
        ring = [r for r in range(num_nodes) if r in self.alive]
        self._chains: list[tuple[int, ...]] = []
        for r in range(num_nodes):
            if not ring:
                self._chains.append(())
                continue
            first = next((i for i, n in enumerate(ring) if n >= r), 0)
            size = min(backups + 1, len(ring))
            self._chains.append(tuple(ring[(first + i) % len(ring)] for i in range(size)))
        self.heads = np.array([c[0] if c else -1 for c in self._chains], np.int64)  # (N,) range -> its head

    def chain(self, r: int) -> tuple[int, ...]:
        """The nodes of range r, head first."""
        return self._chains[r]

    def successor(self, r: int, rank: int) -> int:
        """The node after `rank` in range r's chain; -1 if `rank` is its tail (or not in it)."""
        chain = self._chains[r]
        if rank not in chain:
            return -1
        i = chain.index(rank)
        return chain[i + 1] if i + 1 < len(chain) else -1

    def headed_by(self, rank: int) -> list[int]:
        """The ranges whose head is `rank`."""
        return [r for r, c in enumerate(self._chains) if c and c[0] == rank]

    def __repr__(self) -> str:
        return f"<Chains backups={self.backups} alive={sorted(self.alive)} {self._chains}>"
