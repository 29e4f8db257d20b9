"""future.py: Future (wait, callbacks, timeouts) and RequestTracker (parts, duplicates, failures)."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

import pskv
from pskv.errors import NodeFailure, ProtocolError, PskvError, RemoteError
from pskv.net.future import Future
from pskv.net.requests import RequestTracker

pytestmark = pytest.mark.timeout(60)


def resolve_later(fut: Future, delay: float, result=None, error=None) -> threading.Thread:
    """Resolve `fut` from another thread after `delay` seconds (as pskv-server would); returns the thread."""
    t = threading.Thread(target=lambda: (time.sleep(delay), fut.resolve(result, error)), name="test-resolver")
    t.start()
    return t


# ---- Future ---------------------------------------------------------------------------------------


def test_future_wait_returns_result_set_by_another_thread():
    """wait() blocks until another thread resolves the Future and returns its result."""
    fut = Future("pull")
    t = resolve_later(fut, 0.05, result=42)
    assert fut.wait(timeout=5) == 42
    t.join()
    assert fut.done() and fut.exception() is None and fut.result() == 42


def test_future_wait_raises_error():
    """wait() raises the error the Future was resolved with, every time it is called."""
    fut = Future("push")
    err = RemoteError("node 1 rejected the request", 1)
    fut.resolve(None, err)
    for _ in range(2):
        with pytest.raises(RemoteError) as info:
            fut.wait(timeout=1)
        assert info.value is err
    assert fut.exception() is err


def test_future_wait_timeout_raises_timeouterror():
    """wait(timeout) on a pending Future raises TimeoutError naming the request, after about `timeout`."""
    fut = Future("pull on table 'emb'")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="pull on table 'emb' did not complete within 0.1 s"):
        fut.wait(timeout=0.1)
    # not before the timeout; the upper bound only catches a wait that ignores its timeout (a
    # loaded machine may stretch 0.1 s a lot, never to 30 s)
    assert 0.09 <= time.monotonic() - start < 30
    assert not fut.done()


def test_future_wait_zero_timeout_pending_raises():
    """wait(0) on a pending Future raises TimeoutError at once; on a done one returns the result."""
    with pytest.raises(TimeoutError):
        Future().wait(0)
    assert Future.completed("x").wait(0) == "x"


def test_future_wait_without_timeout_checks_health():
    """A Future waiting with no timeout calls its health check and raises what it raises."""
    calls = []

    def health():
        calls.append(1)
        raise NodeFailure("node 1 failed", 1)

    fut = Future("pull", health)
    with pytest.raises(NodeFailure, match="node 1 failed"):
        fut.wait()
    assert calls


def test_future_done_false_until_resolved():
    """done() is False while pending and True after the result is set; repr says which."""
    fut = Future("set on table 't'")
    assert not fut.done() and fut.exception() is None
    assert repr(fut) == "<Future set on table 't' pending>"
    fut.resolve("ok")
    assert fut.done() and repr(fut) == "<Future set on table 't' done>"
    failed = Future("x")
    failed.resolve(None, PskvError("bad"))
    assert repr(failed) == "<Future x failed>"


def test_future_resolves_only_once():
    """A second resolve is ignored: result and error stay those of the first."""
    fut = Future()
    fut.resolve(1)
    fut.resolve(None, PskvError("late"))
    assert fut.wait(0) == 1


def test_future_completed_is_done():
    """Future.completed(result) is done at once and returns its result."""
    fut = Future.completed(np.zeros(3))
    assert fut.done() and fut.wait().shape == (3,)


def test_future_callback_before_resolution_runs_once():
    """A callback added while pending runs exactly once, at resolution, with the Future as argument."""
    fut = Future()
    seen = []
    fut.add_done_callback(seen.append)
    assert seen == []
    fut.resolve(5)
    fut.resolve(6)
    assert seen == [fut]


def test_future_callback_after_resolution_runs_at_once():
    """A callback added to a done Future runs at once, in the calling thread, exactly once."""
    fut = Future.completed(5)
    seen = []
    fut.add_done_callback(lambda f: seen.append((f.wait(0), threading.current_thread().name)))
    assert seen == [(5, threading.current_thread().name)]


def test_future_callbacks_run_in_order_of_adding():
    """Several callbacks run in the order they were added."""
    fut = Future()
    order = []
    for i in range(3):
        fut.add_done_callback(lambda f, i=i: order.append(i))
    fut.resolve()
    assert order == [0, 1, 2]


def test_future_callback_exception_does_not_propagate_on_resolve():
    """A callback that raises does not stop the resolver, the other callbacks, or the result."""
    fut = Future("pull")
    seen = []
    fut.add_done_callback(lambda f: 1 / 0)
    fut.add_done_callback(seen.append)
    fut.resolve(7)  # must not raise in the resolving (server) thread
    assert seen == [fut] and fut.wait(0) == 7


def test_future_callback_exception_does_not_propagate_when_done(caplog):
    """A raising callback added to a done Future is logged, as at resolution, not raised to the caller;
    the Future keeps its result and later callbacks still run."""
    fut = Future.completed(1, "pull")
    with caplog.at_level(logging.ERROR, logger="pskv.net.future"):
        fut.add_done_callback(lambda f: 1 / 0)  # must not raise here
    seen = []
    fut.add_done_callback(seen.append)
    assert seen == [fut] and fut.wait(0) == 1
    (record,) = [r for r in caplog.records if r.name == "pskv.net.future"]
    assert "callback of pull raised" in record.getMessage() and record.exc_info[0] is ZeroDivisionError


def test_future_callback_sees_result_in_place():
    """When a callback runs, the result is already readable with wait(0)."""
    fut = Future()
    got = []
    fut.add_done_callback(lambda f: got.append(f.wait(0)))
    fut.resolve("value")
    assert got == ["value"]


def test_wait_returns_results_in_order():
    """pskv.wait(*futs) returns every result in argument order."""
    futs = [Future() for _ in range(3)]
    threads = [resolve_later(f, 0.01 * (3 - i), result=i) for i, f in enumerate(futs)]
    assert pskv.wait(*futs, timeout=5) == [0, 1, 2]
    for t in threads:
        t.join()


def test_wait_raises_first_error():
    """pskv.wait raises the error of the first failed Future met in order."""
    ok, bad = Future.completed(1), Future()
    bad.resolve(None, RemoteError("rejected", 2))
    with pytest.raises(RemoteError, match="rejected"):
        pskv.wait(ok, bad, timeout=1)


def test_wait_timeout_is_total():
    """pskv.wait's timeout bounds the whole call, not each Future: each Future waits for what is left
    of it (checked on the timeouts handed down, not on the clock), and a pending one raises TimeoutError."""
    handed = []

    class Slow(Future):
        """Done, but each wait() takes 0.15 s, as a Future resolved that much later would."""

        def wait(self, timeout=None):
            handed.append(timeout)
            time.sleep(0.15)
            return super().wait(timeout)

    pskv.wait(Slow.completed(1), Slow.completed(2), Slow.completed(3), timeout=0.2)
    # sleeping lasts at least 0.15 s, so a loaded machine only leaves less: 0.05 s at most for the
    # second Future and nothing for the third (a per-Future timeout would give each 0.2 s)
    assert handed[0] <= 0.2 and handed[1] <= 0.05 + 1e-9 and handed[2] == 0.0, handed
    with pytest.raises(TimeoutError):
        pskv.wait(Future.completed(), Future(), Future(), timeout=0.2)


def test_wait_no_futures_returns_empty():
    """pskv.wait() with no Futures returns []."""
    assert pskv.wait() == []


# ---- RequestTracker -------------------------------------------------------------------------------
# A request of n keys completes when replies from any nodes have answered n keys in total (the
# owner of a key answers the requester directly, however often the request was forwarded).


def test_tracker_resolves_when_all_keys_answered():
    """A request of 5 keys resolves with its result only after replies answering 2 + 3 keys."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(5, result="done")
    assert tracker.on_reply(rid, 2, sender=1)
    assert not fut.done() and len(tracker) == 1
    assert tracker.on_reply(rid, 3, sender=2)
    assert fut.wait(1) == "done" and len(tracker) == 0


def test_tracker_request_ids_are_distinct():
    """Every new request gets its own id."""
    tracker = RequestTracker()
    assert len({tracker.new_request(1)[0] for _ in range(100)}) == 100


def test_tracker_on_part_gets_sender_and_payload():
    """on_part is called once per reply with the sender and the payload, before the future resolves."""
    seen = []
    tracker = RequestTracker()
    rid, fut = tracker.new_request(2, on_part=lambda sender, payload: seen.append((sender, payload, fut.done())))
    tracker.on_reply(rid, 1, 3, "a")
    tracker.on_reply(rid, 1, 4, "b")
    assert seen == [(3, "a", False), (4, "b", False)] and fut.done()


def test_tracker_unknown_request_ignored():
    """A reply for an unknown or completed request returns False and changes nothing."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(1)
    assert not tracker.on_reply(rid + 1, 1)
    assert tracker.on_reply(rid, 1) and fut.done()
    assert not tracker.on_reply(rid, 1)


def test_tracker_too_many_keys_answered_fails():
    """Replies answering more keys than requested fail the request instead of passing silently."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(2)
    tracker.on_reply(rid, 3)
    with pytest.raises(PskvError, match="1 more keys were answered than requested"):
        fut.wait(1)


def test_tracker_error_reply_fails_at_once():
    """An error reply fails the request immediately with that error; later replies are ignored."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(4)
    tracker.on_reply(rid, 1)
    tracker.on_reply(rid, 0, 2, error=RemoteError("rejected", 2))
    with pytest.raises(RemoteError, match="rejected"):
        fut.wait(1)
    assert not tracker.on_reply(rid, 3)


def test_tracker_on_part_errors_fail_the_future():
    """A PskvError or any other exception in on_part fails the request, not the calling thread."""
    tracker = RequestTracker()

    def bad(sender, payload):
        raise ProtocolError("bad reply") if payload == "p" else ValueError("boom")

    rid1, fut1 = tracker.new_request(1, on_part=bad)
    rid2, fut2 = tracker.new_request(1, on_part=bad)
    tracker.on_reply(rid1, 1, 0, "p")
    tracker.on_reply(rid2, 1, 0, "v")
    with pytest.raises(ProtocolError):
        fut1.wait(1)
    with pytest.raises(PskvError, match="boom"):
        fut2.wait(1)


def test_tracker_fail_all_fails_every_pending_request():
    """fail_all fails every pending request, each with its own error object."""
    tracker = RequestTracker()
    futs = [tracker.new_request(1)[1] for _ in range(3)]
    tracker.fail_all(lambda: NodeFailure("gone"))
    errors = [f.exception() for f in futs]
    assert all(isinstance(e, NodeFailure) for e in errors) and len({id(e) for e in errors}) == 3


def test_tracker_futures_get_the_health_check():
    """A tracker's futures call its health check while waiting, so a broken node fails the waiter."""
    def health():
        raise NodeFailure("cluster broken")

    tracker = RequestTracker(health=health)
    _, fut = tracker.new_request(1)
    with pytest.raises(NodeFailure, match="cluster broken"):
        fut.wait(2)


def test_tracker_concurrent_replies_resolve_once():
    """Replies from 8 threads answering 1,000 keys in total resolve the request exactly once."""
    tracker = RequestTracker()
    calls = []
    rid, fut = tracker.new_request(1000, result="ok")
    fut.add_done_callback(lambda f: calls.append(f.wait()))
    threads = [threading.Thread(target=lambda: [tracker.on_reply(rid, 1) for _ in range(125)], name=f"test-{i}")
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert fut.wait(1) == "ok" and calls == ["ok"] and len(tracker) == 0


def test_on_part_may_replace_the_result():
    """What on_part returns (not None) becomes the request's result; None keeps `result`."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request(2, on_part=lambda sender, payload: payload, result="out")
    tracker.on_reply(rid, 1, 1, None)
    tracker.on_reply(rid, 1, 1, "the reply")
    assert fut.wait(1) == "the reply"
    rid, fut = tracker.new_request(1, on_part=lambda sender, payload: None, result="out")
    tracker.on_reply(rid, 1, 1, "ignored")
    assert fut.wait(1) == "out"


def test_future_wakes_every_waiter_once_resolved():
    """Several threads waiting on one Future all return its result; done() flips exactly then."""
    import threading

    fut = Future("f")
    got = []
    threads = [threading.Thread(target=lambda: got.append(fut.wait(5))) for _ in range(4)]
    for t in threads:
        t.start()
    assert not fut.done()
    fut.resolve(7)
    fut.resolve(8)  # a second resolve is ignored
    for t in threads:
        t.join(5)
    assert got == [7] * 4 and fut.done() and fut.wait(0) == 7
