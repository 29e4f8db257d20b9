"""client/table.py on the wire: what a remote pull returns and who owns its memory.

Two nodes in threads of this process; node 0 pulls rows that node 1 owns, as messages (shared
memory off: it would serve them as copies from node 1's shard, store.peer)."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from helpers import free_port, together
from pskv.client.request import ADOPT_MIN, Received

pytestmark = pytest.mark.timeout(60)

ROWS, DIM = 20_000, 64  # node 1 owns rows 10,000..19,999


@pytest.fixture(scope="module")
def nodes():
    address = f"127.0.0.1:{free_port()}"
    pair = together(*[lambda r=r: pskv.init(coordinator=address, num_nodes=2, rank=r, heartbeat_interval=0.1,
                                            rendezvous_timeout=20.0, shared_memory=False) for r in range(2)])
    assert all(isinstance(x, pskv.Node) for x in pair), pair
    together(*[lambda x=x: x.table("t", rows=ROWS, dim=DIM) for x in pair])
    w0 = pair[0].worker()
    t = w0.table("t")
    keys = np.arange(ROWS, dtype=np.int64)
    t.set(keys, keys[:, None] * 100.0 + np.arange(DIM)[None, :]).wait(10)  # row k = k*100 + column
    try:
        yield pair, t
    finally:
        w0.close()
        together(*[lambda x=x: x.shutdown(timeout=5) for x in pair])


def expected(keys):
    return (np.asarray(keys)[:, None] * 100.0 + np.arange(DIM)[None, :]).astype(np.float32)


def remote_keys(n, seed=0):
    return np.random.default_rng(seed).permutation(ROWS // 2)[:n] + ROWS // 2  # (n,) all owned by node 1


def test_large_default_pull_is_the_received_message_not_a_copy(nodes):
    """A default pull that one node answers whole returns the reply frame itself (no fresh pages
    to fault in): exact rows, writeable, C-contiguous, and owned by the caller: writing to it
    changes neither the table nor a later pull."""
    _, t = nodes
    keys = remote_keys(4_000)
    assert len(keys) * DIM * 4 >= ADOPT_MIN
    got = t.pull(keys, timeout=10)
    assert isinstance(got.base, Received)  # fails if the rows were copied into a fresh array
    assert got.shape == (len(keys), DIM) and got.dtype == np.float32
    assert got.flags.writeable and got.flags.c_contiguous
    np.testing.assert_array_equal(got, expected(keys))
    got += 1.0  # ours to change
    again = t.pull(keys, timeout=10)
    np.testing.assert_array_equal(again, expected(keys))
    assert not np.shares_memory(got, again)
    del got  # the frame is freed with its last array; nothing else refers to it
    np.testing.assert_array_equal(again, expected(keys))


def test_pull_with_out_fills_out_and_returns_it(nodes):
    """With out=, the rows land in out and the result is out itself (semantics unchanged)."""
    _, t = nodes
    keys = remote_keys(4_000, seed=1)
    out = np.full((len(keys), DIM), -1.0, np.float32)
    got = t.pull(keys, out=out, timeout=10)
    assert got is out
    np.testing.assert_array_equal(out, expected(keys))
    got = t.pull_async(keys, out=out, callback=lambda v: None).wait(10)
    assert got is out


def test_small_or_split_default_pulls_are_ordinary_arrays(nodes):
    """Below ADOPT_MIN, or when the rows come from several places (some local), the rows are
    copied into a fresh array, as before; the callback sees the same array wait() returns."""
    _, t = nodes
    small = remote_keys(3, seed=2)
    got = t.pull(small, timeout=10)
    assert not isinstance(got.base, Received) and got.flags.writeable
    np.testing.assert_array_equal(got, expected(small))
    mixed = np.concatenate([remote_keys(2_000, seed=3), np.arange(2_000)])  # node 0 owns 0..9,999
    seen = []
    got = t.pull_async(mixed, callback=seen.append).wait(10)
    assert not isinstance(got.base, Received) and seen[0] is got
    np.testing.assert_array_equal(got, expected(mixed))


def _reply_threads(node, monkeypatch):
    """The names of the threads that deliver replies to node's requests, as they happen."""
    import threading
    names: list[str] = []
    deliver = node.tracker.on_reply

    def recording(*args, **kwargs):
        names.append(threading.current_thread().name)
        return deliver(*args, **kwargs)

    monkeypatch.setattr(node.tracker, "on_reply", recording)
    return names


def test_a_blocking_pull_takes_its_reply_in_its_own_thread(nodes, monkeypatch):
    """pull() names the caller's reply box in its request; the owner answers there and the caller
    receives the reply itself: no hand-off through pskv-server. So does a small pull_async that
    its thread waits for (client.coalesce); one with a callback, or larger than
    coalesce.CAP_KEYS, comes through pskv-server (nobody may ever wait for it)."""
    import threading

    from pskv.client import coalesce
    pair, t = nodes
    names = _reply_threads(pair[0], monkeypatch)
    keys = remote_keys(300, seed=3)
    np.testing.assert_array_equal(t.pull(keys, timeout=10), expected(keys))
    assert names == [threading.current_thread().name]
    names.clear()
    np.testing.assert_array_equal(t.pull_async(keys).wait(10), expected(keys))
    assert names == [threading.current_thread().name]
    for call in (lambda: t.pull_async(keys, callback=lambda rows: None),
                 lambda: t.pull_async(remote_keys(coalesce.CAP_KEYS + 1))):
        names.clear()
        call().wait(10)
        assert len(names) == 1 and names[0].startswith("pskv-server")


def test_threads_pulling_at_once_each_get_their_own_rows(nodes):
    """Eight threads, each with its own reply box, pull different rows at once: every row exact."""
    pair, _ = nodes

    def body(seed):
        w = pair[0].worker()
        try:
            t = w.table("t")
            for i in range(20):
                keys = remote_keys(1 + 37 * i, seed=seed * 100 + i)
                np.testing.assert_array_equal(t.pull(keys, timeout=10), expected(keys))
            return True
        finally:
            w.close()

    assert together(*[lambda s=s: body(s) for s in range(8)]) == [True] * 8


def test_a_late_reply_in_the_reply_box_is_delivered(nodes):
    """A reply that comes after the caller stopped waiting (WaitTimeout) waits in the caller's
    box and is delivered by its next wait (or, once the thread coalesces pulls, by pskv-server's
    sweep of the boxes, net.dispatch): the old request completes, the next pull is exact."""
    import time

    from pskv import WaitTimeout, _hooks
    pair, t = nodes
    slowed = []

    def slow(node, header):  # node 1 answers the first pull half a second late
        if node == 1 and not slowed:
            slowed.append(header)
            time.sleep(0.5)
        return False

    keys = remote_keys(5, seed=9)
    with _hooks.installed("server.handle", slow):
        with pytest.raises(WaitTimeout):
            t.pull(keys, timeout=0.05)
        time.sleep(0.6)  # the late reply is in our box by now
    assert slowed
    np.testing.assert_array_equal(t.pull(keys, timeout=10), expected(keys))
    assert len(pair[0].tracker) == 0  # the late reply completed the old request
