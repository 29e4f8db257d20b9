"""placement/chains.py: chains of the starting nodes, and the extra copies of nodes that joined."""

from __future__ import annotations

from pskv.placement.chains import Chains, joined_ranges


def test_joiners_take_b_ranges_each_spread_by_rank():
    assert joined_ranges(3, 3, 1) == [0] and joined_ranges(4, 3, 1) == [1] and joined_ranges(6, 3, 1) == [0]
    assert joined_ranges(4, 4, 2) == [0, 1] and joined_ranges(5, 4, 2) == [2, 3] and joined_ranges(6, 4, 2) == [0, 1]
    assert joined_ranges(5, 2, 1) == [1]


def test_a_joiner_ends_its_ranges_chains_and_changes_no_head():
    """3 nodes, 1 backup: node 3 joined and ends range 0's chain; heads and the other chains stay."""
    before, after = Chains(3, 1, {0, 1, 2}), Chains(3, 1, {0, 1, 2, 3})
    assert [after.chain(r) for r in range(3)] == [(0, 1, 3), (1, 2), (2, 0)]
    assert after.heads.tolist() == before.heads.tolist() == [0, 1, 2]
    assert after.successor(0, 1) == 3 and after.successor(0, 3) == -1 and after.headed_by(3) == []


def test_a_joiner_stays_at_the_end_when_starting_nodes_die():
    """Without node 0, range 0 moves to node 1 (its first backup) and gets node 2 before the joiner;
    only joiners left: no chain at all (nobody may head it)."""
    chains = Chains(3, 1, {1, 2, 3})
    assert [chains.chain(r) for r in range(3)] == [(1, 2, 3), (1, 2), (2, 1)]
    assert Chains(3, 1, {3, 4}).heads.tolist() == [-1, -1, -1]
    assert Chains(3, 2, {0, 2, 3, 4}).chain(0) == (0, 2, 3, 4)  # two joiners' ranges meet at range 0


def test_unheaded_names_ranges_whose_head_holds_no_whole_copy():
    """Node 2 fills range 0 after node 0 died; if node 1 dies too, range 0's head would be node 2,
    whose copy is not whole: that range is lost although the joiner 3 holds it whole."""
    chains = Chains(3, 1, {2, 3})
    whole = [{3}, {2}, {2}]
    assert chains.chain(0) == (2, 3) and chains.unheaded(whole) == [0]
    assert Chains(3, 1, {1, 2, 3}).unheaded([{1, 3}, {1, 2}, {2}]) == []
