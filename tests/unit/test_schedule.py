"""pskv.schedule on a 1-node cluster: what each policy publishes, the priority model, the dependency
check, and the errors of a scheduler that cannot go on."""

from __future__ import annotations

import time

import numpy as np
import pytest

import pskv
from pskv import schedule

pytestmark = pytest.mark.timeout(60)


def _drive(node, sched, rounds: int, sizes=None) -> list[np.ndarray]:
    """Run `rounds` rounds with one worker; report sizes[j] for each coordinate j it gets."""
    got = []
    sched.start(rounds)

    def work(w):
        sched.begin(w)
        for t in range(rounds):
            chosen = sched.take(w, t, timeout=20)
            got.append(chosen)
            if sizes is not None:
                sched.report(w, t, chosen, sizes[chosen])
            sched.end_round(w)

    node.run(work, threads=1)
    sched.close(timeout=20)
    return got


def test_cyclic_walks_the_coordinates_in_order(node):
    got = _drive(node, schedule.Scheduler(node, "c", coords=10, per_round=4, policy="cyclic"), 4)
    assert [g.tolist() for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]


def test_shotgun_draws_distinct_coordinates_and_repeats_for_a_seed():
    runs = []
    for _ in range(2):  # (rounds are clocks: one scheduler per cluster run)
        with pskv.init() as node:
            runs.append(_drive(node, schedule.Scheduler(node, "s", coords=50, per_round=8, policy="shotgun", seed=4), 5))
    assert all(len(np.unique(g)) == 8 for g in runs[0])
    assert [g.tolist() for g in runs[0]] == [g.tolist() for g in runs[1]]


def test_a_second_scheduler_on_used_clocks_is_refused(node):
    _drive(node, schedule.Scheduler(node, "first", coords=10, per_round=2, policy="cyclic"), 2)
    with pytest.raises(schedule.ScheduleError, match="once per cluster run"):
        schedule.Scheduler(node, "second", coords=10, per_round=2).start(2)


def test_strads_draws_what_changed_most(node):
    """After the first reports, coordinates that reported large changes fill the rounds."""
    sizes = np.zeros(200)
    sizes[:10] = 5.0  # ten coordinates keep changing a lot, the others not at all
    sched = schedule.Scheduler(node, "p", coords=200, per_round=5, candidates=20, eta=1e-9, seed=1)
    got = _drive(node, sched, 30, sizes)
    late = np.concatenate(got[10:])  # (coordinates never drawn keep their initial priority 1)
    hot = np.isin(late, np.arange(10)).sum() / 10  # draws per hot coordinate
    cold = (~np.isin(late, np.arange(10))).sum() / 190
    assert hot > 4 * cold
    assert sched.stats()["rounds"] == 30 and sched.stats()["updates"] == 150


def test_correlation_check_bounds_pairs_and_sums():
    rng = np.random.default_rng(0)
    base = rng.standard_normal(100)
    cols = np.stack([base + 0.1 * rng.standard_normal(100)] * 2 + [rng.standard_normal(100) for _ in range(6)], axis=1)
    cols -= cols.mean(axis=0)
    cols /= np.linalg.norm(cols, axis=0)
    safe = schedule.correlation_check(lambda idx: cols[:, idx], rho=0.5)(np.arange(8))
    assert 0 in safe and 1 not in safe  # the twin of coordinate 0 waits for another round
    corr = np.abs(cols[:, safe].T @ cols[:, safe])
    np.fill_diagonal(corr, 0)
    assert corr.max() < 0.5 and corr.sum(axis=1).max() < 1.0


def test_a_slow_dependency_function_stops_the_scheduler_with_a_clear_error(node):
    def slow(candidates):
        time.sleep(0.3)
        return candidates

    sched = schedule.Scheduler(node, "slow", coords=20, per_round=2, dependencies=slow, max_seconds=0.1)
    sched.start(3)
    w = node.worker()
    sched.begin(w)  # (node 0's first begin starts the scheduler's thread)
    with pytest.raises(schedule.ScheduleError, match="dependencies\\(\\) took"):
        sched.close(timeout=20)
    w.close()


def test_bad_options_raise():
    with pytest.raises(pskv.ConfigError, match="policy"):
        schedule.Scheduler(None, "x", coords=5, per_round=2, policy="random")
    with pytest.raises(pskv.ConfigError, match="per_round"):
        schedule.Scheduler(None, "x", coords=5, per_round=9)
