"""Join: a node that joins a running cluster (`pskv.init(join="HOST:PORT")`, `pskv launch --join`).

Before the node builds anything it must know its rank, so it asks first, on its bare transport:

    joiner -- HELLO{join, address} -->  coordinator   refuses (ABORT{reason}) or gives it the next
                                                      free rank and a new membership epoch:
    joiner <-- JOINED{rank, ...} ------  coordinator   and MEMBERSHIP{joined, addresses} to the others

JOINED carries what the others have: the cluster id, the epoch, every member's address, the
managers of the key ranges, the tables declared so far (the joiner's own declarations are checked
against them), the next barrier and the global clock. The node then starts as if welcomed; each
table it declares it fills with its share of rows, moved to it by relocation (`Table.localize`
forced past leases): from every key range the 1 / members it did not hand to a joiner yet.

A joiner needs the cluster's secret (PSKV_SECRET_FILE) like every node: without it the coordinator
refuses its handshake, HELLO never arrives, and the transport raises ClusterError (net.auth) in
`ask` within a second instead of a timeout.

Threads and ownership: `ask` runs in the thread that calls `init()`, before pskv-server starts.
"""

from __future__ import annotations

import time

from ..config import NodeConfig
from ..errors import ClusterError, CoordinatorUnreachable, ProtocolError
from ..net.transport import Transport
from ..net.wire import COORDINATOR, Kind, control, control_payload, frame_bytes, unpack_header


def ask(transport: Transport, config: NodeConfig) -> tuple[int, dict]:
    """HELLO{join} to the coordinator at `config.join`; returns (cluster id, the JOINED payload).
    Raises ClusterError if it refuses (or refuses our handshake: another secret, or none),
    CoordinatorUnreachable if it does not answer."""
    assert config.join is not None  # (a node that joins: its config names the coordinator to ask)
    transport.set_address(COORDINATOR, config.join)
    transport.send(COORDINATOR, control(Kind.HELLO, 0, 0, {"address": transport.address, "join": True}))
    deadline = time.monotonic() + config.rendezvous_timeout
    while time.monotonic() < deadline:
        frames = transport.recv(0.1)
        if frames is None:
            continue
        try:
            header = unpack_header(frame_bytes(frames[0]))
            if header.sender != COORDINATOR or header.kind not in (Kind.JOINED, Kind.ABORT):
                continue  # nothing else may come before we are a member
            payload = control_payload(header, frames)
        except ProtocolError:
            continue
        if header.kind == Kind.ABORT:
            raise ClusterError(f"the cluster at {config.join} refused this node: {payload.get('reason')}")
        return header.cluster, payload
    raise CoordinatorUnreachable(
        f"no answer from the coordinator at {config.join} within "
        f"{config.rendezvous_timeout:g} s (PSKV_RENDEZVOUS_TIMEOUT); is the cluster running, "
        "and is PSKV_JOIN its coordinator's address (`pskv launch` prints it)?"
    )


def share(lo: int, hi: int, taken: int, members: int) -> tuple[int, int]:
    """The keys [a, b) of range [lo, hi) that a node joining a cluster of `members` nodes (itself
    included) takes, when earlier joiners still hold `taken` keys at its end: its 1 / members."""
    width = (hi - lo) // members
    b = max(lo, hi - taken)
    return max(lo, b - width), b
