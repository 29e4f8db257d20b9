"""Composition stress: features at once, checked against an exact oracle (compose_plan.py).

A seed draws a cluster (2-3 nodes x 1-2 threads, backups or not), 2-4 tables of different kinds
trained at once (dense, relocated with localizes, replicated hot keys, sparse uint64, SSP with a row
cache, on disk) while every node's main thread checkpoints 2-4 times, and an event meanwhile: a node
joins and pushes too, or one leaves (without backups); one is SIGKILLed or SIGSTOPped past the
failure timeout (with backups; it only pulls and localizes, the others' pushes must all be in).
Checked:
  - after training, every table equals the replay of every push (node 0, compose_node.py);
  - every checkpoint is a consistent cut: each worker's counts in all tables are one prefix of its
    steps, and every row equals the replay of exactly that prefix (here, from the files);
  - the last checkpoint restored onto 1-3 nodes with other options (hot keys added, changed or
    dropped, relocation dropped) equals the checkpoint, and training on it adds exactly.

    make stress                                                # STRESS_COMPOSE_SEEDS seeds (default 12)
    PSKV_STRESS_SEED=7 .venv/bin/python -m pytest -m stress tests/stress/test_compose.py

A failure prints `reproduce: ...` (one line) and the plan.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from compose_plan import COUNTERS, as_sparse, cut_of, plan, replay, steps  # noqa: E402
from helpers import wait_or_dump, wait_until  # noqa: E402

import pskv  # noqa: E402
from pskv.checkpoint import format as fmt  # noqa: E402

pytestmark = pytest.mark.slow

NODE = str(Path(__file__).with_name("compose_node.py"))
SEEDS = int(os.environ.get("STRESS_COMPOSE_SEEDS", "12"))
BASE = int(os.environ.get("PSKV_STRESS_SEED", "0"))


def _check_checkpoint(path: Path, p, seqs: dict) -> dict:
    """The checkpoint at `path` is a consistent cut, and equals the replay of it; returns the cut."""
    saved = pskv.load_checkpoint(path)
    state = {name: as_sparse(saved[name].keys, saved[name].values) if name.startswith("sparse")
             else saved[name].values.astype(np.float64) for name in p.tables}
    cut = cut_of(seqs, state)
    for name in p.tables:
        want = replay(seqs, name, {g: cut[g][name] for g in seqs})
        got = state[name]
        if name.startswith("sparse"):
            keys = set(got) | set(want)
            bad = [k for k in keys if not np.array_equal(got.get(k, 0 * next(iter(want.values()))),
                                                         want.get(k, 0 * next(iter(want.values()))))]
            assert not bad, f"{path.name}: sparse key {bad[0]}: {got.get(bad[0])} != {want.get(bad[0])}"
        else:
            bad = np.flatnonzero((got != want).any(axis=1))
            assert not len(bad), (f"{path.name}: table {name!r}: {len(bad)} rows differ from the replay of its cut "
                                  f"{cut}; first key {bad[0]}: {got[bad[0]]} != {want[bad[0]]}")
    return cut


FAILURE_TIMEOUT = 8.0  # seconds of silence before a stopped node counts as dead (cold numba compiles in pskv-server under CI load took 3.4 s)


def _event(p, run, cluster_factory, out: Path, repro: str):
    """Once every node trains: the plan's join, leave, kill or stop; then the go to settle. Returns the
    joiner's Cluster, if any."""
    joiner = None
    def logs() -> str:
        return f"reproduce: {repro}\n{run.logs_tail(40)}"

    for r in range(p.nodes):
        wait_until(lambda: (out / f"running-{r}").exists(), 90, lambda: f"node {r} training\n{logs()}")
    if p.event == "join":
        joiner = cluster_factory(1, [sys.executable, NODE, "join", str(out), str(p.seed)],
                                 join=run.coordinator_address, env={"PSKV_SECRET_FILE": run.secret_file})
        wait_until(lambda: (out / f"running-{p.nodes}").exists(), 90,
                   lambda: f"node {p.nodes} joined\n{logs()}{joiner.logs_tail(40)}")
    elif p.event == "leave":
        wait_until(lambda: f"node {p.victim} left" in run.output(p.victim), 90, lambda: f"node {p.victim} left\n{logs()}")
    elif p.event == "kill":
        time.sleep(random.Random(p.seed).uniform(0.0, 0.5))
        run.kill(p.victim)
    elif p.event == "stop":
        time.sleep(random.Random(p.seed).uniform(0.0, 0.5))
        run.kill(p.victim, signal.SIGSTOP)
    trainers = [r for r in range(p.nodes + (p.event == "join")) if not (p.event in ("kill", "stop", "leave")
                                                                         and r == p.victim)]
    for r in trainers:
        wait_until(lambda: (out / f"trained-{r}").exists(), 120, lambda: f"node {r} trained\n{logs()}")
    (out / "settle").touch()
    if p.event == "stop":  # the others go on without it; woken, it learns it is out (Fenced) and exits
        checker = min(set(range(p.nodes)) - {p.victim})
        try:
            wait_until(lambda: "COMPOSE ok run" in run.output(checker) or run.output(checker).count("Error"), 120,
                       lambda: f"the survivors' check\n{logs()}")
        finally:
            run.kill(p.victim, signal.SIGCONT)
    return joiner


def compose(cluster_factory, tmp_path, seed: int) -> None:
    p = plan(seed)
    repro = (f"PSKV_STRESS_SEED={seed // 1000} STRESS_COMPOSE_SEEDS={seed % 1000 + 1} .venv/bin/python -m pytest "
             f"-m stress -n 0 'tests/stress/test_compose.py::test_compose_stress[{seed % 1000}]'")
    print(f"\ncompose {p.describe()}\nreproduce: {repro}", flush=True)
    out = tmp_path / "out"
    out.mkdir()
    run = cluster_factory(p.nodes, [sys.executable, NODE, "run", str(out), str(seed)], backups=p.backups or None,
                          failure_timeout=FAILURE_TIMEOUT if p.event in ("kill", "stop") else None)
    joiner = _event(p, run, cluster_factory, out, repro) if p.event else None
    try:
        status = wait_or_dump(run, 150)
    except AssertionError:
        coord = run.coordinator  # (a hang: what the coordinator holds, for the report)
        if coord is not None:
            print(f"coordinator: states {getattr(coord, '_state', '?')} barriers {getattr(coord, '_barriers', '?')} "
                  f"joined {getattr(coord, '_joined', '?')} epoch {getattr(coord, '_epoch', '?')}", flush=True)
        if joiner is not None:
            for pid in joiner.alive_pids():
                os.kill(pid, signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(f"reproduce: {repro}\njoiner:\n{joiner.logs_tail(80)}") from None
        raise
    checker = min(set(range(p.nodes)) - ({p.victim} if p.event in ("kill", "stop", "leave") else set()))
    assert "COMPOSE ok run" in run.output(checker), f"reproduce: {repro}\n{run.logs_tail(60)}"
    if p.event in ("kill", "stop"):  # the victim exits with its failure; the others cleanly
        assert p.event == "kill" or "Fenced" in run.output(p.victim), f"reproduce: {repro}\n{run.logs_tail(60)}"
    else:
        assert status == 0, f"reproduce: {repro}\n{run.logs_tail(60)}"
    seqs = {gid: steps(p, gid) for gid in p.pushers}
    done = [path for _, path, complete in fmt.steps(out / "ckpt") if complete]
    if p.event not in ("kill", "stop"):  # (a victim killed in the middle of one leaves it incomplete)
        assert len(done) == p.checkpoints, f"{len(done)} of {p.checkpoints} checkpoints complete; reproduce: {repro}"
    cuts = [_check_checkpoint(path, p, seqs) for path in done]
    for a, b in zip(cuts, cuts[1:]):  # later checkpoints hold at least what earlier ones held
        assert all(b[g][n] >= a[g][n] for g in a for n in a[g]), f"checkpoint cuts go back: {a} then {b}; reproduce: {repro}"
    if not done:
        return
    back = cluster_factory(p.restore_nodes, [sys.executable, NODE, "restore", str(out), str(seed)],
                           restore=str(done[-1]), backups=None)
    assert wait_or_dump(back, 150) == 0, f"reproduce: {repro}\n{back.logs_tail(60)}"
    assert "COMPOSE ok restore" in back.output(0), f"reproduce: {repro}\n{back.logs_tail(60)}"
    assert COUNTERS >= max(p.pushers) + 1


SLICE = [0, 11]  # `make test`: 3 nodes, backups, dense+hot+reloc+ssp; 3 nodes, disk+hot+reloc+sparse onto 1 node


@pytest.mark.long(20)
@pytest.mark.timeout(360)
@pytest.mark.parametrize("seed", SLICE)
def test_compose_slice(cluster_factory, tmp_path, seed):
    compose(cluster_factory, tmp_path, seed)


@pytest.mark.stress
@pytest.mark.timeout(360)
@pytest.mark.parametrize("index", range(SEEDS))
def test_compose_stress(cluster_factory, tmp_path, index):
    compose(cluster_factory, tmp_path, BASE * 1000 + index)
