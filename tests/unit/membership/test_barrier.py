"""membership.barrier.LocalBarrier and membership.waiting.Patience, without processes: a bound worker
counts as arrived when its thread enters another worker's barrier, a timeout names the workers
that never came, and a long wait logs who it waits for (issue 33)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from pskv.errors import BarrierTimeout
from pskv.membership.barrier import LocalBarrier
from pskv.membership.waiting import Patience, missing

pytestmark = pytest.mark.timeout(30)


class _W:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<Worker {self.name}>"


def _barrier(**kwargs):
    rounds: list[float | None] = []
    return LocalBarrier(rounds.append, lambda: None, **kwargs), rounds


def test_a_bound_workers_thread_stands_in_for_it():
    """Worker a is bound to this thread: b's barrier from this thread passes without a; so does a's own."""
    barrier, rounds = _barrier()
    a, b = _W("a"), _W("b")
    barrier.join(a)
    barrier.join(b)
    barrier.bind(a, threading.get_ident())
    barrier.wait(5, b)
    assert len(rounds) == 1
    barrier.leave(b)
    barrier.wait(5, a)
    assert len(rounds) == 2


def test_a_bound_worker_counts_only_in_its_own_thread():
    """From another thread, b's barrier still waits for a (bound to the main thread) and times out,
    naming it; the arrival is withdrawn, so a later barrier with both passes."""
    barrier, rounds = _barrier()
    a, b = _W("a"), _W("b")
    barrier.join(a)
    barrier.join(b)
    barrier.bind(a, threading.get_ident())
    errors: list[BaseException] = []

    def other() -> None:
        try:
            barrier.wait(0.5, b)
        except BarrierTimeout as exc:
            errors.append(exc)

    t = threading.Thread(target=other, name="test-other", daemon=True)
    t.start()
    t.join(10)
    assert len(errors) == 1 and str(errors[0]) == (
        "barrier on node 0: 1 of this node's open worker(s) did not arrive within 0.5 s: <Worker a>; every open "
        "worker must call barrier(), or close()")
    assert rounds == []
    t = threading.Thread(target=barrier.wait, args=(10, b), name="test-other-2", daemon=True)
    t.start()
    time.sleep(0.1)
    barrier.wait(10, a)
    t.join(10)
    assert len(rounds) == 1 and not t.is_alive()


def test_a_long_local_wait_logs_the_missing_workers(caplog):
    """A worker waiting for another logs, every log_every seconds, which workers have not arrived."""
    barrier, _ = _barrier(rank=3, log_every=0.2, patience=600)
    a, b = _W("a"), _W("b")
    barrier.join(a)
    barrier.join(b)
    with caplog.at_level(logging.WARNING, logger="pskv.wait"), pytest.raises(BarrierTimeout):
        barrier.wait(0.9, b)
    lines = [r.getMessage() for r in caplog.records if r.name == "pskv.wait"]
    assert lines and lines[0] == ("node 3: <Worker b> still waiting in the node's barrier for 1 of its 2 open "
                                  "worker(s): <Worker a> (0 s of 0.9 s); every open worker (node.run()'s, each "
                                  "node.worker() not closed yet) must call barrier(), or close()"), lines


def test_patience_logs_every_interval_with_the_limit(caplog):
    """check() logs nothing before `every` seconds, then once per interval, with the time and the limit."""
    p = Patience(0.3, 600, lambda: "node 0: still waiting for node(s) [1] in barrier #2")
    with caplog.at_level(logging.WARNING, logger="pskv.wait"):
        p.check()
        assert p.logged == 0
        time.sleep(0.35)
        p.check()
        p.check()
    assert p.logged == 1
    assert [r.getMessage() for r in caplog.records] == [
        "node 0: still waiting for node(s) [1] in barrier #2 (0 s of 600 s)"]
    assert missing({0, 1, 2}, [0]) == "node(s) [1, 2]" and missing({0}, [0]) == "the other nodes"
