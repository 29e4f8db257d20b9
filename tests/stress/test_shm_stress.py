"""Shared memory under failures (issue 31): 3 nodes on one host push into each other's shards and
read them (shm_node.py) while one is SIGKILLed, or SIGSTOPped past the failure timeout, at a
seeded moment; with backups or without.

- Without backups every node reads and writes the others' rows in their shared-memory files, so the
  victim dies (or stops) while the others' pushes run in its rows, and its own workers' in theirs,
  under the stripe spinlocks (store.spin); or (`holding`) the victim SIGKILLs or SIGSTOPs itself
  while it holds a spinlock of another node's shard, which a signal from outside rarely catches. A
  stopped holder is alive: whoever needs that stripe waits for it until its own node has failed
  (the coordinator declared the victim failed: store.spin.watch ends the wait), with the victim
  still stopped; it is woken only at the end (woken, it lets go and learns it is out).
  The cluster ends (NodeFailure), and then: every survivor stops within a bound (no waiter hangs on a
  dead holder's spinlock: freed after a second, also while the holder is a zombie), and every
  acknowledged push is in the rows, none twice: acked <= rows <= sent, per worker and key (a
  worker has at most one push in flight), where the rows are every shard's files, mapped here
  before the signal and read once every node exited (a stopped victim, woken after the survivors
  finished, completes its push in flight in their rows: a shard's rows are final only then).
- With backups nothing is served through shared memory (every write goes to its range's head as a
  message: the matrix's `inert` cell), and failover is checked as tests/fault/test_backups.py does:
  the survivors' workers' columns equal their acknowledged pushes, the victim's hold those and at
  most its one push in flight.
- Either way the victim's files are gone once a node of the next cluster started (its sweep), or,
  for a stopped victim woken after the check, once it exited.

    make stress                                            # STRESS_SHM_SEEDS seeds (default 8)
    PSKV_STRESS_SEED=7 .venv/bin/python -m pytest -m stress tests/stress/test_shm_stress.py

`test_shm_failure_slice` (without backups, the case shared memory changes: a node dies holding a
spinlock of another's shard; one stops holding one) runs in `make test`.
"""

from __future__ import annotations

import glob
import contextlib
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import wait_until  # noqa: E402

from pskv.store import shm  # noqa: E402

pytestmark = pytest.mark.slow

NODE = str(Path(__file__).with_name("shm_node.py"))
SEEDS = int(os.environ.get("STRESS_SHM_SEEDS", "8"))
BASE = int(os.environ.get("PSKV_STRESS_SEED", "0"))
ROWS, NODES, THREADS = 600, 3, 2
FAILURE_TIMEOUT = 5.0  # (without backups the launcher stops the survivors min(5 s, this) after a death:
# they need the second a dead holder's spinlock takes, under load)
SETTLE = 60.0  # seconds the survivors may take after the signal; healthy: failure_timeout + a second or two


def _scenario(seed: int) -> dict:
    rng = random.Random(seed)
    sc = {"signal": rng.choice(["kill", "stop"]), "backups": rng.choice([0, 1]), "victim": rng.randrange(NODES),
          "delay": rng.uniform(0.0, 0.6)}
    sc["holding"] = not sc["backups"] and rng.random() < 0.5
    return sc


def _files(line: str) -> dict:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def _rows_of(info: dict, rank: int):
    """Map node `rank`'s shard of the table from its files, here (the mapping outlives the files)."""
    found = shm.find_meta(info["dir"], rank, int(info["table"]))
    assert found is not None, f"node {rank}'s shard is not in {info['dir']}"
    prefix, block = found
    header = shm.split_meta(block)[0]
    slot = shm.map_file(os.path.join(info["dir"], f"{prefix}.slot"), (ROWS,), np.int64)
    data = shm.map_file(os.path.join(info["dir"], f"{prefix}.rows.g{int(header[shm.GEN])}"),
                        (int(header[shm.CAPACITY]), NODES * THREADS), np.float32)
    return slot, data


def _counts(out: Path, name: str, g: int) -> np.ndarray:
    path = out / f"{name}-{g}"
    return np.bincount(np.fromfile(path, np.int64), minlength=ROWS) if path.exists() else np.zeros(ROWS, np.int64)


def _pids_files(pid: int) -> list[str]:
    return glob.glob(os.path.join(shm.root(), "*", f"*.{pid}.t*"))


def shm_failure(cluster_factory, tmp_path, seed: int) -> None:
    sc = _scenario(seed)
    victim, stop = sc["victim"], sc["signal"] == "stop"
    repro = (f"PSKV_STRESS_SEED={seed // 1000} STRESS_SHM_SEEDS={seed % 1000 + 1} .venv/bin/python -m pytest -m stress "
             f"-n 0 'tests/stress/test_shm_stress.py::test_shm_failure_stress[{seed % 1000}]'")
    print(f"\nshm failure seed {seed}: {sc}\nreproduce: {repro}", flush=True)
    out = tmp_path / "out"
    out.mkdir()
    holder = [str(victim), sc["signal"]] if sc["holding"] else []
    run = cluster_factory(NODES, [sys.executable, NODE, "storm", str(out), str(ROWS), *holder], threads=THREADS,
                          backups=sc["backups"] or None, failure_timeout=FAILURE_TIMEOUT,
                          env={"PSKV_SHARED_MEMORY": "1"})

    def logs() -> str:
        return f"reproduce: {repro}\n{run.logs_tail(40)}"

    for r in range(NODES):
        wait_until(lambda: "storm running" in run.output(r), 90, lambda: f"node {r} running\n{logs()}")
    info = {r: _files(next(line for line in run.output(r).splitlines() if line.startswith("files "))) for r in range(NODES)}
    assert info[victim]["dir"] != "None", f"no shared memory\n{logs()}"
    pid = int(info[victim]["pid"])
    mapped = {r: _rows_of(info[r], r) for r in range(NODES)}
    if sc["holding"]:
        (out / "die").touch()
        wait_until(lambda: "holding stripe" in run.output(victim), 60, lambda: f"node {victim} to hold\n{logs()}")
    else:
        time.sleep(sc["delay"])
        run.kill(victim, signal.SIGSTOP if stop else signal.SIGKILL)
    survivors = [r for r in range(NODES) if r != victim]
    try:
        for r in survivors:  # (no survivor waits for long on a lock the victim held, or at all: a stopped
            # holder's stripe is waited for until the survivor's node fails, store.spin.watch)
            wait_until(lambda: "storm ok" in run.output(r) or int(info[r]["pid"]) not in run.alive_pids(), SETTLE,
                       lambda: f"node {r} to finish after node {victim}'s {sc['signal']}\n{logs()}")
            assert "storm ok" in run.output(r), logs()
    finally:
        if stop:
            run.kill(victim, signal.SIGCONT)  # woken, it learns it is out and exits
    def exited() -> bool:
        if stop and run.alive_pids():  # (a victim stopping itself at a stripe may take one again once woken)
            with contextlib.suppress(ProcessLookupError):
                run.kill(victim, signal.SIGCONT)
        return not run.alive_pids()

    wait_until(exited, 60, lambda: f"every node to exit\n{logs()}")
    g_of = {r: range(r * THREADS, (r + 1) * THREADS) for r in range(NODES)}
    sent = {g: _counts(out, "sent", g) for g in range(NODES * THREADS)}
    acked = {g: _counts(out, "acked", g) for g in range(NODES * THREADS)}
    if sc["backups"]:
        final = np.load(out / "final.npy")
        for r in survivors:
            assert "shared=0" in run.output(r), f"a backed table served keys through shared memory\n{logs()}"
    else:
        final = np.zeros((ROWS, NODES * THREADS), np.float32)
        bounds = [r * ROWS // NODES for r in range(NODES + 1)]
        for r, (slot, data) in mapped.items():
            keys = np.arange(bounds[r], bounds[r + 1])
            final[keys] = data[slot[keys]]
        for r in survivors:
            assert not re.search(r"storm ok .* shared=0 ", run.output(r)), f"nothing went through shared memory\n{logs()}"
    for g in range(NODES * THREADS):
        col, survivor = final[:, g], g not in g_of[victim]
        if sc["backups"] and survivor:
            assert (sent[g] == acked[g]).all() and (col == acked[g]).all(), (
                f"worker {g} (a survivor): {int((col != acked[g]).sum())} rows differ from its acknowledged pushes; {logs()}")
        low, high = (col < acked[g]), (col > sent[g])
        assert not low.any(), (f"worker {g}: {int(low.sum())} rows lost an acknowledged push, e.g. key "
                               f"{np.flatnonzero(low)[0]}: {col[low][0]} < {acked[g][low][0]}; {logs()}")
        assert not high.any(), (f"worker {g}: {int(high.sum())} rows got a push twice (or one never sent), e.g. key "
                                f"{np.flatnonzero(high)[0]}: {col[high][0]} > {sent[g][high][0]}; {logs()}")
        assert (sent[g] - acked[g]).sum() <= 16, f"worker {g} had more than one push in flight"
    assert acked[g_of[victim][0]].sum() > 0
    del mapped
    again = cluster_factory(2, [sys.executable, NODE, "idle"], env={"PSKV_SHARED_MEMORY": "1"})
    assert again.wait(timeout=60) == 0, again.logs_tail()
    assert not _pids_files(pid), f"node {victim}'s files outlived it: {_pids_files(pid)}"


SLICE = [2, 7]  # `make test`: without backups, a node dies holding a spinlock of another's shard; one stops so


@pytest.mark.long(20)
@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", SLICE)
def test_shm_failure_slice(cluster_factory, tmp_path, seed):
    shm_failure(cluster_factory, tmp_path, seed)


@pytest.mark.stress
@pytest.mark.timeout(240)
@pytest.mark.parametrize("index", range(SEEDS))
def test_shm_failure_stress(cluster_factory, tmp_path, index):
    shm_failure(cluster_factory, tmp_path, BASE * 1000 + index)
