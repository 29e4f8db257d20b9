"""View: who is in the cluster. Rank <-> address, the alive set, the cluster id and the membership epoch.

The view is the one place that says which ranks are members and which messages come from this
cluster (`admit`, the dispatcher's gate); key ranges are derived from it (`key_ranges`) and
handed to routing. Epoch 0 is "not welcomed yet"; WELCOME makes epoch 1 with every node alive.
Failover and elastic membership will change the members here, with a new epoch.

Threads and ownership: pskv-server writes it (WELCOME); every thread reads it. Fields are
replaced whole (never mutated in place), so readers need no lock.
"""

from __future__ import annotations

from ..net.dispatch import Verdict
from ..net.wire import COORDINATOR, FROM_COORDINATOR, Header, Kind
from ..placement.ranges import KeyRanges

_FIRST_WORDS = frozenset({Kind.WELCOME, Kind.ABORT})  # all a node accepts from the coordinator before WELCOME


class View:
    def __init__(self, rank: int, num_nodes: int) -> None:
        self.rank = rank
        self.num_nodes = num_nodes
        self.cluster = 0  # the cluster id the coordinator gave out; 0 until welcomed
        self.epoch = 0
        self.addresses: dict[int, str] | None = None  # rank -> address; None until welcomed
        self.alive: frozenset[int] = frozenset()

    @property
    def welcomed(self) -> bool:
        return self.addresses is not None

    def welcome(self, cluster: int, addresses: dict[int, str]) -> None:
        """pskv-server: the coordinator's WELCOME: every node is up."""
        self.cluster = cluster
        self.alive = frozenset(addresses)
        self.epoch = 1
        self.addresses = dict(addresses)

    def address(self, rank: int) -> str:
        return (self.addresses or {}).get(rank, "")

    def key_ranges(self, rows: int) -> KeyRanges:
        """The manager ranges of a table of `rows` keys over the members."""
        return KeyRanges(rows, self.num_nodes)

    def admit(self, header: Header) -> Verdict:
        """Whether a message comes from this cluster: the dispatcher's gate."""
        if header.sender == COORDINATOR:
            if header.kind not in FROM_COORDINATOR:
                return Verdict.DROP
            if self.welcomed:
                return Verdict.ACCEPT if header.cluster == self.cluster else Verdict.DROP
            return Verdict.ACCEPT if header.kind in _FIRST_WORDS else Verdict.DROP
        if header.kind in FROM_COORDINATOR:
            return Verdict.DROP
        if not self.welcomed:  # a peer was welcomed before us: replay it after our WELCOME
            return Verdict.HOLD if header.cluster else Verdict.DROP
        if header.cluster != self.cluster or not 0 <= header.sender < self.num_nodes:
            return Verdict.DROP
        return Verdict.ACCEPT

    def __repr__(self) -> str:
        return f"<View node={self.rank}/{self.num_nodes} cluster={self.cluster} epoch={self.epoch} alive={sorted(self.alive)}>"
