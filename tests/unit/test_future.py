"""future.py: Future (wait, callbacks, timeouts) and RequestTracker (parts, duplicates, failures)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pskv
from pskv.errors import NodeFailure, ProtocolError, PskvError, RemoteError
from pskv.future import Future, RequestTracker

pytestmark = pytest.mark.timeout(60)


def resolve_later(fut: Future, delay: float, result=None, error=None) -> threading.Thread:
    """Resolve `fut` from another thread after `delay` seconds (as pskv-server would); returns the thread."""
    t = threading.Thread(target=lambda: (time.sleep(delay), fut._resolve(result, error)), name="test-resolver")
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
    fut._resolve(None, err)
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
    assert 0.09 <= time.monotonic() - start < 1.0
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
    fut._resolve("ok")
    assert fut.done() and repr(fut) == "<Future set on table 't' done>"
    failed = Future("x")
    failed._resolve(None, PskvError("bad"))
    assert repr(failed) == "<Future x failed>"


def test_future_resolves_only_once():
    """A second resolve is ignored: result and error stay those of the first."""
    fut = Future()
    fut._resolve(1)
    fut._resolve(None, PskvError("late"))
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
    fut._resolve(5)
    fut._resolve(6)
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
    fut._resolve()
    assert order == [0, 1, 2]


def test_future_callback_exception_does_not_propagate_on_resolve():
    """A callback that raises does not stop the resolver, the other callbacks, or the result."""
    fut = Future("pull")
    seen = []
    fut.add_done_callback(lambda f: 1 / 0)
    fut.add_done_callback(seen.append)
    fut._resolve(7)  # must not raise in the resolving (server) thread
    assert seen == [fut] and fut.wait(0) == 7


def test_future_callback_exception_does_not_propagate_when_done():
    """A raising callback added to a done Future is logged, as at resolution, not raised to the caller."""
    fut = Future.completed(1)
    fut.add_done_callback(lambda f: 1 / 0)


def test_future_callback_sees_result_in_place():
    """When a callback runs, the result is already readable with wait(0)."""
    fut = Future()
    got = []
    fut.add_done_callback(lambda f: got.append(f.wait(0)))
    fut._resolve("value")
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
    bad._resolve(None, RemoteError("rejected", 2))
    with pytest.raises(RemoteError, match="rejected"):
        pskv.wait(ok, bad, timeout=1)


def test_wait_timeout_is_total():
    """pskv.wait's timeout bounds the whole call, not each Future."""
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        pskv.wait(Future.completed(), Future(), Future(), timeout=0.2)
    assert time.monotonic() - start < 1.0


def test_wait_no_futures_returns_empty():
    """pskv.wait() with no Futures returns []."""
    assert pskv.wait() == []


# ---- RequestTracker -------------------------------------------------------------------------------


def test_tracker_resolves_after_last_part():
    """A request of three parts resolves only when all three parts arrived, in any order."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1, 2, 3], result="done")
    assert len(tracker) == 1
    assert tracker.on_reply(rid, 2)
    assert tracker.on_reply(rid, 0)
    assert not fut.done()
    assert tracker.on_reply(rid, 1)
    assert fut.wait(0) == "done" and len(tracker) == 0


def test_tracker_request_ids_are_distinct():
    """Every new request gets a new id."""
    tracker = RequestTracker()
    ids = {tracker.new_request([0])[0] for _ in range(100)}
    assert len(ids) == 100


def test_tracker_on_part_writes_each_part():
    """on_part(part, arrays) is called once per part with that part's arrays."""
    out = np.zeros((2, 2))
    tracker = RequestTracker()
    rid, fut = tracker.new_request([4, 5], on_part=lambda part, vals: out.__setitem__(part, vals), result=out)
    tracker.on_reply(rid, 1, np.array([3.0, 4.0]))
    tracker.on_reply(rid, 0, np.array([1.0, 2.0]))
    assert fut.wait(0).tolist() == [[1, 2], [3, 4]]


def test_tracker_duplicate_part_ignored():
    """A part delivered twice counts once: on_reply returns False and on_part is not called again."""
    calls = []
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1, 2], on_part=lambda part, vals: calls.append(part))
    assert tracker.on_reply(rid, 0)
    assert not tracker.on_reply(rid, 0)
    assert calls == [0] and not fut.done()
    assert tracker.on_reply(rid, 1)
    assert fut.done()


@pytest.mark.parametrize("rid_offset, part", [(1000, 0), (0, 5), (0, -1)])
def test_tracker_unknown_request_or_part_ignored(rid_offset, part):
    """A reply for an unknown request id or a part the request does not have is dropped."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1])
    assert not tracker.on_reply(rid + rid_offset, part)
    assert not fut.done() and len(tracker) == 1


def test_tracker_reply_after_completion_ignored():
    """A late duplicate of the last part, after the request completed, is dropped."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1])
    assert tracker.on_reply(rid, 0)
    assert not tracker.on_reply(rid, 0)
    assert fut.done()


def test_tracker_error_part_fails_future_after_all_parts():
    """An ERROR part fails the Future with that error once every part is in; its on_part is not called."""
    calls = []
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1, 2], on_part=lambda part, vals: calls.append(part))
    err = RemoteError("node 2 rejected the request", 2)
    tracker.on_reply(rid, 1, error=err)
    assert not fut.done()
    tracker.on_reply(rid, 0, "vals")
    with pytest.raises(RemoteError) as info:
        fut.wait(0)
    assert info.value is err and calls == [0]


def test_tracker_first_error_wins():
    """With two failed parts the Future carries the first error delivered."""
    tracker = RequestTracker()
    rid, fut = tracker.new_request([1, 2])
    tracker.on_reply(rid, 1, error=RemoteError("first", 2))
    tracker.on_reply(rid, 0, error=RemoteError("second", 1))
    with pytest.raises(RemoteError, match="first"):
        fut.wait(0)


def test_tracker_on_part_pskverror_fails_future():
    """A PskvError raised by on_part (a reply that does not fit) fails the request instead of escaping."""
    def on_part(part, vals):
        raise ProtocolError("reply has the wrong shape")

    tracker = RequestTracker()
    rid, fut = tracker.new_request([1], on_part=on_part)
    assert tracker.on_reply(rid, 0, "vals")
    with pytest.raises(ProtocolError, match="wrong shape"):
        fut.wait(0)


def test_tracker_fail_rank_fails_only_requests_waiting_on_it():
    """fail_rank(r) fails requests with a part outstanding at r; others, and those whose r-part arrived, go on."""
    tracker = RequestTracker()
    rid_a, a = tracker.new_request([1, 2])  # waits on 2
    rid_b, b = tracker.new_request([1, 3])  # never sent to 2
    rid_c, c = tracker.new_request([2, 3])  # its part at 2 already arrived
    tracker.on_reply(rid_c, 0)
    failed = tracker.fail_rank(2, lambda: NodeFailure("node 2 failed", 2))
    assert failed == 1
    with pytest.raises(NodeFailure, match="node 2 failed"):
        a.wait(0)
    assert not b.done() and not c.done() and len(tracker) == 2
    assert not tracker.on_reply(rid_a, 0)  # a late part of the failed request is dropped
    tracker.on_reply(rid_b, 0)
    tracker.on_reply(rid_b, 1)
    tracker.on_reply(rid_c, 1)
    assert b.wait(0) is None and c.wait(0) is None


def test_tracker_fail_rank_builds_one_error_per_request():
    """fail_rank calls error_for() once per failed request (each Future gets its own exception)."""
    tracker = RequestTracker()
    futs = [tracker.new_request([0])[1] for _ in range(3)]
    assert tracker.fail_rank(0, lambda: NodeFailure("node 0 failed", 0)) == 3
    errors = [f.exception() for f in futs]
    assert all(isinstance(e, NodeFailure) for e in errors)
    assert len({id(e) for e in errors}) == 3


def test_tracker_fail_all_fails_every_pending_request():
    """fail_all fails every pending request and empties the tracker; completed ones keep their result."""
    tracker = RequestTracker()
    rid_done, done = tracker.new_request([1], result="ok")
    tracker.on_reply(rid_done, 0)
    pending = [tracker.new_request([r])[1] for r in (0, 1, 2)]
    tracker.fail_all(lambda: pskv.ClosedError("node 0 was shut down"))
    assert len(tracker) == 0 and repr(tracker) == "<RequestTracker pending=0>"
    for fut in pending:
        with pytest.raises(pskv.ClosedError):
            fut.wait(0)
    assert done.wait(0) == "ok"


def test_tracker_futures_get_the_health_check():
    """Futures of a tracker made with health= raise what health raises while waiting without a timeout."""
    def health():
        raise pskv.ClosedError("node 0 was shut down")

    tracker = RequestTracker(health=health)
    _, fut = tracker.new_request([1], desc="pull on table 't'")
    with pytest.raises(pskv.ClosedError):
        fut.wait()
    assert repr(fut) == "<Future pull on table 't' pending>"


def test_tracker_concurrent_parts_resolve_once():
    """Parts delivered from many threads at once resolve the request exactly once, with every part written."""
    n = 64
    written = np.zeros(n, np.int64)
    resolved = []
    tracker = RequestTracker()
    rid, fut = tracker.new_request(list(range(n)), on_part=lambda part, v: written.__setitem__(part, written[part] + 1))
    fut.add_done_callback(resolved.append)
    barrier = threading.Barrier(8)

    def deliver(start):
        barrier.wait()
        for part in range(start, n, 8):
            tracker.on_reply(rid, part)
            tracker.on_reply(rid, part)  # duplicate

    threads = [threading.Thread(target=deliver, args=(s,), name=f"test-deliver-{s}") for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert fut.done() and len(resolved) == 1
    assert written.tolist() == [1] * n
