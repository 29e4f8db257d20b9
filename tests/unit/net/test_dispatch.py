"""net/dispatch.py: one handler per kind, the admit gate (accept, hold until released, drop), duties each turn."""

from __future__ import annotations

import threading

import pytest

from pskv.errors import ProtocolError
from pskv.net.dispatch import Dispatcher, Verdict
from pskv.net.wire import Header, Kind

pytestmark = pytest.mark.timeout(30)


class _Inbox:
    """Stands in for Transport.recv: hands out queued messages, then None."""

    def __init__(self, messages):
        self.messages = list(messages)

    polls = 0

    def recv(self, timeout):
        self.polls += 1
        return self.messages.pop(0) if self.messages else None

    def recv_nowait(self):
        return self.messages.pop(0) if self.messages else None

    holding = False
    flushes = 0

    def hold_all(self):
        self.holding = True

    def flush(self):
        self.flushes += 1


def _msg(kind, sender=1):
    return [Header(kind, sender=sender, cluster=5).pack()]


def test_each_kind_goes_to_its_handler_and_garbage_is_counted():
    seen = []
    d = Dispatcher(_Inbox([]), 0, lambda h: Verdict.ACCEPT)
    d.register([Kind.PULL, Kind.PUSH], lambda h, f: seen.append(("server", h.kind)))
    d.register([Kind.ACK], lambda h, f: seen.append(("endpoint", h.kind)))
    for frames in (_msg(Kind.PUSH), _msg(Kind.ACK), _msg(Kind.PULL), [b"garbage"], _msg(Kind.HELLO)):
        d.dispatch(frames)
    assert seen == [("server", Kind.PUSH), ("endpoint", Kind.ACK), ("server", Kind.PULL)]
    assert d.dropped == 2  # the garbage, and a kind nobody handles
    with pytest.raises(ProtocolError, match="two handlers for PUSH"):
        d.register([Kind.PUSH], lambda h, f: None)


def test_held_messages_are_replayed_in_order_when_released():
    welcomed = threading.Event()
    seen = []
    d = Dispatcher(_Inbox([]), 0, lambda h: Verdict.ACCEPT if welcomed.is_set() else
                   (Verdict.HOLD if h.sender == 1 else Verdict.DROP))
    d.register([Kind.PULL, Kind.PUSH], lambda h, f: seen.append((h.kind, h.sender)))
    d.dispatch(_msg(Kind.PUSH))
    d.dispatch(_msg(Kind.PULL, sender=2))  # dropped: not a peer we could hold for
    d.dispatch(_msg(Kind.PULL))
    assert seen == [] and d.held() == 2 and d.dropped == 1
    welcomed.set()
    d.release_held()
    assert seen == [(Kind.PUSH, 1), (Kind.PULL, 1)] and d.held() == 0


def test_run_dispatches_runs_duties_and_survives_a_failing_handler():
    stop = threading.Event()
    turns, seen = [], []

    def boom(h, f):
        raise RuntimeError("handler bug")

    d = Dispatcher(_Inbox([_msg(Kind.ACK), _msg(Kind.PULL)]), 0, lambda h: Verdict.ACCEPT)
    d.register([Kind.ACK], boom)
    d.register([Kind.PULL], lambda h, f: seen.append(h.kind))

    def duty(now):
        turns.append(now)
        if len(turns) >= 3:
            stop.set()

    d.every(duty)
    d.run(stop)
    assert seen == [Kind.PULL] and len(turns) >= 2 and d.dropped == 1


def test_run_takes_a_burst_with_one_poll_and_still_runs_duties():
    """Messages already waiting are dispatched without a poll each, _BURST at most per turn, in
    order; the duties run after every burst."""
    from pskv.net import dispatch

    stop = threading.Event()
    n = dispatch._BURST + 10
    inbox = _Inbox([[Header(Kind.ACK, sender=1, cluster=5, request_id=i).pack()] for i in range(n)])
    seen, turns = [], []
    d = Dispatcher(inbox, 0, lambda h: Verdict.ACCEPT)
    d.register([Kind.ACK], lambda h, f: seen.append(h.request_id))

    def duty(now):
        turns.append(len(seen))
        if len(turns) >= 3:
            stop.set()

    d.every(duty)
    d.run(stop)
    assert seen == list(range(n))
    assert turns[:2] == [dispatch._BURST, n]  # a full burst, then the rest: duties ran in between
    assert inbox.polls == 3
    # what the handlers send is held back and leaves after each burst and after the duties
    assert inbox.holding and inbox.flushes == 2 * inbox.polls


def test_held_messages_past_the_bound_fail_the_node_and_are_counted(monkeypatch):
    """One message more than _MAX_HELD to hold is dropped, counted and logged through the drops, and
    the node fails (once) with a NodeFailure saying what was held and why; what was held stays held."""
    from pskv.errors import NodeFailure
    from pskv.net import dispatch

    monkeypatch.setattr(dispatch, "_MAX_HELD", 3)
    failures = []
    d = Dispatcher(_Inbox([]), 4, lambda h: Verdict.HOLD, on_refused=failures.append)
    d.register([Kind.PUSH], lambda h, f: None)
    for i in range(5):
        d.dispatch([Header(Kind.PUSH, sender=1, cluster=5, epoch=7, request_id=i).pack()])
    assert len(failures) == 1 and isinstance(failures[0], NodeFailure) and failures[0].node_id == 4
    assert d.held() == 3 and d.overflowed == 2 and d.dropped == 2 and d._drops.total == 2
    message = str(failures[0])
    assert message.startswith("node 4 held 3 messages that came ahead of its membership view")
    assert "waiting for the WELCOME, MEMBERSHIP or MOVED that would admit them" in message
    assert "from node 1, epoch 7) and stops" in message and "<Push req=3.0 " in message


def test_a_burst_gives_runs_of_consecutive_messages_to_a_batched_handler():
    """Consecutive messages of a Batched handler's kinds arrive as one run each, in order; another
    handler's message, or a lone one, splits them (a lone one goes to `one`); garbage in between is
    dropped without ending the run; a failing run is counted and the loop goes on."""
    from pskv.net.dispatch import Batched
    seen = []
    d = Dispatcher(_Inbox([]), 0, lambda h: Verdict.ACCEPT)
    d.register([Kind.PULL, Kind.PUSH], Batched(lambda h, f: seen.append(("one", h.kind, h.sender)),
                                               lambda run: seen.append(("many", [(h.kind, h.sender) for h, f in run]))))
    d.register([Kind.ACK], lambda h, f: seen.append(("ack", h.kind, h.sender)))
    d.dispatch_burst([_msg(Kind.PULL, 1), _msg(Kind.PUSH, 2), [b"garbage"], _msg(Kind.PULL, 3), _msg(Kind.ACK, 1),
                      _msg(Kind.PUSH, 1), _msg(Kind.ACK, 2), _msg(Kind.PULL, 2), _msg(Kind.PULL, 1)])
    assert seen == [("many", [(Kind.PULL, 1), (Kind.PUSH, 2), (Kind.PULL, 3)]), ("ack", Kind.ACK, 1),
                    ("one", Kind.PUSH, 1), ("ack", Kind.ACK, 2), ("many", [(Kind.PULL, 2), (Kind.PULL, 1)])]
    assert d.dropped == 1

    def broken(run):
        raise RuntimeError("bug")
    d2 = Dispatcher(_Inbox([]), 0, lambda h: Verdict.ACCEPT)
    d2.register([Kind.PULL], Batched(lambda h, f: None, broken))
    d2.register([Kind.ACK], lambda h, f: seen.append(("after", h.sender)))
    d2.dispatch_burst([_msg(Kind.PULL), _msg(Kind.PULL), _msg(Kind.ACK, 4)])
    assert d2.dropped == 1 and seen[-1] == ("after", 4)
