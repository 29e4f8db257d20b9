"""Launchers other than `pskv launch`, end to end on 127.0.0.1: node processes started as srun, a
Kubernetes Indexed Job or torchrun would start them (their variables only) form one cluster and sum
exactly; Ray runs one node per actor (skipped where ray is not installed)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import free_port
from pskv.cli import main
from pskv.environments import slurm_port
from pskv.errors import NodeFailure

SCRIPT = str(Path(__file__).parent / "launchers_script.py")
_OTHER_LAUNCHERS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "JOB_COMPLETION_INDEX")
_TRIES = 3  # another process may take a port we found free before node 0 binds it


def _clean_env() -> dict[str, str]:
    """Our environment without any launcher's variables (the runner's own SLURM job included)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PSKV_", "SLURM_")) and k not in _OTHER_LAUNCHERS}


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _slurm_envs() -> tuple[list[dict], list[str]]:
    """srun's variables for 2 tasks on localhost, with a job id whose derived port is free now;
    and the coordinator address each node should use."""
    job = next(j for j in random.sample(range(1, 10**6), 200) if _port_is_free(slurm_port({"SLURM_JOB_ID": str(j)})))
    common = {"SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NODELIST": "localhost",
              "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", "SLURM_NODEID": "0"}
    address = f"127.0.0.1:{slurm_port({'SLURM_JOB_ID': str(job)})}"
    return [{**common, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)} for r in range(2)], [address] * 2


def _k8s_envs() -> tuple[list[dict], list[str]]:
    """An Indexed Job's pods as examples/k8s/pskv-job.yaml sets them up, all on loopback: pod 0
    binds its own address, the others connect to PSKV_COORDINATOR_HOST by name."""
    port = free_port()
    common = {"PSKV_NUM_NODES": "2", "PSKV_COORDINATOR_HOST": "localhost", "PSKV_PORT": str(port),
              "PSKV_HOST": "127.0.0.1"}
    return [{**common, "JOB_COMPLETION_INDEX": str(r)} for r in range(2)], [f"127.0.0.1:{port}", f"localhost:{port}"]


def _torchrun_envs() -> tuple[list[dict], list[str]]:
    """torchrun's variables (torch itself is not needed: test_torch.py runs the real torchrun)."""
    port = free_port()  # the coordinator's: MASTER_PORT + 1
    common = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1)}
    return [{**common, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(2)], [f"127.0.0.1:{port}"] * 2


def _run_nodes(envs: list[dict], log_dir: Path, timeout: float = 90) -> list[tuple[int | None, str]]:
    """Start one node process per env, wait for all; (exit status, output) per rank. Kills (by PID)
    whatever still runs at the deadline or on any error."""
    procs = []
    try:
        for rank, env in enumerate(envs):
            with open(log_dir / f"node-{rank}.log", "w") as log:
                procs.append(subprocess.Popen([sys.executable, SCRIPT], env={**_clean_env(), **env},
                                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return [(proc.returncode, (log_dir / f"node-{rank}.log").read_text()) for rank, proc in enumerate(procs)]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["slurm", "kubernetes", "torchrun"])
def test_launcher_variables_alone_form_one_cluster_that_sums_exactly(tmp_path, launcher):
    """2 processes with only srun's / an Indexed Job's / torchrun's variables: one cluster, node 0 runs
    the coordinator at the mapped address, and every node pulls exactly 1 + 2 in every row."""
    make = {"slurm": _slurm_envs, "kubernetes": _k8s_envs, "torchrun": _torchrun_envs}[launcher]
    for attempt in range(_TRIES):
        envs, coordinators = make()
        log_dir = tmp_path / f"try-{attempt}"
        log_dir.mkdir()
        results = _run_nodes(envs, log_dir)
        if not any("already in use" in out for _, out in results):
            break
    outputs = "\n".join(f"--- node {r} (exit {code}) ---\n{out}" for r, (code, out) in enumerate(results))
    assert [code for code, _ in results] == [0, 0], outputs
    for rank, (_, out) in enumerate(results):
        assert f"rank {rank} of 2 at {coordinators[rank]}: {[3.0] * 8}\n" in out, outputs


def test_launch_ray_refuses_options_it_cannot_honour(capsys):
    """`pskv launch --ray` places nodes itself: a hostfile, a join or a coordinator host is an error."""
    assert main(["launch", "--ray", "--hostfile", "hosts.txt", "-n", "2", "--", "true"]) == 2
    assert capsys.readouterr().err == ("pskv launch: error: --hostfile does not apply with --ray: Ray places the "
                                       "nodes and node 0 runs the coordinator\n")


def test_launch_ray_without_ray_says_how_to_install(capsys, monkeypatch):
    """Where ray is missing, `pskv launch --ray` says which extra to install (and starts nothing)."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    assert main(["launch", "--ray", "-n", "2", "--", "true"]) == 2
    assert capsys.readouterr().err == ("pskv launch: error: --ray needs the ray package, which is not installed "
                                       "here; `pip install 'pskv[ray]'` (ray>=2.9), on every machine of the Ray "
                                       "cluster\n")


@pytest.fixture(scope="module")
def local_ray():
    """A private Ray on 127.0.0.1 with 2 CPUs, shut down after this module's Ray tests."""
    try:
        import ray
    except ImportError:
        pytest.skip("ray is not installed (the optional extra `pip install 'pskv[ray]'`; `make test` installs "
                    "it with the dev extra)")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_runs_one_node_per_actor_end_to_end(local_ray, capsys):
    """run_ray: a function in 2 actors forms one cluster that sums exactly; launch_ray: a command
    likewise exits 0; a failing node is reported by rank, and the others are stopped."""
    from pskv.launch_ray import launch_ray, run_ray

    def node_fn(tag):
        import numpy as np

        import pskv

        with pskv.init() as node:
            node.table("t", rows=8, dim=1)
            worker = node.worker()
            worker.table("t").push(np.arange(8), np.full((8, 1), node.rank + 1.0, np.float32)).wait()
            worker.barrier()
            rows = worker.table("t").pull(np.arange(8))[:, 0].tolist()
            worker.close()
            return tag, node.rank, node.num_nodes, rows

    assert run_ray(node_fn, 2, "x", host="127.0.0.1") == [("x", 0, 2, [3.0] * 8), ("x", 1, 2, [3.0] * 8)]
    assert launch_ray(2, [sys.executable, SCRIPT], host="127.0.0.1") == 0

    exit_3_on_rank_1 = "import os, sys; print('bye', flush=True); sys.exit(3 if os.environ['PSKV_RANK'] == '1' else 0)"
    capsys.readouterr()
    assert launch_ray(2, [sys.executable, "-c", exit_3_on_rank_1], host="127.0.0.1", grace=60) == 3  # node 0 ends
    assert capsys.readouterr().err == ("[launcher] node 1 failed: its command exited with status 3\n"
                                       "[launcher] the last lines of node 1:\nbye\n")

    def fail_on_rank_1():
        import os

        import pskv

        if os.environ["PSKV_RANK"] == "1":
            raise ValueError("boom on rank 1")
        with pskv.init():  # waits for node 1, which never comes: stopped after the grace period
            pass

    with pytest.raises(NodeFailure) as info:
        run_ray(fail_on_rank_1, 2, host="127.0.0.1", grace=1.0)
    assert info.value.node_id == 1
    assert str(info.value) == ("node 1 failed in its Ray actor: ValueError: boom on rank 1; stopped the 1 node(s) "
                               "still running")
