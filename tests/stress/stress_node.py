"""Randomized stress rounds on a real cluster: `python stress_node.py --model M --seed S --rounds R`.

Runs on every node of a cluster started by `pskv.launch` (tests/stress/test_stress.py). Each round
declares fresh tables and runs `node.run()` once; everything in it follows from the round seed
(printed in the ROUND lines), so every node computes the whole cluster's expected values itself,
as tests/cluster/scenarios.py does:

- the plan: thread counts per node (1-3, sometimes unequal), steps, which tables exist, the op mix;
- every worker's ops per step: a seeded random mix of pull, pull_async, pull_if_local, push, set,
  localize, prepare_sample/pull_sample, aggregated push+pull rounds, wait_all, in random order,
  then `clock()`; barriers with exact checks at seeded steps and at the end.

Tables of a round (all in the round's consistency model, `async`, `ssp` (staleness 1-3) or `bsp`):

  p  push/pull/localize; pushes are small non-negative integers, so float32 sums are exact and
     values only grow: every pull is checked against [lower, final] bounds, where the lower
     bound holds this worker's own pushes (read-my-writes), everything before the last barrier,
     and under BSP/SSP every update stamped <= clock - staleness - 1. Updater `add` or SGD(0.5).
  s  set/push: key k belongs to worker k % W, the only one that sets or pushes it, so its value
     is a known sequence; the owner reads its keys exactly, anyone else must read a state of
     that sequence (no torn or invented rows), late enough for the clock bound.
  r  like p, with replicated hot keys (replicate=KEYS); the clock bound does not cover replicas.
  g  aggregate="node": every thread pushes the step's common keys, then pulls them; BSP/SSP:
     the cluster's exact sum; Async: this node's sum plus some prefix of every other node's.
  x  sampling=pskv.Sampling(...) (naive/preloc/pool/onlylocal, maybe replicated hot keys), and
     l, a plain ledger: every sampled key is pushed to both, so x - x_init == l at barriers.

Sets happen only where nothing races with them: on s (one writer per key), and on p and r by one
worker before the first barrier. Localize (and preloc/pool sampling) only under Async, as the
README asks (BSP/SSP tables keep static placement).

A round that takes longer than --round-limit seconds prints node.debug_state(), `py-spy dump` of
this process (when py-spy is installed) and every thread's stack (faulthandler), then exits 3.
"""

from __future__ import annotations

import argparse
import bisect
import faulthandler
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

import pskv

MODELS = ("async", "ssp", "bsp")
WAIT = 60.0  # seconds any single wait may take; a healthy one takes milliseconds
_PRINT = threading.Lock()


def say(line: str) -> None:
    with _PRINT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def round_seed(base: int, nodes: int, model: str, index: int) -> int:
    """The seed of round `index` of a run: everything in the round follows from it."""
    return int(np.random.SeedSequence([base, nodes, MODELS.index(model), index]).generate_state(1)[0])


def _ints(rng: np.random.Generator, lo: int, hi: int, shape) -> np.ndarray:
    return rng.integers(lo, hi + 1, shape).astype(np.float32)  # small integers: float32 sums are exact


class Plan:
    """One round: its parameters, every worker's ops, and the expected values (all from the seed)."""

    def __init__(self, seed: int, nodes: int, model: str) -> None:
        rng = np.random.default_rng(seed)
        self.seed, self.nodes, self.model = seed, nodes, model
        t = rng.integers(1, 4, nodes)
        self.threads = [int(t[0])] * nodes if rng.random() < 0.7 else [int(x) for x in t]
        self.offset = [0, *np.cumsum(self.threads).tolist()]  # worker id = offset[rank] + thread
        self.workers = self.offset[-1]
        self.sync = model != "async"
        self.staleness = {"async": 0, "bsp": 0, "ssp": int(rng.integers(1, 4))}[model]
        self.steps = int(rng.integers(5, 21))
        self.relocate = not self.sync and rng.random() < 0.75  # localize and preloc/pool sampling
        self.dim = dim = int(rng.integers(1, 4))
        self.max_ops = int(rng.integers(2, 13))
        # p: monotone pushes
        self.p_rows = int(rng.integers(nodes, 150))
        self.p_caches = bool(rng.random() < 0.5)
        # Lapse's always-move, short and long leases (declines); from p_rows so the later draws stay the seeds'
        self.p_lease = (0.0, 0.002, 10.0)[self.p_rows % 3]
        self.p_coef = -0.5 if rng.random() < 0.3 else 1.0  # SGD(lr=0.5): w -= 0.5 * g
        self.p_init = float(rng.integers(0, 5))
        # s: one writer per key
        self.s_rows = self.workers * int(rng.integers(1, 4))
        self.s_init = float(rng.integers(-3, 4))
        # r: replicated hot keys
        self.r = bool(rng.random() < 0.6)
        self.r_rows = int(rng.integers(max(nodes, 4), 80))
        self.r_hot = np.sort(rng.choice(self.r_rows, int(rng.integers(1, 5)), replace=False)).astype(np.int64)
        self.r_coef = -0.5 if rng.random() < 0.3 else 1.0
        self.r_init = float(rng.integers(0, 5))
        self.r_syncs = float(rng.choice([5.0, 25.0, 100.0]))
        # g: aggregate="node"
        self.g = bool(rng.random() < 0.5)
        self.g_rows = int(rng.integers(4, 40))
        self.g_coef = -0.5 if rng.random() < 0.3 else 1.0
        self.g_init = float(rng.integers(-2, 3))
        self.g_keys = [np.sort(rng.choice(self.g_rows, int(rng.integers(1, min(12, self.g_rows) + 1)),
                                          replace=False)).astype(np.int64)
                       if rng.random() < 0.7 else np.empty(0, np.int64) for _ in range(self.steps)]
        # x + l: sampling, and its ledger
        self.x = bool(rng.random() < 0.5)
        self.x_rows = int(rng.integers(max(8, 2 * nodes), 100))
        self.x_weights = rng.integers(1, 10, self.x_rows).astype(np.float64)
        self.x_init = float(rng.integers(0, 4))
        movers = self.relocate and rng.random() < 0.75  # onlylocal needs keys that stay put
        self.x_schemes = ("naive", "preloc", "pool") if movers else ("naive", "onlylocal")
        self.x_scheme = str(rng.choice(self.x_schemes))
        self.x_reuse = int(rng.integers(1, 4))
        self.x_group = int(rng.integers(2, 17))
        self.x_postpone = bool(rng.random() < 0.5)
        self.x_hot = (np.sort(rng.choice(self.x_rows, int(rng.integers(1, 4)), replace=False)).astype(np.int64)
                      if rng.random() < 0.4 else None)
        # the set phase, before the first barrier
        rank = int(rng.integers(0, nodes))
        self.setter = (rank, int(rng.integers(0, self.threads[rank])))
        p_keys = rng.integers(0, self.p_rows, int(rng.integers(0, 10)))
        self.p_set = (p_keys, _ints(rng, 0, 5, (len(p_keys), dim)))
        r_keys = np.concatenate([rng.choice(self.r_hot, int(rng.integers(0, len(self.r_hot) + 1))),
                                 rng.integers(0, self.r_rows, int(rng.integers(0, 4)))]).astype(np.int64)
        self.r_set = (r_keys, _ints(rng, 0, 5, (len(r_keys), dim)))
        # checkpoints: exact checks after a barrier at the start of these steps (and at the end)
        self.barriers = sorted({int(b) for b in rng.integers(1, self.steps, int(rng.integers(0, 3)))})
        # the op mix of this round
        kinds = ["push_p", "pull_p", "pil_p", "own_s", "pull_s", "wait_all"]
        if self.relocate:
            kinds += ["loc_p", "loc_s"]
        if self.r:
            kinds += ["push_r", "pull_r", "pil_r"] + (["loc_r"] if self.relocate else [])
        if self.x:
            kinds += ["sample"]
        weights = rng.random(len(kinds)) + 0.2
        weights[kinds.index("wait_all")] *= 0.2
        self.kinds, self.mix = kinds, weights / weights.sum()
        self.ops = {(r, th, st): self._ops(r, th, st) for r in range(nodes) for th in range(self.threads[r])
                    for st in range(self.steps)}
        self._expect()

    def gid(self, rank: int, thread: int) -> int:
        return self.offset[rank] + thread

    def own_keys(self, gid: int) -> np.ndarray:
        return np.arange(gid, self.s_rows, self.workers, dtype=np.int64)

    def describe(self) -> str:
        model = f"ssp:{self.staleness}" if self.model == "ssp" else self.model
        tables = "p s" + " r" * self.r + " g" * self.g + (f" x({'/'.join(self.x_schemes)})" if self.x else "")
        return (f"nodes={self.nodes} threads={self.threads} model={model} steps={self.steps} dim={self.dim} "
                f"relocate={self.relocate} lease={self.p_lease} tables=[{tables}] barriers={self.barriers}")

    # ---- ops ---------------------------------------------------------------------------------------
    def _ops(self, rank: int, thread: int, step: int) -> list[tuple]:
        rng = np.random.default_rng([self.seed, rank + 1, thread, step])
        ops = [self._op(self.kinds[rng.choice(len(self.kinds), p=self.mix)], rng, self.gid(rank, thread))
               for _ in range(int(rng.integers(1, self.max_ops + 1)))]
        keys = self.g_keys[step]
        if self.g and len(keys):  # every thread of every node: one round of each of the step's keys
            order = rng.permutation(np.concatenate([keys, keys[:2]]))  # shuffled, with duplicates
            ops.insert(int(rng.integers(0, len(ops) + 1)), ("agg", _ints(rng, -3, 3, (len(keys), self.dim)), order))
        return ops

    def _op(self, kind: str, rng: np.random.Generator, gid: int) -> tuple:
        dim = self.dim
        if kind in ("push_p", "push_r"):
            rows = self.p_rows if kind == "push_p" else self.r_rows
            keys = rng.integers(0, rows, int(rng.integers(1, 9)))
            if kind == "push_r" and rng.random() < 0.6:
                keys[: len(keys) // 2 + 1] = rng.choice(self.r_hot, len(keys) // 2 + 1)
            return ("push", kind[-1], keys, _ints(rng, 0, 3, (len(keys), dim)), self.relocate and rng.random() < 0.3)
        if kind in ("pull_p", "pull_r", "pil_p", "pil_r", "pull_s"):
            rows = {"p": self.p_rows, "r": self.r_rows, "s": self.s_rows}[kind[-1]]
            keys = rng.integers(0, rows, int(rng.integers(1, 11)))
            if kind == "pull_s" and rng.random() < 0.5:  # some of its own keys, read exactly
                keys[0] = rng.choice(self.own_keys(gid))
            if kind[-1] == "r" and rng.random() < 0.6:  # the hot keys, as push_r does
                keys[: len(keys) // 2 + 1] = rng.choice(self.r_hot, len(keys) // 2 + 1)
            if kind.startswith("pil"):
                return ("pil", kind[-1], keys)
            return ("pull", kind[-1], keys, bool(rng.random() < 0.4))
        if kind.startswith("loc"):
            rows = {"p": self.p_rows, "r": self.r_rows, "s": self.s_rows}[kind[-1]]
            if rng.random() < 0.5:  # a few contended keys, localized by everyone
                keys = rng.integers(0, min(4, rows), int(rng.integers(1, 4)))
            else:
                keys = rng.integers(0, rows, int(rng.integers(1, 9)))
            return ("loc", kind[-1], keys, bool(rng.random() < 0.5))
        if kind == "own_s":
            keys = rng.choice(self.own_keys(gid), int(rng.integers(1, 4)))
            if rng.random() < 0.4:
                return ("own", "set", keys, _ints(rng, 0, 9, (len(keys), dim)), bool(rng.random() < 0.7))
            return ("own", "push", keys, _ints(rng, -2, 3, (len(keys), dim)), bool(rng.random() < 0.7))
        if kind == "sample":
            scheme = str(rng.choice(self.x_schemes))
            m = int(rng.integers(1, 9))
            return ("sample", scheme, m * self.x_reuse if scheme == "pool" else m, int(rng.integers(1, 6)),
                    float(rng.integers(1, 4)))
        assert kind == "wait_all", kind
        return ("wait_all",)

    # ---- expected values ---------------------------------------------------------------------------
    def _expect(self) -> None:
        steps, dim = self.steps, self.dim
        self.p_base = np.full((self.p_rows, dim), self.p_init)
        for k, v in zip(*self.p_set):  # in order: the last set of a key wins
            self.p_base[k] = v
        self.r_base = np.full((self.r_rows, dim), self.r_init)
        for k, v in zip(*self.r_set):
            self.r_base[k] = v
        cum = {"p": np.zeros((steps + 1, self.p_rows, dim)), "r": np.zeros((steps + 1, self.r_rows, dim))}
        g_node = np.zeros((self.nodes, steps + 1, self.g_rows, dim))  # each node's level-1 sums, cumulative
        x_sum = np.zeros(steps + 1)  # what every column of l (and x - x_init) sums to
        s_states = {k: [np.full(dim, self.s_init)] for k in range(self.s_rows)}  # the sequence of each s row
        s_steps = {k: [-1] for k in range(self.s_rows)}
        for step in range(steps):
            for t in cum:
                cum[t][step + 1] = cum[t][step]
            g_node[:, step + 1] = g_node[:, step]
            x_sum[step + 1] = x_sum[step]
            for (rank, thread, st), ops in self.ops.items():
                if st != step:
                    continue
                for op in ops:
                    if op[0] == "push":
                        np.add.at(cum[op[1]][step + 1], op[2], op[3])
                    elif op[0] == "agg":
                        g_node[rank, step + 1, self.g_keys[step]] += op[1]
                    elif op[0] == "sample":
                        x_sum[step + 1] += op[2] * op[4]
                    elif op[0] == "own":
                        state = {int(k): s_states[int(k)][-1].copy() for k in np.unique(op[2])}
                        for k, v in zip(op[2], op[3]):
                            state[int(k)] = v.astype(np.float64) if op[1] == "set" else state[int(k)] + v
                        for k, v in state.items():
                            s_states[k].append(v)
                            s_steps[k].append(step)
        self.cum, self.g_node, self.g_total, self.x_sum = cum, g_node, g_node.sum(axis=0), x_sum
        self.s_states, self.s_steps = s_states, s_steps
        self.x_hi = self.x_init + x_sum[steps]

    def s_at(self, key: int, step: int) -> np.ndarray:
        """Row `key` of s after every op of steps < `step`."""
        return self.s_states[key][bisect.bisect_left(self.s_steps[key], step) - 1]  # s_steps[key][0] is -1


class Runner:
    """One worker thread's part of a round: runs its ops and checks every value it reads."""

    def __init__(self, plan: Plan, w: pskv.Worker, names: dict) -> None:
        self.plan, self.w = plan, w
        self.gid = plan.gid(w.rank, w.thread)
        self.t = {name: w.table(full) for name, full in names.items()}
        self.mine = {"p": [], "r": []}  # this worker's pushes: [step, keys, values, sure]
        self.s_model = {int(k): np.full(plan.dim, plan.s_init) for k in plan.own_keys(self.gid)}
        self.s_done = {k: 0 for k in self.s_model}  # how many of its ops this writer made on each own key
        self.b_last = 0  # the step of the last checkpoint: every update before it is applied everywhere
        rows = {"p": plan.p_rows, "r": plan.r_rows, "s": plan.s_rows}
        self.home = {}  # (rows,) bool: the keys this node manages (rows are range-partitioned, README)
        for name, n in rows.items():
            bounds = [i * n // plan.nodes for i in range(plan.nodes + 1)]
            self.home[name] = (np.arange(n) >= bounds[w.rank]) & (np.arange(n) < bounds[w.rank + 1])
        self.step = -1
        self.pending: list = []  # (future, check) of pull_async calls, checked at the end of the step
        self.where = ""

    def fail(self, what: str) -> None:
        raise AssertionError(f"round seed {self.plan.seed} node {self.w.rank} thread {self.w.thread} step "
                             f"{self.step} {self.where}: {what}")

    # ---- bounds of the monotone tables p and r -----------------------------------------------------
    def _lower(self, name: str, keys: np.ndarray, clocked: bool) -> np.ndarray:
        """(n, dim): the least sum of pushes that a read of `keys` must include."""
        plan = self.plan
        hot = plan.r_hot if name == "r" else np.empty(0, np.int64)
        lows = []
        for replica in (False, True):
            j = self.b_last
            if clocked and plan.sync and not replica:  # replicas are as fresh as their last sync only
                j = max(j, self.step - plan.staleness)
            extra = np.zeros_like(plan.cum[name][0])
            for st, k, v, sure in self.mine[name]:
                if st >= j and (sure or replica):  # a replicated key takes our own push at once
                    np.add.at(extra, k, v)
            lows.append((plan.cum[name][j] + extra)[keys])
        is_hot = np.isin(keys, hot)[:, None]
        return np.where(is_hot, lows[1], lows[0])

    def _check_bounds(self, name: str, keys: np.ndarray, got: np.ndarray, low: np.ndarray, what: str) -> None:
        plan = self.plan
        base, coef = (plan.p_base, plan.p_coef) if name == "p" else (plan.r_base, plan.r_coef)
        pushed = (got.astype(np.float64) - base[keys]) / coef  # the sum of pushes this read includes
        high = plan.cum[name][plan.steps][keys]
        if not ((pushed >= low).all() and (pushed <= high).all()):
            bad = np.flatnonzero(((pushed < low) | (pushed > high)).any(axis=1))
            self.fail(f"{what} of table {name}: keys {keys[bad].tolist()} read pushes {pushed[bad].tolist()}, "
                      f"expected between {low[bad].tolist()} and {high[bad].tolist()}")

    # ---- s ------------------------------------------------------------------------------------------
    def _s_expect(self, keys: np.ndarray, clocked: bool, later: bool = False) -> tuple[dict, int]:
        """What a read of s issued now must give: its own rows as written so far (`later`: or as
        written by its later ops), the others a state of their writer since step j."""
        plan = self.plan
        j = max(self.b_last, self.step - plan.staleness) if clocked and plan.sync else self.b_last
        own = {}
        for k in keys.tolist():
            if k in self.s_model:
                done = self.s_done[k]
                own[k] = plan.s_states[k][done:] if later else plan.s_states[k][done:done + 1]
        return own, j

    def _check_s(self, keys: np.ndarray, got: np.ndarray, expect: tuple[dict, int]) -> None:
        plan = self.plan
        own, j = expect
        for k, row in zip(keys.tolist(), got):
            if k in own:
                if not any(np.array_equal(row, s) for s in own[k]):
                    self.fail(f"own key {k} of s reads {row.tolist()}, wrote {own[k][0].tolist()}"
                              + (f" (or later {[s.tolist() for s in own[k][1:]]})" if len(own[k]) > 1 else ""))
                continue
            states = plan.s_states[k][bisect.bisect_left(plan.s_steps[k], j) - 1:]
            if not any(np.array_equal(row, s) for s in states):
                self.fail(f"key {k} of s reads {row.tolist()}, not a state of its writer since step {j}: "
                          f"{[s.tolist() for s in states]}")

    # ---- the round ---------------------------------------------------------------------------------
    def run(self) -> None:
        plan, w = self.plan, self.w
        self.where = "start"
        for name in ("p", "s"):  # fresh tables: every key is at its manager (range partition)
            mask, _ = self.t[name].pull_if_local(np.arange(len(self.home[name])))
            if not np.array_equal(mask, self.home[name]):
                self.fail(f"table {name}: local keys {np.flatnonzero(mask).tolist()} at the start, expected the range")
        self.where = "set phase"
        if (w.rank, w.thread) == plan.setter:
            if len(plan.p_set[0]):
                self.t["p"].set(*plan.p_set).wait(WAIT)
            if plan.r and len(plan.r_set[0]):
                self.t["r"].set(*plan.r_set).wait(WAIT)
        self.checkpoint(0)
        for step in range(plan.steps):
            self.step = step
            if step in plan.barriers:
                self.checkpoint(step)
            if w.current_clock != step:
                self.fail(f"current_clock is {w.current_clock}")
            for i, op in enumerate(plan.ops[(w.rank, w.thread, step)]):
                self.where = f"op {i} {op[0]}"
                getattr(self, "op_" + op[0])(*op[1:])
            self.where = "pull_async results"
            for fut, check in self.pending:
                check(fut.wait(WAIT))
            self.pending = []
            w.clock()
        self.step = plan.steps
        self.checkpoint(plan.steps)

    def checkpoint(self, b: int) -> None:
        """Barrier, then every table holds exactly what every update issued before it gives."""
        plan, w, t = self.plan, self.w, self.t
        self.where = f"checkpoint {b}"
        w.wait_all(WAIT)
        if plan.r or (plan.x and plan.x_hot is not None):
            w.wait_replica_sync(WAIT)
        w.barrier(WAIT)
        rng = np.random.default_rng([plan.seed, self.gid, b, 99])
        checks = [("p", plan.p_rows, lambda k: plan.p_base[k] + plan.p_coef * plan.cum["p"][b][k]),
                  ("s", plan.s_rows, lambda k: np.array([plan.s_at(int(x), b) for x in k]))]
        if plan.r:
            checks.append(("r", plan.r_rows, lambda k: plan.r_base[k] + plan.r_coef * plan.cum["r"][b][k]))
        if plan.g:
            checks.append(("g", plan.g_rows, lambda k: plan.g_init + plan.g_coef * plan.g_total[b][k]))
        for name, rows, expect in checks:
            keys = rng.permutation(np.concatenate([np.arange(rows), rng.integers(0, rows, 3)]))
            got = t[name].pull(keys, timeout=WAIT)
            want = expect(keys)
            if not np.array_equal(got, want):
                bad = np.flatnonzero((got != want).any(axis=1))
                self.fail(f"table {name} after the barrier: keys {keys[bad].tolist()} hold {got[bad].tolist()}, "
                          f"expected {want[bad].tolist()}")
        if plan.x:
            everything = np.arange(plan.x_rows)
            xs, ls = t["x"].pull(everything, timeout=WAIT), t["l"].pull(everything, timeout=WAIT)
            if not np.array_equal(xs - plan.x_init, ls):
                bad = np.flatnonzero((xs - plan.x_init != ls).any(axis=1))
                self.fail(f"sampled table x after the barrier: rows {bad.tolist()} hold {xs[bad].tolist()}, "
                          f"its ledger {ls[bad].tolist()} (+ {plan.x_init})")
            if not (ls.sum(axis=0) == plan.x_sum[b]).all():
                self.fail(f"ledger l sums to {ls.sum(axis=0).tolist()}, expected {plan.x_sum[b]} per column")
        for entry in self.mine["p"] + self.mine["r"]:
            entry[3] = True
        w.barrier(WAIT)  # nobody pushes before everyone checked
        self.b_last = b

    # ---- ops ---------------------------------------------------------------------------------------
    def op_push(self, name: str, keys: np.ndarray, values: np.ndarray, wait: bool) -> None:
        fut = self.t[name].push(keys, values)
        if wait:
            fut.wait(WAIT)  # only under Async: a buffered BSP/SSP push resolves at its flush
        # read-my-writes: static placement keeps one thread's messages to a node in order; under
        # relocation a push is sure to be seen only once waited for
        self.mine[name].append([self.step, keys, values, wait or not self.plan.relocate])

    def op_pull(self, name: str, keys: np.ndarray, asynchronous: bool) -> None:
        if name == "s":
            # this thread's later writes may overtake its async pull: under relocation (no order across
            # routes), and under BSP/SSP, where another thread's flush of the push buffer sends them on
            # that thread's socket (no order with ours; a blocking pull is answered before they exist)
            expect = self._s_expect(keys, clocked=True, later=asynchronous and (self.plan.relocate or self.plan.sync))
            if asynchronous:
                self.pending.append((self.t["s"].pull_async(keys), lambda got: self._check_s(keys, got, expect)))
            else:
                self._check_s(keys, self.t["s"].pull(keys, timeout=WAIT), expect)
            return
        low = self._lower(name, keys, clocked=True)
        if asynchronous:
            seen = []
            fut = self.t[name].pull_async(keys, callback=lambda values: seen.append(values is not None))

            def check(got, low=low, seen=seen):
                if seen != [True]:
                    self.fail(f"pull_async callback ran {len(seen)} times")
                self._check_bounds(name, keys, got, low, "pull_async")

            self.pending.append((fut, check))
        else:
            self._check_bounds(name, keys, self.t[name].pull(keys, timeout=WAIT), low, "pull")

    def op_pil(self, name: str, keys: np.ndarray) -> None:
        low = self._lower(name, keys, clocked=False)
        mask, got = self.t[name].pull_if_local(keys)
        if mask.any():
            self._check_bounds(name, keys[mask], got[mask], low[mask], "pull_if_local")
        if name == "r" and not mask[np.isin(keys, self.plan.r_hot)].all():
            self.fail("pull_if_local: a replicated key is not local")

    def op_loc(self, name: str, keys: np.ndarray, wait: bool) -> None:
        fut = self.t[name].localize(keys)
        if wait:
            fut.wait(WAIT)

    def op_own(self, kind: str, keys: np.ndarray, values: np.ndarray, check: bool) -> None:
        s = self.t["s"]
        fut = s.set(keys, values) if kind == "set" else s.push(keys, values)
        for k in np.unique(keys).tolist():
            rows = values[keys == k]
            self.s_model[k] = rows[-1].astype(np.float64) if kind == "set" else self.s_model[k] + rows.sum(axis=0)
            self.s_done[k] += 1
            if not np.array_equal(self.s_model[k], self.plan.s_states[k][self.s_done[k]]):
                self.fail(f"the plan's state of s key {k} differs from the writer's")  # a bug of this file
        if self.plan.relocate:
            fut.wait(WAIT)  # others may move the key: only a waited write is sure to be read back
        if check:
            expect = self._s_expect(keys, clocked=True)
            self._check_s(keys, s.pull(keys, timeout=WAIT), expect)

    def op_agg(self, values: np.ndarray, order: np.ndarray) -> None:
        plan, g = self.plan, self.t["g"]
        g.push(plan.g_keys[self.step], values)
        got = g.pull(order, timeout=WAIT)
        summed = (got.astype(np.float64) - plan.g_init) / plan.g_coef  # the round sums it includes
        if plan.sync:  # the owner waits for every node's round: the cluster's exact sum
            want = plan.g_total[self.step + 1][order]
            if not np.array_equal(summed, want):
                self.fail(f"aggregated pull of {order.tolist()}: sums {summed.tolist()}, expected {want.tolist()}")
            return
        # Async: this node's sums, plus some prefix (since the last barrier) of every other node's
        other = summed - plan.g_node[self.w.rank][self.step + 1][order]
        for i, k in enumerate(order.tolist()):
            reach = {tuple(np.zeros(plan.dim))}
            for r in range(plan.nodes):
                if r != self.w.rank:
                    prefixes = {tuple(plan.g_node[r][j][k]) for j in range(self.b_last, plan.steps + 1)}
                    reach = {tuple(np.add(a, b)) for a in reach for b in prefixes}
            if tuple(other[i]) not in reach:
                self.fail(f"aggregated pull: key {k} holds {got[i].tolist()}: own node's sums plus "
                          f"{other[i].tolist()}, which no prefixes of the other nodes' rounds give")

    def op_sample(self, scheme: str, n: int, k: int, v: float) -> None:
        plan, x, ledger = self.plan, self.t["x"], self.t["l"]
        h = x.prepare_sample(n, scheme=scheme)
        got = []
        for _ in range(n + 1):  # bounded: each call gives at least one key while any is left
            keys, values = x.pull_sample(h, k)
            if not len(keys):
                break
            if len(keys) > k or values.shape != (len(keys), plan.dim):
                self.fail(f"pull_sample({k}) gave {len(keys)} keys, values {values.shape}")
            if not ((values >= plan.x_init).all() and (values <= plan.x_hi).all()):
                self.fail(f"pull_sample values {values.tolist()} outside [{plan.x_init}, {plan.x_hi}]")
            update = np.full((len(keys), plan.dim), v, np.float32)
            x.push(keys, update)
            ledger.push(keys, update)
            got.append(keys)
        x.finish_sample(h)
        got = np.concatenate(got) if got else np.empty(0, np.int64)
        drawn = np.concatenate(h.drawn) if h.drawn else np.empty(0, np.int64)
        if len(got) != n:
            self.fail(f"{scheme} handle of {n} gave {len(got)} keys")
        if scheme == "pool":
            if not np.array_equal(np.sort(got), np.sort(np.repeat(drawn, plan.x_reuse))):
                self.fail(f"pool gave {np.sort(got).tolist()}, drawn {drawn.tolist()} x {plan.x_reuse}")
        elif not np.array_equal(got, drawn):
            self.fail(f"{scheme} gave {got.tolist()}, drew {drawn.tolist()}")

    def op_wait_all(self) -> None:
        self.w.wait_all(WAIT)
        for entry in self.mine["p"] + self.mine["r"]:
            entry[3] = True


def declare(node: pskv.Node, plan: Plan, index: int) -> dict:
    """The round's tables, declared in the same order on every node (collective)."""
    model = {"async": pskv.Async(), "bsp": pskv.BSP(), "ssp": pskv.SSP(staleness=plan.staleness)}[plan.model]

    def updater(coef: float):
        return "add" if coef == 1.0 else pskv.SGD(lr=0.5)

    dim, names = plan.dim, {}

    def table(name: str, rows: int, **kw) -> None:
        names[name] = f"r{index}.{name}"
        node.table(names[name], rows=rows, dim=dim, **{"consistency": model, **kw})

    table("p", plan.p_rows, updater=updater(plan.p_coef), init=pskv.Constant(plan.p_init),
          placement=pskv.Relocate(location_caches=plan.p_caches, lease=plan.p_lease))
    table("s", plan.s_rows, init=pskv.Constant(plan.s_init))
    if plan.r:
        table("r", plan.r_rows, updater=updater(plan.r_coef), init=pskv.Constant(plan.r_init),
              replicate=pskv.Replicate(keys=plan.r_hot, syncs_per_sec=plan.r_syncs))
    if plan.g:
        table("g", plan.g_rows, updater=updater(plan.g_coef), init=pskv.Constant(plan.g_init), aggregate=pskv.NodeAggregate())
    if plan.x:
        sampling = pskv.Sampling(plan.x_weights, scheme=plan.x_scheme, reuse=plan.x_reuse, group_size=plan.x_group,
                                 postpone=plan.x_postpone, seed=plan.seed % 1000)
        kw = {} if plan.x_hot is None else {"replicate": plan.x_hot, "syncs_per_sec": 50.0}
        table("x", plan.x_rows, init=pskv.Constant(plan.x_init), sampling=sampling, **kw)
        table("l", plan.x_rows, consistency=pskv.Async())
    return names


class Watchdog:
    """Ends a round that hangs: the node's debug_state(), py-spy's dump, every thread's stack, exit 3."""

    def __init__(self, node: pskv.Node, limit: float) -> None:
        self.node, self.limit = node, limit
        self.started, self.label = None, ""
        threading.Thread(target=self._run, name="stress-watchdog", daemon=True).start()

    def arm(self, label: str) -> None:
        self.label, self.started = label, time.monotonic()

    def disarm(self) -> None:
        self.started = None

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            started = self.started
            if started is None or time.monotonic() - started < self.limit:
                continue
            say(f"WATCHDOG node {self.node.rank}: {self.label} still runs after {self.limit:.0f} s")
            try:  # what the node waits for (Node.debug_state), then where every thread is
                say("WATCHDOG " + self.node.debug_state())
            except Exception as exc:  # noqa: BLE001 - the stacks below matter most
                say(f"WATCHDOG debug_state: {exc!r}")
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            if Path(spy).exists():
                try:
                    out = subprocess.run([spy, "dump", "--pid", str(os.getpid())],
                                         capture_output=True, text=True, timeout=30)
                    say("WATCHDOG py-spy dump:\n" + out.stdout + out.stderr)
                except Exception as exc:  # noqa: BLE001
                    say(f"WATCHDOG py-spy failed: {exc!r}")
            faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
            sys.stdout.flush()
            os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--seed", type=int, default=0, help="the run's base seed; round i's seed derives from it")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="index of the first round")
    parser.add_argument("--round-seed", type=int, default=None, help="run exactly one round with this seed")
    parser.add_argument("--round-limit", type=float, default=120.0, help="seconds before a round counts as hung")
    args = parser.parse_args()
    node = pskv.init()
    watchdog = Watchdog(node, args.round_limit)
    indices = [args.first] if args.round_seed is not None else range(args.first, args.first + args.rounds)
    for index in indices:
        seed = args.round_seed if args.round_seed is not None else round_seed(args.seed, node.num_nodes,
                                                                               args.model, index)
        plan = Plan(seed, node.num_nodes, args.model)
        label = f"ROUND {index} seed={seed}"
        if node.rank == 0:
            say(f"{label} start {plan.describe()}")
        watchdog.arm(label)
        start = time.monotonic()
        try:
            names = declare(node, plan, index)
            node.run(lambda w: Runner(plan, w, names).run(), threads=plan.threads[node.rank])
            stats = node.stats()
            if stats["request_errors"] or stats["dropped"]:
                raise AssertionError(f"round seed {seed}: request_errors={stats['request_errors']} "
                                     f"dropped={stats['dropped']} in a run without bad messages")
        except BaseException:
            say(f"FAILED {label} node={node.rank} {plan.describe()}\n"
                f"reproduce this round: pskv launch -n {node.num_nodes} -- {sys.executable} {__file__} "
                f"--model {args.model} --round-seed {seed}")
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            raise
        watchdog.disarm()
        say(f"{label} ok node={node.rank} {time.monotonic() - start:.2f}s")
    watchdog.arm("shutdown")
    node.shutdown()


if __name__ == "__main__":
    main()
