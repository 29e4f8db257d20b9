"""Reply boxes that another thread may read (client.coalesce sends a thread's pull_async replies to its
box): pskv-server's sweep takes replies only from boxes marked `swept` and only while no thread
receives on them, delivering each under the box's lock, so a waiter that takes the lock next finds
its Future done and does not wait; any thread may pump a box."""

from __future__ import annotations

import threading
import time

import pytest

from pskv.net.endpoint import Endpoint
from pskv.net.requests import RequestTracker
from pskv.net.transport import Transport
from pskv.net.wire import Header, Kind

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair():
    a, b = Transport(), Transport()
    a.set_address(1, b.address)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _ack(rid: int) -> list:
    return [Header(Kind.ACK, cluster=7, request_id=rid, n_keys=1).pack()]


def _swept(transport: Transport, ep: Endpoint, seconds: float = 10.0) -> int:
    """Sweep until something was delivered (a reply takes a moment to arrive); returns how many."""
    got: list = []
    deadline = time.monotonic() + seconds
    while not got and time.monotonic() < deadline:
        transport.sweep(lambda frames: (got.append(frames), ep.deliver(frames)))
        time.sleep(0.005)
    return len(got)


def test_the_sweep_takes_only_marked_boxes(pair):
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: 7)
    port = ep.reply_box()  # not marked: only its thread reads it
    rid, fut = tracker.new_request(1)
    a.send(1, _ack(rid), port=port)
    assert _swept(b, ep, 0.3) == 0 and not fut.done()
    assert ep.reply_box(swept=True) == port  # marked now (a thread that coalesces)
    assert _swept(b, ep) == 1 and fut.done()


def test_a_waiter_after_the_sweep_does_not_wait(pair):
    """The sweep delivers under the box's lock: a pump that gets the lock next sees done() and returns at once."""
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: 7)
    port = ep.reply_box(swept=True)
    rid, fut = tracker.new_request(1)
    fut.pumped_by(ep.pump)
    a.send(1, _ack(rid), port=port)
    assert _swept(b, ep) == 1 and fut.done()
    start = time.monotonic()
    ep.pump(5.0, fut.done)  # would poll the empty box for 5 s without the check
    assert time.monotonic() - start < 1.0
    assert fut.wait(1) is None


def test_another_thread_pumps_the_owners_box(pair):
    """A Future whose replies come to this thread's box completes when another thread waits on it."""
    a, b = pair
    tracker = RequestTracker()
    ep = Endpoint(1, b, tracker, lambda: 7)
    port = ep.reply_box()
    rid, fut = tracker.new_request(1)
    fut.pumped_by(ep.pump)  # this thread's box
    got: list = []
    other = threading.Thread(target=lambda: got.append(fut.wait(10) is None or "done"))
    other.start()
    a.send(1, _ack(rid), port=port)
    other.join(10)
    assert got == [True] and fut.done()
