"""Chains: which live nodes hold each key range when ranges have backups. Pure functions of the members.

With `backups = B`, key range r (the keys node r manages at start, placement.ranges) lives on a
*chain* of B + 1 live nodes that started the cluster: the first live one at or after r on the
ring 0, 1, ..., N-1, 0, ... is its *head* (it serves pulls and applies writes first), the next B
live ones are its backups, in order. When a node dies its ranges go to the next live node, which
was their first backup, and the chain grows at its tail by the next live node (re-replication,
server.chain). Survivors keep their order on the ring, so these members only ever leave a chain
and join it at its tail.

A node that joined the running cluster (rank >= N, membership.join) and entered the chains (once
it declared every table, membership.joining) is an extra member at the end of the chains of B
ranges (`joined_ranges`: its own, spread over the ring by rank), after the B + 1 above. It never
heads a range: its copies add to the B + 1, so a join never lowers the number of whole copies,
and no range's head, and so no request's route, changes when it comes or goes.

    N = 4, B = 1, all alive      range 0: [0, 1]  1: [1, 2]  2: [2, 3]  3: [3, 0]
    node 1 dead                  range 0: [0, 2]  1: [2, 3]  2: [2, 3]  3: [3, 0]
    node 4 joined, entered       range 0: [0, 1, 4]  1: [1, 2]  2: [2, 3]  3: [3, 0]

A range loses its rows when no live node that holds a whole copy of it would be its head: more
than B starting nodes die at once, or further deaths before a new member is filled (the
coordinator tracks whole copies and then stops the cluster, membership.coordinator).
"""

from __future__ import annotations

import numpy as np


def joined_ranges(rank: int, num_nodes: int, backups: int) -> list[int]:
    """The ranges whose chains a node that joined (`rank` >= `num_nodes`) ends: B consecutive ones,
    the next joiner's right after (joiner k, counted from 0, starts at range k * B mod N)."""
    first = (rank - num_nodes) * backups
    return sorted({(first + i) % num_nodes for i in range(min(backups, num_nodes))})


class Chains:
    """Heads and chains of every key range of `num_nodes` starting nodes, `backups` each, over the
    members `alive` that are in the chains (starting nodes, and joiners that entered them)."""

    def __init__(self, num_nodes: int, backups: int, alive) -> None:
        self.num_nodes = num_nodes
        self.backups = backups
        self.alive = frozenset(alive)
        ring = [r for r in range(num_nodes) if r in self.alive]
        extra: dict[int, list[int]] = {r: [] for r in range(num_nodes)}
        for rank in sorted(r for r in self.alive if r >= num_nodes):
            for r in joined_ranges(rank, num_nodes, backups):
                extra[r].append(rank)
        self._chains: list[tuple[int, ...]] = []
        for r in range(num_nodes):
            if not ring:  # (only joiners left: nobody may head, the coordinator stops the cluster)
                self._chains.append(())
                continue
            first = next((i for i, n in enumerate(ring) if n >= r), 0)
            size = min(backups + 1, len(ring))
            self._chains.append(tuple(ring[(first + i) % len(ring)] for i in range(size)) + tuple(extra[r]))
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

    def unheaded(self, whole: list[set[int]]) -> list[int]:
        """The ranges whose head holds no whole copy (`whole`: range -> the nodes whose copy is):
        making these chains would lose rows."""
        return [r for r in range(self.num_nodes) if int(self.heads[r]) not in whole[r]]

    def __repr__(self) -> str:
        return f"<Chains backups={self.backups} alive={sorted(self.alive)} {self._chains}>"
