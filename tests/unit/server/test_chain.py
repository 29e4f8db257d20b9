"""server/chain.py's at-most-once record, and the tracker's side of resends (net/requests.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.net.requests import Credit, RequestTracker
from pskv.server.chain import Applied

pytestmark = pytest.mark.timeout(30)


def test_applied_records_prunes_and_travels():
    applied = Applied()
    for write in [(0, 5, 0), (0, 5, 1), (0, 9, 0), (2, 3, 0)]:
        applied.add(write)
    assert (0, 5, 1) in applied and (0, 5, 2) not in applied and (1, 5, 0) not in applied
    copy = Applied.of(applied.array())  # what a SNAPSHOT carries
    assert len(copy) == 4 and (2, 3, 0) in copy
    copy.prune({0: 9})  # origin 0 has nothing pending below request 9: 5.x can never come again
    assert (0, 5, 0) not in copy and (0, 9, 0) in copy and (2, 3, 0) in copy
    assert Applied().array().shape == (0, 3)


def test_tracker_counts_credit_not_reply_size():
    """A reply answered twice (after a resend) is credited once: `on_part` says how many keys are new."""
    tracker = RequestTracker()
    answered = np.zeros(4, bool)

    def on_part(sender, positions):
        new = ~answered[positions]
        answered[positions] = True
        return Credit(int(new.sum()))

    rid, fut = tracker.new_request(4, on_part=on_part)
    tracker.on_reply(rid, 2, 1, np.array([0, 1]))
    tracker.on_reply(rid, 2, 1, np.array([0, 1]))  # the same keys again: nothing new
    assert not fut.done()
    tracker.on_reply(rid, 3, 2, np.array([1, 2, 3]))
    assert fut.done() and fut.wait() is None


def test_low_watermark_and_retry_all():
    tracker = RequestTracker()
    sent = []
    first, _ = tracker.new_request(1, retry=lambda: sent.append("first"))
    second, _ = tracker.new_request(1)
    assert tracker.low_watermark() == first
    tracker.on_reply(first, 1)
    assert tracker.low_watermark() == second
    assert tracker.retry_all() == 0 and sent == []  # the one with a retry is complete
    third, fut = tracker.new_request(1, retry=lambda: 1 / 0)
    assert tracker.retry_all() == 1
    with pytest.raises(ZeroDivisionError):  # a resend that fails fails its request, not the caller
        fut.wait(1)
    tracker.on_reply(second, 1)
    assert tracker.low_watermark() == third + 1
