"""Randomized stress: seeded mixes of every operation, on 2-4 nodes x 1-3 threads, under Async, SSP
and BSP, with exact checks, while a CPU-bound process competes for the cores (conftest.py).

Each test starts one cluster (pskv.launch) that runs many seeded rounds of stress_node.py; every
round declares fresh tables and ends in exact-value assertions made on the nodes themselves.

    make stress                                         # every combination, >= 200 rounds
    PSKV_STRESS_SEED=123 make stress                    # the same rounds again
    PSKV_STRESS_SEED=123 .venv/bin/python -m pytest -m stress 'tests/stress/test_stress.py::test_stress[3-ssp]'

Without PSKV_STRESS_SEED the stress tests draw a fresh base seed per session (printed, and in
every failure message). A failing round also prints a `pskv launch ... --round-seed N` line that
replays just that round. The unmarked `test_stress_slice` runs a few fixed seeds in `make test`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

NODE = Path(__file__).with_name("stress_node.py")
# read at import: the autouse clean_pskv_environ fixture removes PSKV_* before each test runs
ENV_SEED = os.environ.get("PSKV_STRESS_SEED")
SEED = int(ENV_SEED) if ENV_SEED else secrets.randbelow(2**31)
ROUNDS = int(os.environ.get("PSKV_STRESS_ROUNDS", "45"))  # per combination: 9 x 45 = 405 rounds
ROUND_LIMIT = 90  # seconds: a round still running then prints its stacks and exits (stress_node.Watchdog)


def _py_spy(pids: list[int]) -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "(py-spy is not installed: `.venv/bin/python -m pip install py-spy` for stacks of hung nodes)"
    dumps = []
    for pid in pids:
        try:
            out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=15)
            dumps.append(f"--- py-spy dump --pid {pid}\n{out.stdout}{out.stderr}")
        except (OSError, subprocess.SubprocessError) as exc:
            dumps.append(f"--- py-spy dump --pid {pid}: {exc!r}")
    return "\n".join(dumps)


def _run(cluster_factory, nodes: int, model: str, seed: int, rounds: int, repro: str, *, budget: float) -> int:
    """Run `rounds` rounds on one cluster within `budget` seconds (below the test's pytest timeout, so
    a hang ends here, with py-spy stacks); returns how many passed (all, or the test fails)."""
    command = [sys.executable, str(NODE), "--model", model, "--seed", str(seed), "--rounds", str(rounds),
               "--round-limit", str(ROUND_LIMIT)]
    print(f"\nstress: nodes={nodes} model={model} seed={seed} rounds={rounds}; reproduce: {repro}", flush=True)
    start = time.monotonic()
    cluster = cluster_factory(nodes, command)
    try:
        status = cluster.wait(timeout=budget)
    except TimeoutError:
        pytest.fail(f"stress run hung or ran past {budget} s (seed {seed}); reproduce: {repro}\n"
                    f"{_py_spy(cluster.alive_pids())}\n{cluster.logs_tail(120)}")
    assert status == 0, f"stress run failed (seed {seed}); reproduce: {repro}\n{cluster.logs_tail(120)}"
    passed = [line for line in cluster.output(0).splitlines() if line.startswith("ROUND ") and " ok " in line]
    assert len(passed) == rounds, f"{len(passed)} of {rounds} rounds reported ok; reproduce: {repro}"
    print(f"stress: {len(passed)} rounds ok in {time.monotonic() - start:.1f} s (nodes={nodes} model={model} "
          f"seed={seed})", flush=True)
    return len(passed)


# ---- the slice of every `make test`: fixed seeds, a few rounds each --------------------------------------------

# (nodes, model, seed, rounds)
SLICE = [(2, "async", 101, 10), (3, "async", 104, 6), (3, "ssp", 102, 6), (4, "bsp", 103, 4)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nodes, model, seed, rounds", SLICE, ids=[f"{n}-{m}" for n, m, _, _ in SLICE])
def test_stress_slice(cluster_factory, nodes, model, seed, rounds):
    """A few fixed seeded rounds of the stress mix, on every `make test`."""
    repro = f".venv/bin/python -m pytest 'tests/stress/test_stress.py::test_stress_slice[{nodes}-{model}]'"
    _run(cluster_factory, nodes, model, seed, rounds, repro, budget=170)


# ---- make stress: every combination, many rounds ---------------------------------------------------------------

COMBINATIONS = [(n, m) for n in (2, 3, 4) for m in ("async", "ssp", "bsp")]


@pytest.mark.stress
@pytest.mark.timeout(900)
@pytest.mark.parametrize("nodes, model", COMBINATIONS, ids=[f"{n}-{m}" for n, m in COMBINATIONS])
def test_stress(cluster_factory, nodes, model):
    """ROUNDS seeded rounds on one cluster of `nodes` nodes under `model` (the base seed: PSKV_STRESS_SEED)."""
    repro = (f"PSKV_STRESS_SEED={SEED} PSKV_STRESS_ROUNDS={ROUNDS} .venv/bin/python -m pytest -m stress "
             f"'tests/stress/test_stress.py::test_stress[{nodes}-{model}]'")
    _run(cluster_factory, nodes, model, SEED, ROUNDS, repro, budget=780)


# ---- what the stress rounds found (findings.py), as regression tests ----------------------------------------

FINDINGS = str(Path(__file__).with_name("findings.py"))


def _finding(cluster_factory, name: str) -> None:
    cluster = cluster_factory(2, [sys.executable, FINDINGS, name])
    try:
        status = cluster.wait(timeout=90)
    except TimeoutError:
        pytest.fail(f"findings.py {name} hung\n{_py_spy(cluster.alive_pids())}\n{cluster.logs_tail(60)}")
    assert status == 0, f"pskv launch -n 2 -- python tests/stress/findings.py {name}\n{cluster.logs_tail(30)}"


@pytest.mark.timeout(120)
def test_replicated_rows_stay_out_of_the_row_cache(cluster_factory):
    """Found by round seed 3043365970 (ssp, 2 nodes), fixed in 7083ee9: a BSP pull cached replicated rows
    this node does not manage, and the worker's next pull missed its own push to the replica."""
    _finding(cluster_factory, "replica_cache")


@pytest.mark.timeout(120)
def test_row_cache_keeps_own_pushes_under_threads(cluster_factory):
    """Found by stress seed 465457338 (test_stress[2-ssp], round 17 = round seed 4017710760), fixed in
    7083ee9: a pull read the cache's write sequence after flushing, so a push by another thread of the
    node could miss both the fetched row and the cached copy (SSP read-my-writes)."""
    _finding(cluster_factory, "cache_race")


@pytest.mark.timeout(120)
def test_push_after_set_is_not_lost(cluster_factory):
    """Found by round seed 3832411 (bsp, 4 nodes), fixed in 80518b2: under BSP/SSP a worker's set went out
    on its own socket while its later push waited in the node's buffer; another thread's flush could
    deliver the push first, and the set overwrote it (a lost update)."""
    _finding(cluster_factory, "set_then_push")
