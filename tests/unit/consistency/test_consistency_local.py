"""Consistency models, worker clocks, the row cache and the push buffer, without processes (not named
test_consistency: that base name is tests/cluster's, and the test folders are not packages)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import pskv
from pskv.consistency.buffer import PushBuffer
from pskv.consistency.cache import RowCache
from pskv.consistency.clocks import INF, Clocks
from pskv.options import as_consistency
from pskv.net.future import Future

pytestmark = pytest.mark.timeout(30)


def test_models_parse_and_print():
    """BSP is SSP(0), Async has infinite staleness, and the text forms round-trip."""
    assert pskv.BSP().staleness == 0 and pskv.SSP(3).staleness == 3 and pskv.Async().staleness == math.inf
    for text, model in [("bsp", pskv.BSP()), ("ssp:2", pskv.SSP(2)), ("SSP(4)", pskv.SSP(4)), ("async", pskv.Async())]:
        assert as_consistency(text) == model
        assert as_consistency(model.spec) == model
    assert repr(pskv.SSP(2)) == "SSP(staleness=2)" and as_consistency(None) == pskv.Async()


@pytest.mark.parametrize("bad", ["ssp", "eventual", "ssp:-1", -1, 1.5, True])
def test_models_reject_nonsense(bad):
    """Unknown names and negative or fractional staleness raise ConsistencyError."""
    with pytest.raises(pskv.ConsistencyError):
        as_consistency(bad) if isinstance(bad, str) else pskv.SSP(bad)


def test_init_rejects_unknown_consistency():
    """pskv.init(consistency='weird') fails before anything starts, naming the argument."""
    with pytest.raises(pskv.ConfigError, match=r"^pskv.init\(consistency='weird'\): unknown consistency"):
        pskv.init(consistency="weird")


class _Recorder:
    def __init__(self):
        self.reports: list[tuple[int, int]] = []
        self.flushes = 0
        self.pending: list[Future] = []

    def report(self, clock, seq):
        self.reports.append((clock, seq))

    def flush(self):
        self.flushes += 1
        return list(self.pending)


def _clocks():
    rec = _Recorder()
    return Clocks(rec.report, rec.flush, lambda: None), rec


def test_clock_advances_when_every_worker_ended_it_and_updates_are_acked():
    """The node's clock is the minimum over its workers, held back by unacknowledged updates."""
    clocks, rec = _clocks()
    a, b = object(), object()
    clocks.register(a)
    clocks.register(b)
    update = Future("push")
    assert clocks.tick(a, [update]) == 1
    assert rec.reports == [] and clocks.clock_of(a) == 1 and clocks.clock_of(b) == 0
    clocks.tick(b, [])
    assert rec.flushes == 1 and rec.reports == []  # b ended clock 0, but a's update is not applied
    update.resolve(None)
    assert rec.reports[-1][0] == 1
    clocks.tick(b, [])
    assert rec.reports[-1][0] == 1  # a is still at clock 1
    clocks.tick(a, [])
    assert rec.reports[-1][0] == 2 and rec.flushes == 2
    assert [seq for _, seq in rec.reports] == sorted(seq for _, seq in rec.reports)


def test_clock_waits_for_the_flush_of_the_buffers():
    """Buffered updates flushed when the clock advances hold it until they are acknowledged."""
    clocks, rec = _clocks()
    w = object()
    clocks.register(w)
    flush = Future("flush")
    rec.pending = [flush]
    clocks.tick(w, [])
    assert rec.reports == []
    flush.resolve(None)
    assert rec.reports[-1][0] == 1


def test_closed_workers_hold_nobody_back_and_new_ones_restart_at_zero():
    """With every worker closed the node reports INF; a new worker brings it back to 0."""
    clocks, rec = _clocks()
    w = object()
    clocks.register(w)
    clocks.tick(w, [])
    clocks.close(w, [])
    assert rec.reports[-1][0] == INF
    clocks.register(object())
    assert rec.reports[-1][0] == 0 and clocks.started


def test_tick_of_an_unregistered_worker_raises():
    """clock() on a worker that takes no part in clocks is a ConsistencyError."""
    clocks, _ = _clocks()
    with pytest.raises(pskv.ConsistencyError, match="node.run"):
        clocks.tick(object(), [])


def test_wait_for_blocks_until_the_global_clock_arrives():
    """wait_for returns at once when the global clock is there, else when it arrives."""
    waiting = threading.Event()
    clocks = Clocks(lambda c, s: None, list, waiting.set)  # the health check runs once wait_for blocks
    clocks.wait_for(0)
    assert clocks.waits == 0 and not waiting.is_set()
    # the clock arrives only once wait_for is blocked (a timer could fire before it even started)
    arrive = threading.Thread(target=lambda: waiting.wait(30) and clocks.on_global(3), name="test-global-clock")
    arrive.start()
    clocks.wait_for(3, timeout=30)
    arrive.join(30)
    assert clocks.waits == 1 and clocks.wait_seconds > 0 and clocks.global_clock == 3
    clocks.wait_for(2)
    assert clocks.waits == 1  # there already: no wait
    with pytest.raises(TimeoutError, match="global clock to reach 4"):
        clocks.wait_for(4, timeout=0.05)


def test_wait_for_raises_the_node_failure():
    """A pull waiting for the clock fails with the node's failure instead of hanging."""
    def health():
        raise pskv.NodeFailure("node 1 died", 1, "")
    clocks = Clocks(lambda c, s: None, list, health)
    with pytest.raises(pskv.NodeFailure):
        clocks.wait_for(1, timeout=5)


def test_row_cache_hits_only_fresh_enough_copies():
    """A copy fetched at global clock g answers pulls that need <= g; others miss."""
    cache = RowCache(10, 2, np.float32, 4, additive=True)
    cache.insert(np.array([1, 2]), np.ones((2, 2), np.float32), fresh=3, since=cache.sequence())
    out = np.zeros((3, 2), np.float32)
    miss = cache.lookup(np.array([1, 2, 5]), 3, out)
    assert miss.tolist() == [2] and out[:2].tolist() == [[1, 1], [1, 1]]
    assert cache.lookup(np.array([1]), 4, out).tolist() == [0]


def test_row_cache_adds_own_pushes_or_drops_the_copy():
    """add: a push through the node adds to the copy; other updaters drop it."""
    add = RowCache(10, 1, np.float64, 4, additive=True)
    add.insert(np.array([3]), np.array([[5.0]]), fresh=0, since=add.sequence())
    add.write(np.array([3, 3]), np.array([[1.0], [2.0]]))
    out = np.zeros((1, 1))
    assert add.lookup(np.array([3]), 0, out).size == 0 and out[0, 0] == 8.0
    other = RowCache(10, 1, np.float64, 4, additive=False)
    other.insert(np.array([3]), np.array([[5.0]]), fresh=0, since=other.sequence())
    other.write(np.array([3]), np.array([[1.0]]))
    assert other.lookup(np.array([3]), 0, out).tolist() == [0]


def test_row_cache_skips_rows_pushed_while_they_were_fetched():
    """A reply that left the owner before our push must not overwrite the copy that has it."""
    cache = RowCache(10, 1, np.float64, 4, additive=True)
    since = cache.sequence()
    cache.write(np.array([4]), np.array([[1.0]]))  # pushed while the fetch was in flight
    cache.insert(np.array([4, 5]), np.array([[0.0], [7.0]]), fresh=0, since=since)
    out = np.zeros((2, 1))
    assert cache.lookup(np.array([4, 5]), 0, out).tolist() == [0]


def test_row_cache_evicts_the_stalest_at_its_bound():
    """Past capacity the copies with the oldest clock go first."""
    cache = RowCache(100, 1, np.float32, 3, additive=True)
    for g, key in enumerate([10, 11, 12, 13]):
        cache.insert(np.array([key]), np.full((1, 1), key, np.float32), fresh=g, since=cache.sequence())
    out = np.zeros((4, 1), np.float32)
    assert len(cache) == 3 and cache.evictions == 1
    assert cache.lookup(np.array([10, 11, 12, 13]), 0, out).tolist() == [0]


def test_push_buffer_sums_duplicates_and_shares_one_future():
    """Pushes into the buffer leave as one push with duplicates summed, on flush or when full."""
    sent = []

    def send(keys, values):
        sent.append((keys.copy(), values.copy()))
        return Future.completed(None)

    buf = PushBuffer(2, np.float32, capacity=6, send=send)
    f1 = buf.add(np.array([3, 1]), np.ones((2, 2), np.float32))
    f2 = buf.add(np.array([1]), np.full((1, 2), 2, np.float32))
    assert f1 is f2 and not f1.done() and not sent
    assert buf.flush() is f1 and f1.done()
    keys, values = sent[0]
    assert keys.tolist() == [1, 3] and values.tolist() == [[3, 3], [1, 1]]
    assert buf.flush() is None
    f3 = buf.add(np.arange(6), np.ones((6, 2), np.float32))  # reaches capacity: flushed at once
    assert f3.done() and len(sent) == 2 and (buf.rows_in, buf.rows_out, buf.flushes) == (9, 8, 2)


def test_push_buffer_takes_uint64_ids_as_int64_and_sums_their_duplicates():
    """A sparse table's keys reach the buffer as the int64 with their uint64 bits (negative above
    2**63): any of them is one key, duplicates summed, and the flush carries the same bits."""
    sent = []

    def send(keys, values):
        sent.append((keys.copy(), values.copy()))
        return Future.completed(None)

    ids = np.array([2**64 - 1, 0, 2**63, 2**63 - 1, 2**64 - 1, 12345678901234567890, 2**63], np.uint64)
    buf = PushBuffer(1, np.float64, capacity=100, send=send)
    buf.add(ids[:4].view(np.int64), np.arange(1, 5, dtype=np.float64)[:, None])
    buf.add(ids[4:].view(np.int64), np.full((3, 1), 10.0))
    buf.flush()
    keys, values = sent[0]
    assert keys.dtype == np.int64
    got = dict(zip(keys.view(np.uint64).tolist(), values[:, 0].tolist()))
    assert got == {2**64 - 1: 11.0, 0: 2.0, 2**63: 13.0, 2**63 - 1: 4.0, 12345678901234567890: 10.0}
    assert (buf.rows_in, buf.rows_out) == (7, 5)


def test_push_buffer_flush_failure_fails_the_pushes():
    """If the flush's push fails, every buffered push's Future fails with it."""
    def send(keys, values):
        fut = Future("push")
        fut.resolve(None, pskv.RemoteError("node 1 rejected it", 1))
        return fut

    buf = PushBuffer(1, np.float64, capacity=100, send=send)
    fut = buf.add(np.array([1]), np.ones((1, 1)))
    buf.flush()
    with pytest.raises(pskv.RemoteError):
        fut.wait(1)


def test_future_then_runs_before_wait_returns():
    """then(fn): fn sees the result before the chained Future resolves; its error fails it."""
    seen = []
    src = Future("pull")
    chained = src.then(lambda r: seen.append(r))
    assert not chained.done()
    src.resolve("rows")
    assert chained.wait(1) == "rows" and seen == ["rows"]
    bad = Future.completed(1).then(lambda r: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bad.wait(1)


def test_one_node_ssp_pull_sees_every_update_and_callbacks_run():
    """On a 1-node cluster with 2 threads under SSP(0), each pull at clock c sees both threads'
    updates of clocks < c, and pull_async's callback runs before wait() returns."""
    with pskv.init(consistency=pskv.BSP()) as node:
        node.table("t", rows=4, dim=1, dtype="float64")
        calls = []

        def train(w):
            t = w.table("t")
            for c in range(6):
                got = t.pull_async([0], callback=lambda v: calls.append(float(v[0, 0]))).wait(5)
                assert got[0, 0] >= 2 * c, (c, got)
                t.push([0], np.ones((1, 1)))
                w.clock()

        node.run(train, threads=2)
        assert len(calls) == 12 and node.stats()["tables"]["t"]["flushes"] == 0  # all local: nothing buffered
        assert node._main_worker.table("t").pull([0])[0, 0] == 12


def test_one_node_ssp_set_and_main_thread_clock():
    """set on an SSP table overwrites (cached copies dropped); clock() on the main thread's
    handle raises ConsistencyError naming node.run."""
    with pskv.init(consistency="ssp:1") as node:
        t = node.table("t", rows=4, dim=2)
        t.push([1], np.ones((1, 2))).wait(5)
        t.set([1], np.full((1, 2), 7.0)).wait(5)
        assert t.pull([1]).tolist() == [[7.0, 7.0]]
        with pytest.raises(pskv.ConsistencyError, match="node.run"):
            node._main_worker.clock()


def test_aggregate_with_replication_is_refused_at_declaration():
    """NodeAggregate with Replicate raises TableError when the table is declared, and nothing is declared."""
    with pskv.init() as node:
        with pytest.raises(pskv.TableError, match="does not mix"):
            node.table("t", rows=4, aggregate=pskv.NodeAggregate(), replicate=pskv.Replicate(keys=[1]))
        node.table("t", rows=4)  # the name is still free


def test_old_keywords_still_work_with_a_deprecation_warning():
    """The flat keywords of earlier releases map onto the option objects, each with a DeprecationWarning."""
    with pskv.init() as node:
        with pytest.warns(DeprecationWarning, match=r"\['cache_rows'\]"):
            node.table("c", rows=8, consistency=pskv.BSP(), cache_rows=3)
        with pytest.warns(DeprecationWarning, match=r"\['frequencies', 'replicate'\]"):
            node.table("r", rows=8, replicate=2, frequencies=np.arange(8))
        with pytest.warns(DeprecationWarning, match=r"\['location_caches'\]"):
            node.table("l", rows=8, location_caches=True)
        with pytest.warns(DeprecationWarning, match=r"\['aggregate'\]"):
            node.table("a", rows=8, aggregate="node")
        tables = {s.spec.name: s for s in node.catalog.tables()}
        assert tables["c"].cache.capacity == 3 and tables["c"].options.cache == pskv.Cache(rows=3)
        assert tables["r"].shard.replicas.keys.tolist() == [6, 7]  # the two most frequent rows
        assert tables["l"].loc_cache.shape == (8,)
        assert tables["a"].aggregator is not None
        with pytest.raises(pskv.ConfigError, match=r"unknown option\(s\) \['cahce_rows'\]"):
            node.table("x", rows=8, cahce_rows=3)


@pytest.mark.parametrize("make, match", [
    (lambda: pskv.Replicate(), "exactly one of keys"),
    (lambda: pskv.Replicate(keys=[1], hottest=2), "exactly one of keys"),
    (lambda: pskv.Replicate(hottest=2), r"needs frequencies="),
    (lambda: pskv.Replicate(keys=[1], syncs_per_sec=-1), "syncs_per_sec=-1"),
    (lambda: pskv.Cache(rows=-1), r"rows=-1"),
    (lambda: pskv.Cache(buffer_rows=0), "buffer_rows=0"),
])
def test_option_objects_check_their_values(make, match):
    with pytest.raises(pskv.ConfigError, match=match):
        make()


def test_an_option_of_the_wrong_kind_is_named():
    with pskv.init() as node:
        with pytest.raises(pskv.ConfigError, match=r"cache=5; use pskv.Cache"):
            node.table("t", rows=4, cache=5)


def test_row_cache_keeps_no_copy_of_a_row_while_its_set_is_in_flight():
    """hold(): no copy is kept until release(); a fetch that began before release() is not kept either."""
    cache = RowCache(10, 1, np.float32, 4, additive=True)
    cache.hold(np.array([3]))
    since = cache.sequence()
    cache.insert(np.array([3]), np.array([[5.0]], np.float32), fresh=0, since=since)  # fetched during the set
    assert len(cache) == 0
    cache.release(np.array([3]))
    cache.insert(np.array([3]), np.array([[5.0]], np.float32), fresh=0, since=since)  # began before release
    assert len(cache) == 0
    cache.insert(np.array([3]), np.array([[7.0]], np.float32), fresh=0, since=cache.sequence())
    out = np.zeros((1, 1), np.float32)
    assert len(cache.lookup(np.array([3]), 0, out)) == 0 and out[0, 0] == 7.0


def test_row_cache_insert_never_evicts_a_row_it_is_refreshing():
    """An insert that must evict may not pick the slots of keys it refreshes in the same call: those
    slots would go to its new keys and one of two rows would land under the wrong key."""
    cache = RowCache(10, 1, np.float32, 4, additive=True)
    cache.insert(np.array([4, 5]), np.array([[40.0], [50.0]], np.float32), fresh=0, since=cache.sequence())
    cache.insert(np.array([2, 3]), np.array([[20.0], [30.0]], np.float32), fresh=1, since=cache.sequence())
    # full; 4 and 5 are the stalest, and this insert refreshes them while adding 0 and 1
    rows = np.array([[0.0], [10.0], [41.0], [51.0]], np.float32)
    cache.insert(np.array([0, 1, 4, 5]), rows, fresh=2, since=cache.sequence())
    keys = np.array([0, 1, 2, 3, 4, 5])
    out = np.full((6, 1), -1.0, np.float32)
    missed = cache.lookup(keys, 0, out)
    for i in np.setdiff1d(np.arange(6), missed):  # every copy the cache still has is its own key's row
        assert out[i, 0] == {0: 0.0, 1: 10.0, 2: 20.0, 3: 30.0, 4: 41.0, 5: 51.0}[int(keys[i])], (keys[i], out[i])
    assert len(cache) == 4


def test_a_worker_made_while_others_run_starts_at_the_global_clock():
    """Workers of other nodes still run (global clock 7): a new worker here starts at 7, so the node's
    report never goes back below what others already wait for (it went to 0: a node whose workers
    were done made a worker to settle, and another node's workers waiting in wait_clock(7) stalled)."""
    clocks, rec = _clocks()
    w = object()
    clocks.register(w)
    for _ in range(7):
        clocks.tick(w, [])
    clocks.close(w, [])
    clocks.on_global(7)
    late = object()
    clocks.register(late)
    assert clocks.clock_of(late) == 7 and rec.reports[-1][0] == 7
    clocks.tick(late, [])
    assert rec.reports[-1][0] == 8


def test_a_node_that_joins_when_no_worker_runs_starts_its_workers_at_zero():
    """A joiner whose cluster's workers were all closed (global clock INF) starts its workers at 0, as the
    others' next workers do (they started at INF: an SSP pull of theirs waited for INF forever)."""
    clocks, rec = _clocks()
    clocks.start_at(INF)
    w = object()
    clocks.register(w)
    assert clocks.clock_of(w) == 0 and clocks.global_clock == 0
    clocks.tick(w, [])
    assert rec.reports[-1][0] == 1


def test_the_global_clock_never_runs_above_this_nodes_own_clock():
    """Every worker of every node closed: the global clock is INF. A new worker here starts at 0, so the
    global clock is at most 0 from then on, also when a GLOBAL_CLOCK of INF sent before the coordinator
    heard of it arrives late (its SSP pulls went through unbounded, and its wait_clock(20) returned at
    once: a settle worker made after it pinned the other nodes, still at 20, forever)."""
    clocks, rec = _clocks()
    w = object()
    clocks.register(w)
    clocks.close(w, [])
    clocks.on_global(INF)
    fresh = object()
    clocks.register(fresh)
    assert clocks.clock_of(fresh) == 0 and clocks.global_clock == 0
    clocks.on_global(INF)  # (the coordinator sent it before our report of 0 reached it)
    assert clocks.global_clock == 0
    with pytest.raises(TimeoutError):
        clocks.wait_for(1, timeout=0.05)
    clocks.tick(fresh, [])
    clocks.on_global(1)
    assert clocks.global_clock == 1
