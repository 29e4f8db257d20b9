"""Context: what a node hands its workers and their tables, in place of a pointer back to the node."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..catalog import Catalog
from ..checkpoint.collective import Gate
from ..consistency.clocks import Clocks
from ..membership.barrier import LocalBarrier
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..placement.chains import Chains
from ..store.peer import Neighbors
from .replica_sync import ReplicaSync


@dataclasses.dataclass(frozen=True)
class Context:
    rank: int
    num_nodes: int
    endpoint: Endpoint  # sends every request
    tracker: RequestTracker  # this node's requests in flight
    catalog: Catalog  # the node's tables
    check: Callable[[], None]  # raises the node's failure, or ClosedError after shutdown
    clocks: Clocks  # worker clocks and the global clock (BSP/SSP)
    barrier: LocalBarrier  # the node's open workers
    replica_sync: ReplicaSync  # sends changes of replicated keys
    collective_timeout: float  # seconds a clock wait or an aggregation round may take
    chains: Callable[[], Chains | None] = lambda: None  # with backups: who holds each key range now (the view's)
    members: Callable[[], list[int]] = lambda: []  # the live ranks (the view's)
    gate: Gate = dataclasses.field(default_factory=Gate)  # holds writes while the node takes a checkpoint
    neighbors: Neighbors = dataclasses.field(default_factory=Neighbors)  # co-located nodes' shards (store.peer)
