"""launch.py and the `pskv launch` command, with plain scripts as nodes (no pskv inside them).

The coordinator is disabled (coordinator=False) or a fake that records report_failure(), so
these tests check process handling alone; one test starts the real Coordinator.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pskv.config import ConfigError, NodeConfig
from pskv.errors import PskvError
from pskv.launch import node_env, read_hostfile, start_local

from helpers import PATIENCE, wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
PRINT_ENV = ("import json, os; "
             "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('PSKV_')}))")
SLEEP = "import time; time.sleep(60)"  # longer than any wait below: a node that ends early was stopped


def exit_codes(cluster) -> list[int | None]:
    """Each node's Popen-style status by rank (-N: ended by signal N): what stopped it, not when."""
    return [node.exit_code() for node in cluster._nodes]


def gone(pid: int, within: float = PATIENCE) -> bool:
    """True once `pid` no longer runs (no such process, or a zombie its new parent keeps)."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.05)


def script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def rank_script(**by_rank: str) -> list[str]:
    """A node that runs by_rank['r<rank>'] if given, else by_rank['other']."""
    table = {int(k[1:]) if k.startswith("r") else k: v for k, v in by_rank.items()}
    return script(f"""
        import os
        code = {table!r}
        exec(code.get(int(os.environ["PSKV_RANK"]), code["other"]))
    """)


class FakeCoordinator:
    """Stands in for pskv.membership.coordinator.Coordinator; records its calls."""

    made: list["FakeCoordinator"] = []

    def __init__(self, num_nodes, host, port, config):
        self.num_nodes, self.host, self.config = num_nodes, host, config
        self.address = f"{host}:4999"
        self.calls: list[tuple] = []
        FakeCoordinator.made.append(self)

    def start(self):
        self.calls.append(("start",))
        return self

    def report_failure(self, rank, reason):
        self.calls.append(("report_failure", rank, reason))

    def close(self):
        self.calls.append(("close",))


@pytest.fixture
def fake_coordinator():
    FakeCoordinator.made = []
    yield FakeCoordinator
    FakeCoordinator.made = []


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("no_user_data_vars")
def test_start_local_env_per_rank(cluster_factory, fake_coordinator):
    """Every node gets its rank, the node count, its host, threads and the coordinator."""
    cluster = cluster_factory(3, script(PRINT_ENV), threads=2, coordinator=fake_coordinator)
    assert cluster.wait(timeout=30) == 0, cluster.logs_tail()
    assert cluster.coordinator_address == "127.0.0.1:4999"
    for rank in range(3):
        env = json.loads(cluster.output(rank))
        assert env == {"PSKV_COORDINATOR": "127.0.0.1:4999", "PSKV_NUM_NODES": "3",
                       "PSKV_RANK": str(rank), "PSKV_HOST": "127.0.0.1", "PSKV_THREADS": "2",
                       "PSKV_EXTERNAL_COORDINATOR": "1"}
    (coord,) = fake_coordinator.made
    assert coord.num_nodes == 3 and coord.host == "127.0.0.1"
    cluster.shutdown()
    assert coord.calls == [("start",), ("close",)]


@pytest.mark.timeout(60)
def test_start_local_inherited_pskv_vars(cluster_factory, monkeypatch):
    """Per-node variables of the launcher's own environment never leak; other PSKV_* pass."""
    monkeypatch.setenv("PSKV_RANK", "7")
    monkeypatch.setenv("PSKV_COORDINATOR", "10.0.0.1:1")
    cluster = cluster_factory(2, script(PRINT_ENV), coordinator=False, failure_timeout=3,
                              env={"PSKV_TEST_DROP_RATE": "0.25"})
    assert cluster.wait(timeout=30) == 0, cluster.logs_tail()
    env = json.loads(cluster.output(1))
    assert env["PSKV_RANK"] == "1" and "PSKV_COORDINATOR" not in env
    assert env["PSKV_TEST_DROP_RATE"] == "0.25" and env["PSKV_FAILURE_TIMEOUT"] == "3"


def test_node_env_writes_per_node_vars_at_defaults():
    """Rank 0 and one thread are written even though they are NodeConfig's defaults."""
    env = node_env(NodeConfig(coordinator="h:1", num_nodes=2, rank=0))
    assert env == {"PSKV_COORDINATOR": "h:1", "PSKV_NUM_NODES": "2", "PSKV_RANK": "0",
                   "PSKV_HOST": "127.0.0.1", "PSKV_THREADS": "1"}


@pytest.mark.timeout(60)
def test_echo_prefixes_every_line(cluster_factory, capsys):
    """With echo=True each line reaches stdout as `[node i] line`, stderr lines too."""
    cluster = cluster_factory(2, script("""
        import os, sys
        print("hello", os.environ["PSKV_RANK"])
        print("oops", file=sys.stderr)
    """), coordinator=False, echo=True)
    assert cluster.wait(timeout=30) == 0
    out = capsys.readouterr().out.splitlines()
    for rank in range(2):
        assert f"[node {rank}] hello {rank}" in out
        assert f"[node {rank}] oops" in out


@pytest.mark.timeout(60)
def test_output_and_log_files(cluster_factory, tmp_path):
    """output(rank) and log_dir/node-<rank>.log hold what the node printed, unprefixed."""
    cluster = cluster_factory(2, script("""
        import os, sys
        r = os.environ["PSKV_RANK"]
        print("out", r)
        print("err", r, file=sys.stderr)
        sys.stdout.write("no newline at the end")
    """), coordinator=False, log_dir=tmp_path / "logs")
    assert cluster.wait(timeout=30) == 0
    for rank in range(2):
        lines = cluster.output(rank).splitlines()
        assert sorted(lines) == sorted([f"out {rank}", f"err {rank}", "no newline at the end"])
        cluster.shutdown()  # closes the log files
        logged = (tmp_path / "logs" / f"node-{rank}.log").read_text().splitlines()
        assert sorted(logged) == sorted(lines)
    tail = cluster.logs_tail(lines=1)
    assert "--- node 1 (pid" in tail and tail.count("[node ") == 2


@pytest.mark.timeout(60)
def test_wait_all_exit_zero(cluster_factory):
    """All nodes exit 0 -> wait() returns 0 and nothing is left running."""
    cluster = cluster_factory(4, script("pass"), coordinator=False)
    assert cluster.wait(timeout=30) == 0
    assert cluster.alive_pids() == [] and len(cluster.pids) == 4


@pytest.mark.timeout(60)
def test_wait_one_node_fails_others_stopped(cluster_factory, fake_coordinator):
    """Node 1 exits 3: the coordinator hears of it, the sleeping others are stopped (SIGTERM after the grace)."""
    cluster = cluster_factory(3, rank_script(r1="import time, sys; time.sleep(0.3); sys.exit(3)",
                                             other=SLEEP),
                              coordinator=fake_coordinator, failure_timeout=1)
    assert cluster.wait(timeout=PATIENCE) == 3, cluster.logs_tail()
    assert cluster.alive_pids() == []
    assert exit_codes(cluster) == [-signal.SIGTERM, 3, -signal.SIGTERM], cluster.logs_tail()
    calls = fake_coordinator.made[0].calls
    assert calls[1] == ("report_failure", 1, "process exited with status 3")


@pytest.mark.timeout(60)
def test_wait_sigterm_ignored_then_sigkill(cluster_factory, tmp_path):
    """A survivor that ignores SIGTERM is killed with SIGKILL a few seconds later."""
    ready = str(tmp_path / "ignoring")  # node 0 fails only once node 1 ignores SIGTERM, however slow its start
    ignore = (f"import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              f"pathlib.Path({ready!r}).touch(); time.sleep(60)")
    fail = (f"import os, time\nfor _ in range(6000):\n    if os.path.exists({ready!r}): break\n    time.sleep(0.01)\n"
            "raise SystemExit(2)")
    cluster = cluster_factory(2, rank_script(r0=fail, other=ignore), coordinator=False, failure_timeout=0.5)
    assert cluster.wait(timeout=PATIENCE) == 2
    assert exit_codes(cluster) == [2, -signal.SIGKILL], cluster.logs_tail()


@pytest.mark.timeout(60)
def test_kill_node_makes_status_nonzero(cluster_factory, fake_coordinator):
    """kill(rank) with SIGKILL counts as a failure (status 1) and stops the rest."""
    cluster = cluster_factory(2, script(f"print('up', flush=True); {SLEEP}"),
                              coordinator=fake_coordinator, failure_timeout=1)
    wait_until(lambda: "up" in cluster.output(0), what="node 0 printing 'up'")
    cluster.kill(0)
    assert cluster.wait(timeout=PATIENCE) == 1
    assert ("report_failure", 0, "process was killed by SIGKILL") in fake_coordinator.made[0].calls


@pytest.mark.timeout(60)
def test_wait_timeout_leaves_nodes_running(cluster_factory):
    """wait(timeout) raises TimeoutError and leaves the nodes alone; shutdown() stops them."""
    cluster = cluster_factory(2, script(SLEEP), coordinator=False)
    with pytest.raises(TimeoutError):
        cluster.wait(timeout=0.2)
    assert sorted(cluster.alive_pids()) == sorted(cluster.pids)
    cluster.shutdown(timeout=PATIENCE)
    cluster.shutdown()  # idempotent
    assert cluster.alive_pids() == []
    assert exit_codes(cluster) == [-signal.SIGTERM] * 2  # shutdown's SIGTERM, not the SIGKILL after its timeout
    assert cluster.wait(timeout=1) != 0


@pytest.mark.timeout(60)
def test_shutdown_stops_the_whole_process_group(cluster_factory):
    """Children that a node started (here: a shell's background sleep) end with it."""
    cluster = cluster_factory(1, ["bash", "-c", "sleep 60 & echo $!; wait"], coordinator=False)
    wait_until(lambda: cluster.output(0).strip(), what="the node printing its child's pid")
    grandchild = int(cluster.output(0))
    cluster.shutdown(timeout=5)
    assert gone(grandchild)


@pytest.mark.timeout(60)
def test_start_local_real_coordinator(cluster_factory):
    """With the real Coordinator, nodes get its address and shutdown() closes it."""
    cluster = cluster_factory(2, script(PRINT_ENV), failure_timeout=2)
    assert cluster.wait(timeout=30) == 0, cluster.logs_tail()
    host, port = cluster.coordinator_address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert json.loads(cluster.output(0))["PSKV_COORDINATOR"] == cluster.coordinator_address
    cluster.shutdown()


@pytest.mark.parametrize("nodes, command, match", [
    (0, ["true"], "at least 1 node"),
    (2, [], "command to launch is empty"),
])
def test_start_local_bad_arguments(nodes, command, match):
    """Bad node counts and empty commands are ConfigErrors, before anything starts."""
    with pytest.raises(ConfigError, match=match):
        start_local(nodes, command, coordinator=False)


@pytest.mark.timeout(60)
def test_start_local_command_not_found():
    """A command that cannot start raises ConfigError and leaves nothing behind."""
    with pytest.raises(ConfigError, match="cannot start node 0"):
        start_local(2, ["/nonexistent/pskv-no-such-program"], coordinator=False)


def test_read_hostfile_comments_blank_lines_and_slots(tmp_path):
    """Comments, blank lines and `slots=K` are skipped; hosts keep their order."""
    path = tmp_path / "hosts"
    path.write_text("# cluster\n\nnode-a slots=4\n  node-b  # the second\nnode-a\n")
    assert read_hostfile(path) == ["node-a", "node-b", "node-a"]


@pytest.mark.parametrize("text, match", [
    ("", "names no host"),
    ("# only a comment\n\n", "names no host"),
    ("host-a\nhost-b cpus=3\n", "line 2"),
    ("host-a slots=x\n", "line 1"),
    ("-oProxyCommand=evil\n", "line 1"),
])
def test_read_hostfile_bad(tmp_path, text, match):
    """A bad hostfile is a ConfigError (a PskvError) that names the file and line."""
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        read_hostfile(path)
    assert isinstance(info.value, PskvError) and str(path) in str(info.value)


def test_read_hostfile_missing(tmp_path):
    """A hostfile that does not exist is a ConfigError, also from start_local()."""
    with pytest.raises(ConfigError, match="cannot read hostfile"):
        start_local(2, ["true"], hostfile=tmp_path / "nope", coordinator=False)


def run_cli(*args: str, timeout: float = 40) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "pskv", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(60)
def test_cli_launch_prefixes_output_and_exits_zero():
    """`pskv launch -n 2 -- CMD` shows both nodes' lines with their prefix; status 0."""
    result = run_cli("launch", "-n", "2", "--", *script(
        "import os; print('rank', os.environ['PSKV_RANK'], os.environ['PSKV_NUM_NODES'])"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "[node 0] rank 0 2" in lines and "[node 1] rank 1 2" in lines


@pytest.mark.timeout(60)
def test_cli_launch_failing_node_sets_status():
    """One node exits 3 while the other sleeps: the launch exits 3, having stopped the sleeper (run_cli's
    40 s limit is shorter than its 60 s sleep)."""
    result = run_cli("launch", "-n", "2", "--", *rank_script(r1="raise SystemExit(3)", other=SLEEP))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "[launcher] node 1 failed: process exited with status 3" in result.stdout


@pytest.mark.timeout(60)
def test_cli_launch_sigterm_stops_nodes():
    """SIGTERM to the launcher stops every node it started; status 128 + SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pskv", "launch", "-n", "2", "--",
         *script(f"import os; print('pid', os.getpid(), flush=True); {SLEEP}")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(launcher.stdout.readline().split()[-1]) for _ in range(2)]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=PATIENCE) == 128 + signal.SIGTERM
        assert all(gone(pid) for pid in pids)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.communicate(timeout=10)


def test_cli_bad_arguments_exit_2(capsys):
    """Errors from launch() are printed as `pskv launch: error: ...` with status 2."""
    from pskv.cli import main

    assert main(["launch", "-n", "0", "--", "true"]) == 2
    assert "pskv launch: error: nodes is 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["launch", "--bogus", "-n", "1", "--", "true"])


def test_cli_version(capsys):
    """`pskv version` prints the version."""
    from pskv.cli import main

    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("pskv ")


@pytest.mark.parametrize("name", ["demo", "bench"])
def test_cli_forwards_demo_and_bench(monkeypatch, name):
    """`pskv demo ARGS` calls pskv.demo.main(ARGS) (likewise bench) and returns its status."""
    import types

    from pskv.cli import main

    seen = []
    fake = types.ModuleType(f"pskv.{name}")
    fake.main = lambda args: seen.append(args) or 7
    monkeypatch.setitem(sys.modules, f"pskv.{name}", fake)
    assert main([name, "--nodes", "2", "-h"]) == 7
    assert seen == [["--nodes", "2", "-h"]]


@pytest.mark.timeout(60)
def test_shutdown_ends_a_stopped_node_without_waiting(cluster_factory):
    """A node stopped by SIGSTOP ends on shutdown's SIGTERM (sent with SIGCONT), not at timeout."""
    cluster = cluster_factory(1, script(SLEEP), coordinator=False)
    cluster.kill(0, signal.SIGSTOP)
    cluster.shutdown(timeout=PATIENCE)
    assert cluster.alive_pids() == []
    assert exit_codes(cluster) == [-signal.SIGTERM]  # a SIGKILL would be the one sent after the timeout
    assert cluster.wait(timeout=1) == 1
