"""pskv.schedule: model-parallel scheduling in the manner of Petuum's STRADS.

A `Scheduler` picks, round after round, which coordinates (parameters) the workers update next:
by priority (coordinates whose last change was large are drawn more often), keeping only a set
whose members do not depend on each other (updated in parallel, dependent coordinates interfere),
and it dispatches that set to every worker. It runs as an extra thread on node 0 with a worker of
its own, over pskv tables and worker clocks:

    sched = pskv.schedule.Scheduler(node, "lasso", coords=p, per_round=16, policy="strads",
                                    dependencies=safe_subset, seed=0)     # collective
    sched.start(rounds)                                       # node 0: its thread starts at the first begin()
    # every worker thread:
    sched.begin(w)                            # once: its first clock (push what round 0 needs first)
    for t in range(rounds):
        chosen = sched.take(w, t)             # waits until round t's set is out and round t-1 is done
        ... compute on `chosen`, push what the round produced, wait for it ...
        sched.report(w, t, chosen, sizes)     # |change| per coordinate (one worker suffices)
        sched.end_round(w)                    # this worker's clock
    sched.stop(); sched.close()               # node 0: (stop: workers ended early) the thread's end

Clocks order everything: a worker starts round t at clock t + 1 and `take` waits for the global
clock t + 1, which means every worker ended round t - 1 (its pushes are applied) and the scheduler
published round t. The scheduler publishes round t + 1 as soon as the global clock reaches t + 1,
so it chooses while the workers compute round t (pipelined), and it uses the sizes reported for
round t - 2, which are in by then and not yet overwritten whatever the timing (reports go to one of
three tables by round: round t's cannot overwrite them), so a run is deterministic for a seed.
Policies: "cyclic" (P coordinates in order), "shotgun" (P uniformly at random, no dependency
check: Bradley et al.'s Shotgun), "strads" (C candidates drawn without replacement, each draw with
probability proportional to `priority(sizes)` (by Efraimidis and Spirakis' keys: O(coords), no
cumulative sums), default |change| + eta x the largest |change| (eta = 0.01: a coordinate that
stopped moving is still drawn now and then; uniform once every last change is 0), then
`dependencies(candidates)` keeps a safe subset, earlier draws first, of which the first P go out;
schedule/dependencies.py has two such functions, by correlation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from ..errors import ConfigError, PskvError, WaitTimeout
from .dependencies import correlation_check, sparse_correlation_check

__all__ = [
    "POLICIES",
    "RoundSums",
    "ScheduleError",
    "Scheduler",
    "correlation_check",
    "sparse_correlation_check",
]

log = logging.getLogger(__name__)

POLICIES = ("strads", "shotgun", "cyclic")
_SLOTS = 3  # published sets kept: round t being computed, t + 1 being published, one spare


class ScheduleError(PskvError):
    """The scheduler cannot go on: a dependency function too slow or failing, a bad set."""


class Scheduler:
    """STRADS-style round scheduler over `coords` coordinates (see the module doc)."""

    def __init__(
        self,
        node,
        name: str,
        coords: int,
        per_round: int,
        *,
        policy: str = "strads",
        candidates: int | None = None,
        priority: Callable[[np.ndarray], np.ndarray] | None = None,
        dependencies: Callable[[np.ndarray], np.ndarray] | None = None,
        seed: int = 0,
        eta: float = 1e-2,
        max_seconds: float = 5.0,
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"scheduler policy {policy!r}: use one of {', '.join(POLICIES)}")
        if not 1 <= per_round <= coords:
            raise ConfigError(f"scheduler {name!r}: per_round={per_round} must be in [1, coords={coords}]")
        self.node, self.name, self.coords, self.per_round = node, name, int(coords), int(per_round)
        self.policy = policy
        self.candidates = min(int(candidates or 4 * per_round), self.coords)
        self.priority = priority or (
            lambda sizes: (
                sizes + eta * sizes.max()
                if sizes.max() > 0  # (exploration: eta
                else np.ones_like(sizes)
            )
        )  # of the largest; nothing moves: uniform)
        self.dependencies = dependencies
        self.max_seconds = float(max_seconds)
        self._rng = np.random.default_rng(seed)
        self._sizes = np.ones(self.coords)  # the priority model: the last reported |change| per coordinate
        width = self.per_round + 1  # a set: its size, then its coordinates
        node.table(f"{name}-sets", rows=_SLOTS * width, dim=1, dtype="float64")
        # reports of round r go to table r % 3: (size, round) per coordinate. Three, not two: the
        # scheduler reads round r's at iteration r + 3 while workers may report round r + 2, which
        # with two tables overwrote some of round r's first, so what it learned (and a run) depended
        # on timing (a clean-clone CI run caught it once, once shared memory made reports instant)
        for parity in (0, 1, 2):
            node.table(f"{name}-sizes{parity}", rows=self.coords, dim=2, dtype="float64", init=-1.0)
        self._width = width
        self._chosen: dict[int, np.ndarray] = {}  # round -> the set it published (node 0)
        self._thread: threading.Thread | None = None
        self._rounds: int | None = None  # node 0, after start(): rounds to publish
        self._launch_lock = threading.Lock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self.choose_seconds = 0.0  # time in choosing (priorities, sampling, dependencies)
        self.wait_seconds = 0.0  # time waiting for the workers
        self.rounds = 0
        self.updates = 0  # coordinates published, over every round

    # ---- node 0: the scheduler thread ------------------------------------------------------------
    def start(self, rounds: int) -> None:
        """Publish `rounds` rounds (node 0 only; other nodes: a no-op). Call it before the workers
        start (before node.run); the thread starts at node 0's first `begin()`, and its worker holds
        the global clock until round 0 is out. While it runs, no worker may wait in a barrier (the
        scheduler's worker never arrives)."""
        if self.node.clocks.global_clock != 0:
            raise ScheduleError(
                f"scheduler {self.name!r}: the cluster's clocks are at "
                f"{self.node.clocks.global_clock}, not 0; rounds are clocks, so a scheduler runs "
                "first and once per cluster run"
            )
        if self.node.rank == 0:
            self._rounds = int(rounds)

    def _launch(self) -> None:
        """Node 0's first begin(): register the scheduler's worker and start its thread. Not earlier:
        a worker registered before node.run's workers could tick node 0's clock ahead while they did
        not exist yet (node.run's workers start at clock 0), so the other nodes passed rounds that
        node 0's workers had not pushed (a CI run caught it: wrong totals in mf ccd)."""
        with self._launch_lock:
            if self._thread is not None or self._rounds is None:
                return
            w = self.node.worker()  # every worker of node 0's run is registered: none has ticked yet
            self._thread = threading.Thread(
                target=self._run, args=(w, self._rounds), name="pskv-scheduler", daemon=True
            )
            self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Wait for the scheduler thread; raises its error. Node 0 logs its share of time."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._stop.set()
                raise ScheduleError(f"scheduler {self.name!r} did not finish within {timeout} s")
        if self._error is not None:
            raise ScheduleError(f"scheduler {self.name!r} failed: {self._error!r}") from self._error

    def _run(self, w, rounds: int) -> None:
        try:
            sets = w.table(f"{self.name}-sets")
            for t in range(rounds):
                if self._stop.is_set():
                    return
                if t >= 2:
                    begun = time.perf_counter()
                    if not self._wait_clock(w, t):  # every worker ended round t - 2 (and so read round t - 3's
                        return  # slot, and reported round t - 3, during t - 2); or stop() came first
                    self.wait_seconds += time.perf_counter() - begun
                    self._learn(w, t - 3)
                begun = time.perf_counter()
                chosen = self._choose(t)
                self.choose_seconds += time.perf_counter() - begun
                self._chosen[t] = chosen
                self.updates += len(chosen)
                self._chosen.pop(t - 3, None)
                row = np.zeros(self._width)
                row[0], row[1 : 1 + len(chosen)] = len(chosen), chosen
                slot = (t % _SLOTS) * self._width
                sets.set(np.arange(slot, slot + self._width), row[:, None]).wait()
                w.clock()
                self.rounds += 1
        except BaseException as exc:  # kept for close(), and the workers stall loudly
            self._error = exc
            log.error("scheduler %r failed", self.name, exc_info=exc)
        finally:
            w.close()

    def stop(self) -> None:
        """Node 0, once every worker ended its last round: the thread stops publishing (workers that
        stop before `rounds`, e.g. converged, call it; with all rounds run it changes nothing)."""
        self._stop.set()

    def _wait_clock(self, w, t: int) -> bool:
        """wait_clock(t), watching for stop(): False if stopped first."""
        while not self._stop.is_set():
            try:
                w.wait_clock(t, timeout=0.2)
                return True
            except WaitTimeout:
                pass
        return False

    def _learn(self, w, r: int) -> None:
        """Fold the sizes reported for round r into the priority model."""
        chosen = self._chosen.get(r)
        if chosen is None or not len(chosen):
            return
        rows = w.table(f"{self.name}-sizes{r % 3}").pull(chosen)
        fresh = rows[:, 1] == r
        self._sizes[chosen[fresh]] = rows[fresh, 0]

    def _choose(self, t: int) -> np.ndarray:
        p, k = self.coords, self.per_round
        if self.policy == "cyclic":
            return (np.arange(t * k, (t + 1) * k) % p).astype(np.int64)
        if self.policy == "shotgun":
            return np.sort(self._rng.choice(p, k, replace=False)).astype(np.int64)
        weights = np.asarray(self.priority(self._sizes.copy()), np.float64)
        if weights.shape != (p,) or not np.all(weights >= 0) or not weights.sum() > 0:
            raise ScheduleError(f"priority() returned {weights.shape} weights (need ({p},), >= 0, not all 0)")
        with np.errstate(divide="ignore"):  # (weight 0: key inf, drawn last)
            keys = self._rng.exponential(size=p) / weights  # Efraimidis-Spirakis: the C smallest keys are C draws
        candidates = (
            np.argpartition(keys, self.candidates - 1)[: self.candidates] if self.candidates < p else np.arange(p)
        )
        # in the order drawn (without replacement, each draw ~ weight); not re-sorted by priority: taking
        # the P highest of C > P candidates starved the coordinates whose last change was 0, and a zero
        # coordinate that started to violate its optimality condition was then never updated (a stall)
        candidates = candidates[np.argsort(keys[candidates], kind="stable")]
        if self.dependencies is None:
            return np.sort(candidates[:k]).astype(np.int64)
        begun = time.perf_counter()
        safe = np.asarray(self.dependencies(candidates), np.int64)
        took = time.perf_counter() - begun
        if took > self.max_seconds:
            raise ScheduleError(
                f"dependencies() took {took:.1f} s for {len(candidates)} candidates (max_seconds="
                f"{self.max_seconds:g}): make it cheaper (fewer candidates, a cached Gram) or raise "
                "max_seconds"
            )
        if not np.isin(safe, candidates).all():
            raise ScheduleError("dependencies() returned coordinates that were not candidates")
        return np.sort(safe[:k]).astype(np.int64)

    # ---- every worker --------------------------------------------------------------------------------
    def begin(self, w) -> None:
        """A worker's first clock (before round 0): push what every worker needs before it, then call."""
        self._launch()
        w.clock()

    def take(self, w, t: int, timeout: float | None = None) -> np.ndarray:
        """The coordinates of round t (sorted int64), once it is published and round t - 1 ended everywhere."""
        w.wait_clock(t + 1, timeout)
        slot = (t % _SLOTS) * self._width
        row = w.table(f"{self.name}-sets").pull(np.arange(slot, slot + self._width))[:, 0]
        n = int(row[0])
        if not 0 <= n <= self.per_round:
            raise ScheduleError(f"round {t} of scheduler {self.name!r}: a set of {n} coordinates")
        return row[1 : 1 + n].astype(np.int64)

    def report(self, w, t: int, chosen: np.ndarray, sizes: np.ndarray) -> None:
        """|change| of round t's coordinates, for the priority model (workers that computed the same
        changes may all report: the values are the same). Waits until it is stored."""
        if len(chosen):
            rows = np.stack([np.abs(np.asarray(sizes, np.float64)), np.full(len(chosen), float(t))], axis=1)
            w.table(f"{self.name}-sizes{t % 3}").set(np.asarray(chosen, np.int64), rows).wait()

    def end_round(self, w) -> None:
        w.clock()

    def stats(self) -> dict:
        return {
            "rounds": self.rounds,
            "updates": self.updates,
            "choose_seconds": self.choose_seconds,
            "wait_seconds": self.wait_seconds,
        }


class RoundSums:
    """Every worker's partial sums of a round, totalled through one table: what a scheduled round
    computes over sharded data (STRADS' push and aggregate). Rounds alternate between two slots of
    `width` rows; the table only adds, so a slot holds cumulative totals and a worker reads a round's
    as the growth since it last read that slot. Round t's totals are complete once every worker
    ended round t (Scheduler.take(t + 1) waits for that). Rows past 2 x width are the app's.

        RoundSums.declare(node, "lasso-sums", width, extra=2 * p)      # collective, before start()
        sums = RoundSums(w, "lasso-sums", width)                       # each worker thread
        sums.push(t, partial).wait(); ...; total = sums.totals(t)      # at round t + 1
    """

    def __init__(self, w, name: str, width: int) -> None:
        self.table = w.table(name)
        self.width = int(width)
        self._seen = np.zeros((2, self.width))  # each slot's cumulative totals as last read

    @staticmethod
    def declare(node, name: str, width: int, extra: int = 0) -> None:
        node.table(name, rows=2 * int(width) + int(extra), dim=1, dtype="float64")

    def push(self, t: int, partial: np.ndarray):
        """Add this worker's (width,) partial sums of round t; a Future."""
        slot = t % 2
        return self.table.push(
            np.arange(slot * self.width, (slot + 1) * self.width),
            np.asarray(partial, np.float64).reshape(self.width, 1),
        )

    def totals(self, t: int) -> np.ndarray:
        """(width,) round t's sums over every worker."""
        slot = t % 2
        cumulative = self.table.pull(np.arange(slot * self.width, (slot + 1) * self.width))[:, 0]
        got, self._seen[slot] = cumulative - self._seen[slot], cumulative
        return got
