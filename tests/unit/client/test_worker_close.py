"""A worker's outstanding requests at its end (issue 30, F0): worker.close() and node.run() wait
for them and raise their errors, bounded by the request timeout. Two nodes in threads of this
process; tests/cluster/test_finished_worker.py checks the values a barrier then sees."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pskv
from helpers import free_port, together
from pskv import _hooks
from pskv.errors import RemoteError, RequestStalled
from pskv.net.wire import Kind

pytestmark = pytest.mark.timeout(60)

FAST = dict(heartbeat_interval=0.1, rendezvous_timeout=20.0, shared_memory=False)  # (messages: the hooks see them)
FAR = np.arange(5, 10)  # node 1's half of a 10-row table


@pytest.fixture
def nodes():
    """Two nodes in threads (node 0 hosts the coordinator), each with table "t" (10 rows); shut down
    at teardown. `request_timeout` 2 s: an unanswered request fails soon."""
    address = f"127.0.0.1:{free_port()}"
    started = together(*[lambda r=r: pskv.init(coordinator=address, num_nodes=2, rank=r, request_timeout=2.0,
                                                failure_timeout=30.0, **FAST) for r in range(2)])
    try:
        assert all(isinstance(n, pskv.Node) for n in started), started
        together(*[lambda n=n: n.table("t", rows=10, dim=1) for n in started])
        yield started
    finally:
        together(*[lambda n=n: _quiet(lambda: n.shutdown(timeout=5)) for n in started if isinstance(n, pskv.Node)])


def _quiet(fn):
    try:
        return fn()
    except pskv.PskvError as exc:
        return exc


def _explode(node, header):
    if node == 1 and header.kind == Kind.PUSH:
        raise RuntimeError("boom")


def _push_far(table) -> None:
    table.push(FAR, np.ones((len(FAR), 1), np.float32))  # never waited for


def test_close_raises_the_error_of_a_push_it_never_waited_for(nodes):
    """A push that node 1 rejects surfaces at worker.close() as RemoteError; the worker has left."""
    w = nodes[0].worker()
    with _hooks.installed("server.handle", _explode):
        _push_far(w.table("t"))
        with pytest.raises(RemoteError, match="RuntimeError\\('boom'\\)"):
            w.close()
    assert nodes[0]._barrier.size == 0
    w.close()  # idempotent


def test_run_raises_the_error_of_a_push_its_worker_never_waited_for(nodes):
    """node.run(train) whose worker pushes, does not wait and returns re-raises the push's RemoteError."""
    with _hooks.installed("server.handle", _explode):
        with pytest.raises(RemoteError, match="RuntimeError\\('boom'\\)"):
            nodes[0].run(lambda w: _push_far(w.table("t")), threads=1)


def test_close_of_a_push_never_answered_fails_after_the_request_timeout(nodes):
    """A push whose owner never answers: close() raises RequestStalled (request_timeout 2 s), not hangs."""
    release = threading.Event()

    def swallow(node, header):
        return node == 1 and header.kind == Kind.PUSH and not release.is_set()

    w = nodes[0].worker()
    with _hooks.installed("server.handle", swallow):
        _push_far(w.table("t"))
        with pytest.raises(RequestStalled, match="push on table 't' by node 0"):
            w.close()
    release.set()
