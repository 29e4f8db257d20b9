"""net/drops.py: dropped messages are counted per peer and logged at most once a minute per peer."""

from __future__ import annotations

import logging

import pytest

from pskv.net.drops import Drops, peer_of

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def drops(caplog):
    caplog.set_level(logging.WARNING, logger="test.drops")
    clock = FakeClock()
    return Drops(logging.getLogger("test.drops"), "node 1", clock=clock), clock, caplog


def test_a_flood_from_one_peer_costs_one_line_a_minute(drops):
    """The first drop is logged; 999 more within the minute only count; the next after it says how many."""
    d, clock, caplog = drops
    for i in range(1000):
        clock.now += 0.001
        d.add("node 3", f"garbage #{i}")
    assert [r.getMessage() for r in caplog.records] == [
        "node 1 dropped a message from node 3: garbage #0 (more from it are counted, one line a minute)"]
    clock.now += 60
    d.add("node 3", "garbage #1000")
    assert caplog.records[-1].getMessage() == "node 1 dropped 1000 message(s) from node 3 in the last 61 s; " \
                                              "the last: garbage #1000"
    assert d.total == 1001 and len(caplog.records) == 2


def test_peers_are_counted_apart_and_flush_writes_quiet_ones(drops):
    """Each peer has its own minute; flush() logs the counts of peers whose minute is over, once."""
    d, clock, caplog = drops
    d.add("node 2", "a")
    d.add("10.0.0.9 (no valid header)", "b")
    d.add("node 2", "c")
    assert len(caplog.records) == 2
    d.flush()
    assert len(caplog.records) == 2  # the minute is not over
    clock.now += 60
    d.flush()
    d.flush()
    assert [r.getMessage() for r in caplog.records[2:]] == ["node 1 dropped 1 message(s) from node 2 in the last "
                                                            "60 s; the last: c"]


def test_peer_of_names_the_sender_or_says_unknown():
    """A header's sender names the peer; bytes without one (no TCP peer address) are 'unknown'."""
    assert peer_of([b"x"], 3) == "node 3"
    assert peer_of([b"x"], -1) == "the coordinator"
    assert peer_of([b"x"]) == "unknown (no valid header)"
    assert peer_of([]) == "unknown (no valid header)"
