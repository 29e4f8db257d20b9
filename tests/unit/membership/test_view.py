"""membership/view.py and health.py: who may talk to this node, and the node's first failure."""

from __future__ import annotations

import pytest

from pskv.errors import ClosedError, NodeFailure
from pskv.membership.health import Health
from pskv.membership.view import View
from pskv.net.dispatch import Verdict
from pskv.net.wire import COORDINATOR, Header, Kind

pytestmark = pytest.mark.timeout(30)


def _h(kind, sender, cluster):
    return Header(kind, sender=sender, cluster=cluster)


def test_admit_before_and_after_welcome():
    view = View(0, 3)
    assert view.epoch == 0 and not view.welcomed
    assert view.admit(_h(Kind.WELCOME, COORDINATOR, 9)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.ABORT, COORDINATOR, 0)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.TABLE_OK, COORDINATOR, 9)) is Verdict.DROP  # only WELCOME/ABORT come first
    assert view.admit(_h(Kind.PUSH, 1, 9)) is Verdict.HOLD  # a peer welcomed before us
    assert view.admit(_h(Kind.PUSH, 1, 0)) is Verdict.DROP
    view.welcome(9, {0: "a:1", 1: "b:2", 2: "c:3"})
    assert (view.epoch, view.alive, view.address(2), view.cluster) == (1, frozenset({0, 1, 2}), "c:3", 9)
    assert view.admit(_h(Kind.PUSH, 1, 9)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.PUSH, 1, 8)) is Verdict.DROP  # another cluster
    assert view.admit(_h(Kind.PUSH, 3, 9)) is Verdict.DROP  # no such rank
    joiner = Header(Kind.LOCALIZE, sender=3, cluster=9, epoch=2)  # it joined: MEMBERSHIP{joined} is on its way
    assert view.admit(joiner) is Verdict.HOLD
    assert view.admit(Header(Kind.LOCALIZE, sender=3, cluster=8, epoch=2)) is Verdict.DROP
    assert view.admit(_h(Kind.TABLE_OK, COORDINATOR, 9)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.TABLE_OK, COORDINATOR, 8)) is Verdict.DROP
    assert view.admit(_h(Kind.PUSH, COORDINATOR, 9)) is Verdict.DROP  # the coordinator sends no data
    assert view.admit(_h(Kind.WELCOME, 1, 9)) is Verdict.DROP  # a peer cannot speak for the coordinator
    assert view.key_ranges(10).bounds.tolist() == [0, 3, 6, 10]


def test_health_records_the_first_failure_once_and_raises_fresh_copies():
    health = Health(2)
    calls = []
    health.on_failure(lambda error_for: calls.append(error_for()))
    health.check()
    first = NodeFailure("node 1 died", 1, "b:2")
    assert health.fail(first) is True and health.fail(NodeFailure("later", 0, "")) is False
    assert len(calls) == 1 and str(calls[0]) == "node 1 died" and calls[0] is not first
    with pytest.raises(NodeFailure, match="node 1 died") as one:
        health.check()
    with pytest.raises(NodeFailure) as two:
        health.check()
    assert one.value is not two.value and one.value.__cause__ is first and health.state == "failed"
    health.closed = True
    with pytest.raises(ClosedError, match="node 2 was shut down"):
        health.check()
    assert health.state == "closed"
