"""Shared-memory shards (store.shm, store.peer, store.spin): another process reads and updates a
node's rows in place, exactly, under the shared stripe spinlocks; files are private, follow a
growing shard, retire, and are swept after their process died."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import stat
import time

import numpy as np
import pytest

import pskv
from pskv import updaters
from pskv.store import shm, spin
from pskv.store.peer import Neighbors, PeerShard
from pskv.store.shard import Shard
from pskv.store.spec import TableSpec, as_init

pytestmark = pytest.mark.timeout(60)

ROWS, DIM = 1000, 4
CTX = mp.get_context("fork")  # (the children inherit the test's imports: no 1 s start-up each)


def _spec(updater="add", table_id=0):
    return TableSpec("t", ROWS, DIM, np.dtype(np.float32), updaters.get(updater), as_init(0.0), table_id=table_id)


@pytest.fixture
def segments(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "root", lambda: str(tmp_path / "pskv"))
    directory = shm.host_dir(0xABC, "127.0.0.1")
    seg = shm.Segments(directory, rank=1)
    yield seg
    seg.close()


def _push_as_peer(directory, rank, table_id, updater, rounds, keys):
    """A child process: map node `rank`'s shard and push 1.0 to `keys`, `rounds` times."""
    view = Neighbors()
    view.open(directory, rank=0)
    shard = view.view(_spec(updater, table_id), rank)
    assert isinstance(shard, PeerShard)
    ones = np.ones((len(keys), DIM), np.float32)
    for _ in range(rounds):
        assert not len(shard.push(keys, ones))
    os._exit(0)


def test_files_are_private_and_go_when_the_shard_retires(segments):
    shard = Shard(_spec(), 0, ROWS, rank=1, shared=segments)
    assert shard.shared
    assert stat.S_IMODE(os.stat(segments.dir).st_mode) == 0o700
    names = os.listdir(segments.dir)
    assert sorted(n.split(".")[-1] for n in names) == ["g0", "meta", "slot"]  # rows.g0, meta, slot
    assert all(stat.S_IMODE(os.stat(os.path.join(segments.dir, n)).st_mode) == 0o600 for n in names)
    shard.retire()
    assert os.listdir(segments.dir) == []


def test_another_process_pushes_exactly_beside_this_ones_threads(segments):
    """Two child processes and this one push 1.0 to every key 200 times each: exactly 600 everywhere."""
    shard = Shard(_spec(), 0, ROWS, rank=1, shared=segments)
    keys = np.arange(ROWS, dtype=np.int64)
    kids = [CTX.Process(target=_push_as_peer, args=(segments.dir, 1, 0, "add", 200, keys[::step]))
            for step in (1, 1)]
    for k in kids:
        k.start()
    ones = np.ones((ROWS, DIM), np.float32)
    for _ in range(200):
        assert not len(shard.push(keys, ones))
    for k in kids:
        k.join(30)
        assert k.exitcode == 0
    out = np.empty((ROWS, DIM), np.float32)
    shard.pull(keys, out)
    assert (out == 600.0).all()


def test_updater_state_stays_with_the_owner(segments):
    """Adagrad through a peer and directly: one accumulator per row, as if one process pushed all."""
    spec = _spec(pskv.Adagrad(lr=0.5))
    shard = Shard(spec, 0, ROWS, rank=1, shared=segments)
    keys = np.arange(10, dtype=np.int64)
    kid = CTX.Process(target=_push_as_peer, args=(segments.dir, 1, 0, pskv.Adagrad(lr=0.5), 3, keys))
    kid.start()
    kid.join(30)
    assert kid.exitcode == 0
    shard.push(keys, np.ones((10, DIM), np.float32))
    alone = Shard(spec, 0, ROWS, rank=1)
    for _ in range(4):
        alone.push(keys, np.ones((10, DIM), np.float32))
    np.testing.assert_array_equal(shard.data[:10], alone.data[:10])
    np.testing.assert_array_equal(shard.state[:10], alone.state[:10])


def test_a_view_follows_growth_and_misses_moved_keys(segments):
    """The owner relocates keys away and others in (data grows: new files); the view serves what is
    here now, at the new generation, and misses what left."""
    shard = Shard(_spec(), 0, 100, rank=1, shared=segments)
    n = Neighbors()
    n.open(segments.dir, rank=0)
    view = n.view(_spec(), 1)
    keys = np.arange(10, dtype=np.int64)
    shard.extract(keys[:5])  # keys 0..4 leave
    far = np.arange(500, 700, dtype=np.int64)  # 200 keys arrive: capacity 100 -> 300
    shard.insert(far, np.full((200, DIM), 7.0, np.float32), None)
    assert shard._gen == 1
    out = np.zeros((15, DIM), np.float32)
    miss = view.pull(np.concatenate([keys, far[:5]]), out)
    assert miss.tolist() == [0, 1, 2, 3, 4]
    assert (out[10:] == 7.0).all() and view._gen == 1
    assert not len(view.push(far[:5], np.ones((5, DIM), np.float32)))
    got = np.empty((5, DIM), np.float32)
    shard.pull(far[:5], got)
    assert (got == 8.0).all()


def test_a_retired_shard_misses_everything_and_is_not_found_again(segments):
    shard = Shard(_spec(), 0, ROWS, rank=1, shared=segments)
    n = Neighbors()
    n.open(segments.dir, rank=0)
    view = n.view(_spec(), 1)
    shard.retire()
    keys = np.arange(3, dtype=np.int64)
    assert view.pull(keys, np.empty((3, DIM), np.float32)).tolist() == [0, 1, 2]
    assert view.gone
    n._absent.clear()
    assert n.view(_spec(), 1) is None


def test_the_files_of_a_killed_process_are_swept(segments):
    """A process that dies holding a shard (and a stripe lock) leaves files; sweep() removes them,
    and a waiter takes the dead holder's lock."""
    ready = CTX.Event()

    def hold():
        seg = shm.Segments(segments.dir, rank=2)
        s = Shard(_spec(table_id=5), 0, ROWS, rank=2, shared=seg)
        spin.acquire(s._words, 1, np.int32(os.getpid()))  # stripe 0, never released
        ready.set()
        time.sleep(60)

    kid = CTX.Process(target=hold)
    kid.start()
    assert ready.wait(30)
    found = shm.find_meta(segments.dir, 2, 5)
    assert found is not None
    words = shm.split_meta(found[1])[1]
    assert words[0] == kid.pid
    os.kill(kid.pid, signal.SIGKILL)
    kid.join(10)
    t0 = time.monotonic()
    spin.acquire(words, 1, np.int32(os.getpid()))  # the dead holder's lock is freed after ~1 s
    assert words[0] == os.getpid() and time.monotonic() - t0 < 10
    spin.release(words, 1)
    assert shm.sweep() == 3  # meta, slot and rows.g0 of pid kid.pid
    assert shm.find_meta(segments.dir, 2, 5) is None


def test_a_holder_that_died_unreaped_is_dead(segments):
    """A process killed while it holds a stripe stays a zombie until its parent reaps it (pskv's
    launcher reaps its nodes only at the end of a run): its lock is freed after ~1 s all the same,
    and a view of its shard misses, as for a reaped one."""
    s = Shard(_spec(table_id=7), 0, ROWS, rank=1, shared=segments)
    words = s._words
    spin.acquire(words, 1 << 2, np.int32(os.getpid()))  # (compiled before the fork)
    spin.release(words, 1 << 2)
    pid = os.fork()
    if pid == 0:  # the child: take stripe 2's word and die holding it
        try:
            spin.acquire(words, 1 << 2, np.int32(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 10
        while not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert words[2 * spin.STRIDE] == pid  # held by a zombie
        assert not spin.alive(pid) and not shm.alive(pid)
        t0 = time.monotonic()
        spin.acquire(words, 1 << 2, np.int32(os.getpid()))
        assert time.monotonic() - t0 < 10
        spin.release(words, 1 << 2)
    finally:
        os.waitpid(pid, 0)


def test_a_view_of_a_dead_owner_misses(segments):
    """The owner's process died: the view misses every key (they go as messages, and fail there)."""
    ready = CTX.Event()

    def own():
        s = Shard(_spec(table_id=6), 0, ROWS, rank=3, shared=shm.Segments(segments.dir, rank=3))
        assert s.shared
        ready.set()
        time.sleep(60)

    kid = CTX.Process(target=own)
    kid.start()
    assert ready.wait(30)
    n = Neighbors()
    n.open(segments.dir, rank=0)
    view = n.view(_spec(table_id=6), 3)
    assert not len(view.pull(np.arange(3), np.empty((3, DIM), np.float32)))
    os.kill(kid.pid, signal.SIGKILL)
    kid.join(10)
    view._alive_at = 0.0
    assert view.pull(np.arange(3), np.empty((3, DIM), np.float32)).tolist() == [0, 1, 2]


def test_someone_elses_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "root", lambda: str(tmp_path / "pskv"))
    os.mkdir(tmp_path / "pskv", 0o755)  # open to others: not ours to trust
    os.chmod(tmp_path / "pskv", 0o755)
    assert shm.host_dir(1, "h") is None


def test_a_row_kernel_waits_for_a_held_stripe_and_applies_each_row_once(segments):
    """A push that meets a held stripe stops there, waits (naps) and resumes: every row once."""
    import threading

    shard = Shard(_spec(), 0, ROWS, rank=1, shared=segments)
    spin.acquire(shard._words, 1 << 3, np.int32(os.getpid()))  # stripe 3: keys 3, 19, 35, ...
    keys = np.arange(ROWS, dtype=np.int64)
    done = threading.Event()
    t = threading.Thread(target=lambda: (shard.push(keys, np.ones((ROWS, DIM), np.float32)), done.set()))
    t.start()
    time.sleep(0.1)
    assert not done.is_set()  # stopped at key 3
    out = np.empty((ROWS, DIM), np.float32)
    spin.release(shard._words, 1 << 3)
    t.join(10)
    assert done.is_set()
    shard.pull(keys, out)
    assert (out == 1.0).all()


def test_pushes_through_a_view_stay_exact_while_the_owner_grows(segments):
    """The owner takes keys in (its files grow, generation after generation) while a view pushes
    row by row: every push lands exactly once, in the current files."""
    import threading

    shard = Shard(_spec(), 0, 100, rank=1, shared=segments)
    n = Neighbors()
    n.open(segments.dir, rank=0)
    view = n.view(_spec(), 1)
    keys = np.arange(100, dtype=np.int64)
    stop = threading.Event()

    def grow():
        lo = 100
        while not stop.is_set() and lo < ROWS:
            shard.insert(np.arange(lo, lo + 100, dtype=np.int64), np.zeros((100, DIM), np.float32), None)
            lo += 100

    t = threading.Thread(target=grow)
    t.start()
    for _ in range(300):
        assert not len(view.push(keys, np.ones((100, DIM), np.float32)))
    stop.set()
    t.join(10)
    assert shard._gen >= 1
    out = np.empty((100, DIM), np.float32)
    shard.pull(keys, out)
    assert (out == 300.0).all()


def _push_big_as_peer(directory, rank, rounds, rows):
    view = Neighbors()
    view.open(directory, rank=0)
    spec = TableSpec("big", rows, DIM, np.dtype(np.float32), updaters.get("add"), as_init(0.0), table_id=9)
    shard = view.view(spec, rank)
    keys = np.arange(rows, dtype=np.int64)
    for _ in range(rounds):  # 10,000 keys: the whole-stripes path (store.rowlock.WHOLE_FROM)
        assert not len(shard.push(keys, np.ones((rows, DIM), np.float32)))
    os._exit(0)


def test_large_batches_take_whole_stripes_and_stay_exact_beside_row_by_row(segments):
    """A peer pushes 10,000-key batches (whole stripes) while this process pushes small batches
    (row by row) to the same rows: exact."""
    from pskv.store import rowlock

    rows = 10_000
    assert rows >= rowlock.WHOLE_FROM
    spec = TableSpec("big", rows, DIM, np.dtype(np.float32), updaters.get("add"), as_init(0.0), table_id=9)
    shard = Shard(spec, 0, rows, rank=1, shared=segments)
    kid = CTX.Process(target=_push_big_as_peer, args=(segments.dir, 1, 30, rows))
    kid.start()
    small = np.arange(0, rows, 50, dtype=np.int64)  # 200 keys
    for _ in range(30):
        assert not len(shard.push(small, np.ones((len(small), DIM), np.float32)))
    kid.join(30)
    assert kid.exitcode == 0
    out = np.empty((rows, DIM), np.float32)
    assert not len(shard.pull(np.arange(rows), out))
    expected = np.full(rows, 30.0)
    expected[small] += 30.0
    assert (out == expected[:, None]).all()


def test_an_adagrad_push_misses_every_position_of_the_keys_not_held(segments):
    """Duplicates are summed before the row kernel; the misses come back as every original position."""
    shard = Shard(_spec(pskv.Adagrad(lr=0.5)), 0, 100, rank=1, shared=segments)  # holds keys 0..99
    keys = np.array([5, 500, 7, 500, 5, 900, 7, 500], np.int64)
    miss = shard.push(keys, np.ones((len(keys), DIM), np.float32))
    assert miss.tolist() == [1, 3, 5, 7]


class _Failed(Exception):
    pass


def test_a_wait_for_a_live_holder_stops_once_a_watch_says_so(segments):
    """A holder that is alive but never lets go (stopped): a waiter frees nothing, but after ~1 s it
    runs the watches (the node's health check), and one that raises ends the wait, whole stripes and
    row kernels alike, holding nothing; without a watch that raises, it goes on waiting."""
    s = Shard(_spec(table_id=8), 0, ROWS, rank=1, shared=segments)
    words, me = s._words, np.int32(os.getpid())
    keys = np.array([2, 3], np.int64)  # stripe 2 held by the child; stripe 3 free
    stripes = len(words) // spin.STRIDE
    ones = np.ones((2, DIM), np.float32)
    s.push(keys, ones)  # (compiled before the fork)
    pid = os.fork()
    if pid == 0:  # the child: take stripe 2's word and stay alive holding it
        try:
            spin.acquire(words, 1 << 2, np.int32(os.getpid()))
            time.sleep(60)
        finally:
            os._exit(0)
    failed = []

    def check():
        if failed:
            raise _Failed("node failed")

    spin.watch(check)
    try:
        deadline = time.monotonic() + 10
        while words[2 * spin.STRIDE] != pid:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        failed.append(True)
        t0 = time.monotonic()
        with pytest.raises(_Failed):
            spin.acquire(words, (1 << 3) | (1 << 2) | (1 << 1), me)  # stripe 1 taken first, then stuck on 2
        assert time.monotonic() - t0 < 10
        assert words[1 * spin.STRIDE] == 0 and words[3 * spin.STRIDE] == 0  # nothing left held
        with pytest.raises(_Failed):
            s.push(keys, ones)  # the row kernel's driver
        assert words[3 * spin.STRIDE] == 0
        assert 2 % stripes == 2
    finally:
        spin.unwatch(check)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert check not in spin._watches
