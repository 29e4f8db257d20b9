"""Emulated hosts (pskv.launch.hosts, `pskv launch --hosts H --link RATE`): nodes in network namespaces
of this machine, one per host, on a bridge, each host's link limited by tc tbf.

A 2-host x 2-node cluster sums exactly, with and without shared memory, each node in its host's
namespace at its host's address (nodes 0-1 on host 0); a 20 MB pull over a 100mbit link takes at
least the 1.6 s the rate allows and the tbf qdiscs are in place; a launch leaves no namespace, veth or
bridge behind, and what a SIGKILLed launcher left the next launch removes. Without root, or without
`ip`, the launcher says so before it starts anything (that test runs anywhere).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import wait_until
from pskv.cli import main
from pskv.errors import ConfigError
from pskv.launch import hosts, start_local

SRC = Path(__file__).resolve().parents[2] / "src"
_CAN_EMULATE = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "tc"))
needs_root = pytest.mark.skipif(not _CAN_EMULATE, reason="emulated hosts need root and iproute2's ip and tc "
                                                         "(network namespaces, veth, a bridge, tbf)")

SUM_SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    import pskv

    with pskv.init() as node:
        node.table("t", rows=8, dim=1)
        worker = node.worker()
        worker.table("t").push(np.arange(8), np.full((8, 1), node.rank + 1.0, np.float32)).wait(30)
        worker.barrier(timeout=30)
        rows = worker.table("t").pull(np.arange(8))[:, 0].tolist()
        worker.close()
    netns = os.readlink("/proc/self/ns/net")
    print(f"rank {node.rank} host {os.environ['PSKV_HOST']} netns {netns} "
          f"shm {os.environ.get('PSKV_SHARED_MEMORY', '1')} rows {rows}", flush=True)
""")

PULL_SCRIPT = textwrap.dedent("""
    import time
    import numpy as np
    import pskv

    ROWS, DIM = 10_000, 1000  # float32: node 1 owns rows 5000.. = 20 MB
    with pskv.init() as node:
        t = node.table("big", rows=ROWS, dim=DIM)
        worker = node.worker()
        worker.barrier(timeout=30)
        if node.rank == 0:
            keys = np.arange(ROWS // 2, ROWS)
            t.pull(keys[:10])  # connections up before the clock starts
            start = time.monotonic()
            rows = t.pull(keys, timeout=60)
            print(f"pulled {rows.nbytes} bytes in {time.monotonic() - start:.3f} s", flush=True)
        worker.barrier(timeout=60)
        worker.close()
""")

# prints its PID, then a line every 50 ms: once its launcher is gone the pipe breaks and it dies (SIGPIPE)
LINGER_SCRIPT = "import os, time\nprint('pid', os.getpid(), flush=True)\nwhile True:\n    print('.', flush=True)\n" \
                "    time.sleep(0.05)\n"


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PYTHONPATH": str(SRC)}


def _leftovers(pid: int) -> list[str]:
    """Namespaces and links named with launcher `pid`."""
    names = [n for n in hosts._namespaces() if n.startswith(f"pskv{pid}h")]
    return names + [n for n in hosts._links() if n in (f"pskvbr{pid}",) or n.startswith(f"pskv{pid}v")]


def _launch(args: list[str], timeout: float = 50) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pskv", "launch", *args], env=_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared", [True, False], ids=["shared-memory", "no-shared-memory"])
def test_hosts_two_by_two_sum_exactly(tmp_path, shared):
    """4 nodes as 2 hosts: nodes 0-1 in one namespace at one address, 2-3 in another; every row is 1+2+3+4."""
    script = tmp_path / "sum.py"
    script.write_text(SUM_SCRIPT)
    flags = [] if shared else ["--no-shared-memory"]
    done = _launch(["-n", "4", "--hosts", "2", "--link", "1gbit", *flags, "--", sys.executable, str(script)])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(line.split("] ", 1)[1] for line in done.stdout.splitlines() if " rows " in line)
    assert len(lines) == 4, done.stdout + done.stderr
    fields = [line.split() for line in lines]  # rank R host H netns N shm S rows [...]
    assert [f[1] for f in fields] == ["0", "1", "2", "3"]
    assert [" ".join(f[9:]) for f in fields] == ["[10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]"] * 4
    assert [f[7] for f in fields] == (["1"] * 4 if shared else ["0"] * 4)
    host0, host1 = fields[0][3], fields[2][3]
    assert fields[1][3] == host0 and fields[3][3] == host1 and host0 != host1
    assert host0.startswith("10.217.") and host0.endswith(".2") and host1.endswith(".3")
    netns = [f[5] for f in fields]
    assert netns[0] == netns[1] != netns[2] == netns[3] != os.readlink("/proc/self/ns/net")
    assert "2 emulated host(s), links 1gbit" in done.stderr


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_hosts_link_limits_a_large_pull(cluster_factory, tmp_path):
    """--link 100mbit: tbf on both ends of each host's link; 20 MB from host 1 to host 0 take >= 1.6 s."""
    script = tmp_path / "pull.py"
    script.write_text(PULL_SCRIPT)
    cluster = cluster_factory(2, [sys.executable, str(script)], env={"PYTHONPATH": str(SRC)},
                              emulated_hosts=2, link="100mbit")
    emulated = cluster.hosts
    for host in range(2):  # while the nodes run: what the host sends, and what the bridge sends it
        inside = subprocess.run(["tc", "-n", emulated.namespace(host), "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True, check=True).stdout
        outside = subprocess.run(["tc", "qdisc", "show", "dev", emulated.veth(host)],
                                 capture_output=True, text=True, check=True).stdout
        for shown in (inside, outside):
            assert "tbf" in shown and "rate 100Mbit" in shown, shown
    assert cluster.wait(timeout=50) == 0, cluster.logs_tail()
    line = next(line for line in cluster.output(0).splitlines() if line.startswith("pulled"))
    nbytes, seconds = int(line.split()[1]), float(line.split()[4])
    assert nbytes == 5000 * 1000 * 4
    assert seconds >= 0.9 * nbytes / 12.5e6, line  # 100 Mbit/s = 12.5 MB/s; 10% for tbf's burst and timing
    cluster.shutdown()
    assert _leftovers(os.getpid()) == []


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_hosts_removed_after_a_normal_exit():
    """After `pskv launch --hosts` returns, no namespace, veth or bridge of its PID is left."""
    proc = subprocess.Popen([sys.executable, "-m", "pskv", "launch", "-n", "3", "--hosts", "3", "--link", "1gbit",
                             "--", "sh", "-c", "sleep 0.5; echo $PSKV_HOST"], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(_leftovers(proc.pid)) == 3 + 3 + 1, what="3 namespaces, 3 veths and a bridge")
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert sorted(line.split()[-1].rsplit(".", 1)[1] for line in out.splitlines()) == ["2", "3", "4"]
    assert _leftovers(proc.pid) == []


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("end", ["SIGTERM", "SIGINT", "node-failure"])
def test_hosts_removed_when_the_launch_is_stopped_or_fails(end):
    """SIGTERM or Ctrl-C to the launcher (128 + signal), or a node that fails (its status): nothing left."""
    node = f"import sys; exec({LINGER_SCRIPT!r})" if end != "node-failure" else "import sys; sys.exit(3)"
    proc = subprocess.Popen([sys.executable, "-m", "pskv", "launch", "-n", "2", "--hosts", "2", "--link", "1gbit",
                             "--", sys.executable, "-c", node], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            # (a test run started in the background of a script ignores SIGINT, and its children
                            # inherit that: Python then installs no Ctrl-C handler, and the launcher never stops)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        if end != "node-failure":
            wait_until(lambda: proc.stdout.readline().split()[2:3] == ["pid"], what="a node printing its PID")
            proc.send_signal(getattr(signal, end))
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    want = 3 if end == "node-failure" else 128 + getattr(signal, end)
    assert proc.returncode == want, err
    assert _leftovers(proc.pid) == []


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_hosts_setup_failure_removes_what_was_made(monkeypatch, tmp_path):
    """A `tc` that fails half way through: ConfigError quoting it, and the bridge and namespaces made so far go."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "tc").write_text("#!/bin/sh\necho 'RTNETLINK answers: Operation not supported' >&2\nexit 2\n")
    (fake / "tc").chmod(0o755)
    (fake / "ip").symlink_to(shutil.which("ip"))
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(ConfigError, match="tc qdisc add .* failed: RTNETLINK answers: Operation not supported"):
        start_local(2, [sys.executable, "-c", "pass"], emulated_hosts=2, link="1gbit")
    assert _leftovers(os.getpid()) == []


@needs_root
@pytest.mark.slow
@pytest.mark.timeout(60)
def test_hosts_of_a_killed_launcher_removed_by_the_next():
    """A SIGKILLed launcher leaves its namespaces behind; the next launch with --hosts removes them."""
    proc = subprocess.Popen([sys.executable, "-m", "pskv", "launch", "-n", "2", "--hosts", "2", "--",
                             sys.executable, "-c", LINGER_SCRIPT], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, stdin=subprocess.DEVNULL)
    node_pids = []
    try:
        while len(node_pids) < 2:
            line = proc.stdout.readline()
            assert line, "the launcher ended before its nodes printed their PIDs"
            if line.split()[2:3] == ["pid"]:
                node_pids.append(int(line.split()[3]))
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()  # the nodes' next line breaks their pipe: they end
        assert len(_leftovers(proc.pid)) == 5
        done = _launch(["-n", "1", "--hosts", "1", "--", "true"])
        assert done.returncode == 0, done.stderr
        assert _leftovers(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in node_pids:  # the nodes this test started (through the launcher), by PID
            wait_until(lambda: not _running(pid), timeout=10, what=f"node process {pid} ending")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (its parent, the launcher, is gone: init reaps it) is no node
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(30)
def test_hosts_without_root_refused_before_anything_starts(monkeypatch, capsys):
    """Not root: `pskv launch --hosts` exits 2 with what is missing and what to do; nothing was made."""
    monkeypatch.setattr(hosts, "_is_root", lambda: False)
    assert main(["launch", "-n", "2", "--hosts", "2", "--link", "1gbit", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "needs root" in err and "sudo" in err and "leave out --hosts" in err, err
    with pytest.raises(ConfigError, match="needs root"):
        start_local(2, ["true"], emulated_hosts=2)
    if _CAN_EMULATE:
        assert _leftovers(os.getpid()) == []


@pytest.mark.timeout(30)
def test_hosts_bad_arguments_refused(monkeypatch):
    """Bad host counts, rates and combinations, and a PATH without `ip`, are ConfigErrors naming the flag."""
    cases = [(dict(emulated_hosts=3), "--hosts 3 with 2 node"), (dict(emulated_hosts=0), "give 1 to 2 hosts"),
             (dict(link="1gbit"), "give --hosts H too"), (dict(emulated_hosts=2, link="1gb"), "is not a rate"),
             (dict(emulated_hosts=2, join="127.0.0.1:5"), "--join does not apply"),
             (dict(emulated_hosts=2, coordinator="node0"), "a coordinator in node 0 does not apply")]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            start_local(2, ["true"], **kwargs)
    monkeypatch.setattr(hosts, "_is_root", lambda: True)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match="needs ip and tc .* on PATH"):
        start_local(2, ["true"], emulated_hosts=2, link="1gbit")
    assert hosts.parse_rate("1gbit") == 125e6 and hosts.parse_rate("100mbit") == 12.5e6
    assert hosts.parse_rate("125Mbps") == 125e6 and hosts.parse_rate("8kbit") == 1000


@pytest.mark.timeout(30)
def test_hosts_run_flags_reach_the_launcher(monkeypatch):
    """`pskv run APP --hosts 2 --link 1gbit --no-shared-memory --insecure`: the app's launch() sees them."""
    import pskv.apps

    seen = {}

    def fake_run(app, argv, *, nodes, threads, **_):
        seen.update(app=app, argv=argv, nodes=nodes, hosts=hosts.from_environ(os.environ),
                    shm=os.environ.get("PSKV_SHARED_MEMORY"), insecure=os.environ.get("PSKV_INSECURE"))
        return 0

    monkeypatch.setattr(pskv.apps, "run", fake_run)
    for name in ("PSKV_HOSTS", "PSKV_LINK", "PSKV_SHARED_MEMORY", "PSKV_INSECURE"):
        monkeypatch.setenv(name, "")  # monkeypatch restores (removes) what main() sets
    assert main(["run", "lr", "--nodes", "4", "--hosts", "2", "--link", "1gbit", "--no-shared-memory",
                 "--insecure", "--l1", "0.5"]) == 0
    assert seen == dict(app="lr", argv=["--l1", "0.5"], nodes=4, hosts=(2, "1gbit"), shm="0", insecure="1")
