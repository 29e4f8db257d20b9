"""Rendezvous: the nodes a cluster starts with announce themselves; once all have, WELCOME.

    node  -- HELLO{rank, address, num_nodes} -->  coordinator   a wrong count, a rank out of range or
                                                                taken: ABORT{reason} on a one-off socket
          <-- WELCOME{addresses, host} --------   all N joined (epoch 1)
          <-- ABORT{reason, missing} ----------   not all within rendezvous_timeout

A HELLO{join} (a node joining the running cluster) is membership.joining's.

Threads and ownership: pskv-coord only, as part of its `Coordinator`; the state is the shared
`Members` record's.
"""

from __future__ import annotations

import logging

from ..net.wire import Kind
from .members import Members

log = logging.getLogger(__name__)


class Rendezvous:
    """HELLO until every node of the start joined, then WELCOME (pskv-coord)."""

    def __init__(self, members: Members, started: float) -> None:
        self.members = members
        self.started = started  # when the coordinator started: the rendezvous timeout counts from here

    def hello(self, rank: int, p: dict, address: str, now: float) -> bool:
        """Node `rank` announced itself at `address`; True once every node of the start has (then
        `welcome`, after the other parts set up the cluster)."""
        m = self.members
        problem = None
        if p.get("num_nodes") != m.num_nodes:
            problem = f"node {rank} thinks the cluster has {p.get('num_nodes')} nodes, the coordinator {m.num_nodes}"
        elif not 0 <= rank < m.num_nodes:
            problem = f"rank {rank} is outside [0, {m.num_nodes})"
        elif rank in m.addresses or m.welcomed:
            anyone = "" if m.transport.keys else "; with no secret (PSKV_SECRET_FILE) any process can take a rank"
            problem = f"rank {rank} joined twice (first from {m.addresses.get(rank)}, now from {address}){anyone}"
        if problem:
            m.refuse(address, problem + "; check PSKV_RANK and PSKV_NUM_NODES")
            return False
        m.add(rank, address, now)
        log.info("node %d joined from %s (%d/%d)", rank, address, len(m.addresses), m.num_nodes)
        return len(m.addresses) == m.num_nodes

    def welcome(self) -> None:
        """Every node joined: the cluster runs (epoch 1)."""
        m = self.members
        m.welcomed = True
        m.broadcast(Kind.WELCOME, {"addresses": {str(r): a for r, a in m.addresses.items()}, "host": m.host_rank})

    def expired(self, now: float) -> bool:
        """Before WELCOME, at each tick: True (and ABORT to the nodes that came) once not every node
        joined within rendezvous_timeout; the coordinator then stops."""
        m = self.members
        timeout = m.config.rendezvous_timeout
        if now - self.started <= timeout:
            return False
        missing = sorted(set(range(m.num_nodes)) - set(m.addresses))
        reason = f"only {len(m.addresses)} of {m.num_nodes} nodes joined within {timeout:g} s; missing ranks {missing}"
        m.broadcast(Kind.ABORT, {"reason": reason, "missing": missing})
        return True
