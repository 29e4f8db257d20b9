"""Coordinator terms (membership.takeover.next_term): each takeover's term outranks every earlier
one, grows additively, and fits the header's 16-bit field, so the view admits the newest
coordinator's messages after many takeovers (issue 30, F9)."""

from __future__ import annotations

import pytest

from pskv.membership.takeover import next_term
from pskv.membership.view import View
from pskv.net.dispatch import Verdict
from pskv.net.wire import COORDINATOR, Kind, control, unpack_header

pytestmark = pytest.mark.timeout(60)

CLUSTER = 9


def _from_coordinator(view: View, term: int) -> Verdict:
    """What `view` makes of a TICK stamped with `term`, as it travels (packed, then parsed)."""
    return view.admit(unpack_header(control(Kind.TICK, CLUSTER, COORDINATOR, {}, term)[0]))


def test_twenty_takeovers_terms_increase_fit_the_header_and_are_admitted():
    """24 nodes, 1 backup: the node hosting the coordinator dies 20 times in a row; each successor's
    term is above the last, fits 16 bits, and its messages are admitted while the old ones are fenced."""
    nodes = 24
    view = View(0, nodes, backups=1)
    view.welcome(CLUSTER, {r: f"tcp://127.0.0.1:{5000 + r}" for r in range(nodes)}, host=nodes - 1)
    terms = [view.coordinator_term]
    for step in range(20):
        host = view.coordinator_host
        turn = step % 3  # sometimes a later candidate takes over (the earlier ones died unnoticed)
        term = next_term(view.epoch, view.coordinator_term, turn)
        assert term > terms[-1] and term <= 0xFFFF, (step, terms, term)
        view.coordinator_term, view.coordinator_host = term, sorted(view.alive - {host})[turn]
        assert _from_coordinator(view, term) is Verdict.ACCEPT, (step, term)
        assert _from_coordinator(view, terms[-1]) is Verdict.FENCED, (step, terms[-1])  # the coordinator taken over
        view.change(view.epoch + 1, view.alive - {host})  # the new coordinator fails the old host
        assert _from_coordinator(view, term) is Verdict.ACCEPT, (step, term)
        terms.append(term)
    assert len(view.alive) == nodes - 20
    assert terms[-1] == 8 * 21 + 1  # additive: generation 2 at the first (epoch 1), then one more each (turn 19 % 3)


@pytest.mark.parametrize("epoch,term", [(0, 0), (5, 0), (5, 3 * 8 + 7), (2, 40 * 8), (100, 99 * 8 + 2)])
def test_a_later_turn_outranks_and_every_term_tops_the_epoch_and_the_last_term(epoch, term):
    """Candidates 0..7 of one takeover get increasing terms, all above the term taken over, in a
    generation above the epoch."""
    got = [next_term(epoch, term, turn) for turn in range(8)]
    assert got == sorted(set(got)) and got[0] > term
    assert got[0] // 8 == max(epoch, term // 8) + 1  # the generation: above the epoch it took over in
    assert got[0] == (max(epoch, term // 8) + 1) * 8
