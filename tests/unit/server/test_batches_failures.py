"""server/batches.py: a link whose send fails at the end of a burst loses only its own messages (issue 30)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from helpers import recording_endpoint
from pskv.net.wire import Header, Kind, unpack_header
from pskv.server.batches import Batches

pytestmark = pytest.mark.timeout(30)


def test_a_dead_link_loses_only_its_own_hops_and_acks(caplog):
    """Node 1 ends a burst with hops for nodes 2 (dead: its send fails) and 3, and acks for nodes 2
    and 0: nodes 3 and 0 still get theirs, whatever the order of the links; node 2's are counted as
    lost and logged (their writers send them again after the membership change), and nothing of them
    is left for a later flush."""
    endpoint, transport = recording_endpoint(1)
    transport.fail_to = {2}
    batches = Batches(endpoint)
    values = np.ones((2, 2), np.float32)
    for rid in (11, 12):
        batches.chain(2, 4, 0, rid, 0, 0, np.array([3, 4]), None, values)  # 2 writes: one batch
    batches.chain(3, 4, 0, 13, 0, 0, np.array([5, 6]), None, values)
    batches.ack(Header(Kind.CHAIN, table=4, request_id=21, origin=2), 2, None)
    for rid in (22, 23):
        batches.ack(Header(Kind.CHAIN, table=4, request_id=rid, origin=0), 2, None)
    with caplog.at_level(logging.WARNING, logger="pskv.server.batches"):
        batches.flush()
    sent = [(rank, unpack_header(bytes(frames[0]))) for rank, frames in transport.sent]
    assert [(rank, h.kind, h.request_id) for rank, h in sent] == [(3, Kind.CHAIN, 13), (0, Kind.ACK, 0)]
    assert (batches.lost, batches.messages, batches.writes) == (3, 1, 2)
    assert "node 1 lost 2 write(s) passed down the chain of table 4 to node 2" in caplog.text
    assert "node 1 lost 1 ack(s) of table 4 to node 2" in caplog.text
    transport.fail_to = set()
    batches.flush()
    assert len(transport.sent) == 2  # nothing was kept back
