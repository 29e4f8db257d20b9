"""Membership epochs with backups: chains of live nodes per key range (placement/chains.py), the
view's gate by epoch and membership (fencing), and the coordinator's MEMBERSHIP / SYNCED protocol."""

from __future__ import annotations

import pytest

from pskv.membership.view import View
from pskv.net.dispatch import Verdict
from pskv.net.wire import Header, Kind
from pskv.placement.chains import Chains

from helpers import together, wait_until
from test_coordinator import make_coordinator, make_fake  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)


def test_chains_follow_the_ring_and_lose_only_dead_members():
    """4 nodes, 1 backup: range r lives on [r, r+1]; without node 1, range 1 moves to its backup 2
    and range 0 gets node 2 as its new backup (the docstring's example)."""
    full = Chains(4, 1, range(4))
    assert [full.chain(r) for r in range(4)] == [(0, 1), (1, 2), (2, 3), (3, 0)]
    after = Chains(4, 1, [0, 2, 3])
    assert [after.chain(r) for r in range(4)] == [(0, 2), (2, 3), (2, 3), (3, 0)]
    assert after.heads.tolist() == [0, 2, 2, 3]
    assert after.successor(1, 2) == 3 and after.successor(1, 3) == -1 and after.successor(1, 0) == -1
    assert after.headed_by(2) == [1, 2]
    assert [len(Chains(3, 2, [0, 2]).chain(r)) for r in range(3)] == [2, 2, 2]  # B is capped by the survivors


def _h(kind, sender, epoch, cluster=9):
    return Header(kind, sender=sender, cluster=cluster, epoch=epoch)


def test_view_holds_newer_epochs_and_fences_non_members():
    view = View(0, 3, backups=1)
    view.welcome(9, {0: "a", 1: "b", 2: "c"})
    assert view.epoch == 1 and view.chains.chain(2) == (2, 0)
    assert view.admit(_h(Kind.PUSH, 1, 1)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.CHAIN, 1, 2)) is Verdict.HOLD  # it saw a membership change we did not yet
    previous = view.change(2, [0, 1])
    assert previous.chain(2) == (2, 0) and view.chains.chain(2) == (0, 1)
    assert view.admit(_h(Kind.CHAIN, 1, 2)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.PUSH, 1, 1)) is Verdict.ACCEPT  # an older epoch from a member: re-routed
    assert view.admit(_h(Kind.ACK, 2, 1)) is Verdict.FENCED  # node 2 is out: nothing of it counts
    assert view.admit(_h(Kind.PUSH, 7, 2)) is Verdict.DROP  # no such rank


def _membership(fake):
    return fake.events.memberships


def test_coordinator_goes_on_without_a_dead_node_once_copies_are_whole(make_coordinator, make_fake):
    """backups=1: a failure makes epoch 2 (MEMBERSHIP to the survivors and to the dead); a second one
    after every survivor said SYNCED makes epoch 3; barriers no longer wait for the dead."""
    coord = make_coordinator(4, backups=1)
    fakes = [make_fake(coord.address, r, 4, backups=1) for r in range(4)]
    seen = [_membership(f) for f in fakes]
    together(*[f.join for f in fakes])
    coord.report_failure(3, "process was killed by SIGKILL")
    wait_until(lambda: all(seen[r] for r in (0, 1, 2)), what="MEMBERSHIP epoch 2")
    assert seen[0][0] == {"epoch": 2, "alive": [0, 1, 2], "dead": 3, "reason": "process was killed by SIGKILL", "left": False}
    assert not any(f.failures for f in fakes[:3])
    for f in fakes[:3]:
        f.client.synced(2)
    together(*[lambda f=f: f.client.barrier(timeout=10) for f in fakes[:3]])  # node 3 is not waited for
    wait_until(lambda: all(len(w) == 2 for w in coord.changes.whole), what="SYNCED from every survivor")
    coord.report_failure(1, "process was killed by SIGKILL")
    wait_until(lambda: len(seen[0]) == 2 and len(seen[2]) == 2, what="MEMBERSHIP epoch 3")
    assert seen[2][1]["epoch"] == 3 and seen[2][1]["alive"] == [0, 2]


def test_coordinator_stops_the_cluster_when_a_copy_is_still_filling(make_coordinator, make_fake):
    """A second death before the survivors said SYNCED may have taken a range's last whole copy:
    every node gets NodeFailure naming it, and the reason says why."""
    coord = make_coordinator(3, backups=1)
    fakes = [make_fake(coord.address, r, 3, backups=1) for r in range(3)]
    seen = [_membership(f) for f in fakes]
    together(*[f.join for f in fakes])
    coord.report_failure(2, "gone")
    wait_until(lambda: seen[0] and seen[1], what="MEMBERSHIP epoch 2")
    fakes[0].client.synced(2)  # node 1 never says it
    coord.report_failure(0, "gone too")
    wait_until(lambda: fakes[1].failures, what="NodeFailure on node 1")
    (exc,) = fakes[1].failures
    assert exc.node_id == 0 and "had not finished copying" in str(exc) and "[1]" in str(exc)


def test_coordinator_without_backups_fails_fast(make_coordinator, make_fake):
    coord = make_coordinator(2)
    fakes = [make_fake(coord.address, r, 2) for r in range(2)]
    seen = [_membership(f) for f in fakes]
    together(*[f.join for f in fakes])
    coord.report_failure(1, "gone")
    wait_until(lambda: fakes[0].failures, what="NodeFailure")
    assert not seen[0]


def test_two_backups_survive_two_deaths_at_once(make_coordinator, make_fake):
    """backups=2 on 4 nodes: nodes 1 and 2 die together, before any copy was filled again; every
    range still has a whole copy on 0 or 3, so the cluster goes on (epochs 2 and 3)."""
    coord = make_coordinator(4, backups=2)
    fakes = [make_fake(coord.address, r, 4, backups=2) for r in range(4)]
    seen = [_membership(f) for f in fakes]
    together(*[f.join for f in fakes])
    coord.report_failure(1, "gone")
    coord.report_failure(2, "gone")
    wait_until(lambda: len(seen[0]) == 2 and len(seen[3]) == 2, what="MEMBERSHIP epochs 2 and 3")
    assert seen[3][1]["alive"] == [0, 3] and not fakes[0].failures and not fakes[3].failures


def test_view_hears_only_the_coordinator_of_its_term():
    """After a takeover (membership.takeover) the old coordinator's messages are fenced off and the
    new one's wait until its MOVED set the term."""
    view = View(1, 3, backups=1)
    view.welcome(9, {0: "a", 1: "b", 2: "c"}, host=0)
    assert view.coordinator_host == 0 and view.coordinator_term == 0
    assert view.admit(_h(Kind.TICK, -1, 0)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.MEMBERSHIP, -1, 2)) is Verdict.HOLD  # the successor's, before its MOVED
    view.coordinator_host, view.coordinator_term = 1, 2
    assert view.admit(_h(Kind.MEMBERSHIP, -1, 2)) is Verdict.ACCEPT
    assert view.admit(_h(Kind.TICK, -1, 0)) is Verdict.FENCED  # the old coordinator woke up
    assert view.admit(_h(Kind.TICK, -1, 2, cluster=5)) is Verdict.DROP
