"""store/intent_replicas.py: copies of intended keys, exactly (no cluster): every push leaves once, by a
sync round, a drop or an eviction; refreshes rebase the copies; a flush outdates rows pulled before it."""

from __future__ import annotations

import numpy as np
import pytest

from pskv import updaters
from pskv.store.intent_replicas import IntentReplicas
from pskv.store.spec import TableSpec, as_init

pytestmark = pytest.mark.timeout(30)


def _copies(updater: str = "add", capacity: int = 2) -> IntentReplicas:
    spec = TableSpec("t", 100, 2, np.dtype(np.float32), updaters.get(updater), as_init(0.0), table_id=1)
    return IntentReplicas(spec, capacity)


def _rows(*values) -> np.ndarray:
    return np.array([[v, v] for v in values], np.float32)


def test_pushes_leave_once_by_rounds_drops_and_evictions_and_reads_see_base_plus_own():
    c = _copies()
    assert c.install(np.array([5, 7, 9]), _rows(1, 2, 3), 0).tolist() == [5, 7, 9]  # (grows past capacity 2)
    assert c.install(np.array([7, 11]), _rows(50, 4), 0).tolist() == [11]  # 7 keeps its copy
    out = np.zeros((4, 2), np.float32)
    assert c.serve("pull", np.array([5, 6, 7, 11]), None, out, None, False).tolist() == [1]  # 6: no copy
    assert out[:, 0].tolist() == [1, 0, 2, 4]
    keys = np.array([5, 5, 9, 6])
    assert c.serve("push", keys, _rows(1, 1, 2, 8), None, None, False).tolist() == [3]
    number, pushed, sums, same = c.take()
    assert pushed.tolist() == [5, 9] and sums[:, 0].tolist() == [2, 2] and sorted(same.tolist()) == [7, 11]
    c.serve("push", np.array([5]), _rows(10), None, None, False)  # after the take: waits for the next round
    c.refresh(number, np.array([5, 9, 7]), _rows(100, 200, 300))  # the owners' rows after the round
    c.refresh(number - 1, np.array([11]), _rows(-1))  # an older round's reply: ignored
    out = np.zeros((4, 2), np.float32)
    c.serve("pull", np.array([5, 9, 7, 11]), None, out, None, False)
    assert out[:, 0].tolist() == [110, 200, 300, 4]  # base + this node's pushes since the take
    assert c.drop(np.array([5, 6])) == 1  # 5 goes with its unsent 10
    c.serve("push", np.array([9, 7]), _rows(1, 1), None, None, False)
    keys, sums = c.evict(np.array([9]))  # a set of 9 comes: 9's pushes first
    assert keys.tolist() == [9] and sums[:, 0].tolist() == [1]
    keys, sums = c.take_leftover()
    assert keys.tolist() == [5] and sums[:, 0].tolist() == [10]
    assert c.take_leftover()[0].tolist() == []
    assert c.held().tolist() == [7, 11] and c.live == 2
    number, pushed, sums, _ = c.take()
    assert pushed.tolist() == [7] and sums[:, 0].tolist() == [1]
    assert c.take()[1].tolist() == []  # each push once
    assert (c.installed, c.dropped, c.live) == (4, 2, 2)


def test_a_flush_drops_all_and_outdates_rows_pulled_before_it():
    c = _copies()
    c.install(np.array([1, 2]), _rows(1, 1), 0)
    c.serve("push", np.array([1]), _rows(3), None, None, False)
    flushes = c.flushes
    assert c.drop_all().tolist() == [1, 2] and c.live == 0
    keys, sums = c.take_leftover()
    assert keys.tolist() == [1] and sums[:, 0].tolist() == [3]
    assert c.install(np.array([1]), _rows(9), flushes).tolist() == []  # pulled before the flush: not installed
    assert c.install(np.array([1]), _rows(9), c.flushes).tolist() == [1]
    assert c.serve("pull", np.array([3]), None, np.zeros((1, 2), np.float32), None, False) is None


def test_a_stateful_updater_runs_on_the_copy_but_the_owner_gets_the_summed_pushes():
    c = _copies("adagrad")
    c.install(np.array([4]), _rows(1), 0)
    out = np.zeros((1, 2), np.float32)
    c.serve("push", np.array([4, 4]), _rows(0.5, 0.5), out, None, True)  # push_pull: the rows after it
    assert out[0, 0] < 1  # the local view moved (adagrad's step)
    number, pushed, sums, _ = c.take()
    assert pushed.tolist() == [4] and sums[:, 0].tolist() == [1.0]  # raw updates, summed: the owner's rule runs on them
    c.serve("push", np.array([4]), _rows(0.25), None, None, False)
    c.refresh(number, np.array([4]), _rows(0.7))
    c.serve("pull", np.array([4]), None, out, None, False)
    assert out[0, 0] == np.float32(0.7)  # a stateful view restarts at the owner's row
    assert c.take()[2][:, 0].tolist() == [0.25]
