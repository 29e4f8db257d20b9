"""Launching over ssh from a hostfile, with a stand-in `ssh` first on PATH that runs the
remote command locally (so no sshd is needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SRC = Path(__file__).resolve().parents[2] / "src"
FAKE_SSH = """#!/bin/bash
# stand-in for ssh: skip the options, note the host, run the remote command here
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
echo "$host" >> "$(dirname "$0")/ssh-hosts.txt"
exec bash -c "$*"
"""
REPORT = ("import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': {k: v for k, v in "
          "os.environ.items() if k.startswith('PSKV_') or k == 'PYTHONUNBUFFERED'}}))")


@pytest.fixture
def ssh_env(tmp_path):
    """Environment whose PATH finds the stand-in ssh first, and a two-host hostfile."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two names for this machine\n127.0.0.1\n\nlocalhost slots=2\n")
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, hostfile, bin_dir


@pytest.mark.usefixtures("no_user_data_vars")
def test_ssh_nodes_get_host_rank_and_cwd(cluster_factory, ssh_env):
    """Node i runs through ssh on hosts[i % 2] with PSKV_HOST set to that host, in our cwd."""
    env, hostfile, bin_dir = ssh_env
    cluster = cluster_factory(3, [sys.executable, "-c", REPORT], env=env, hostfile=hostfile,
                              coordinator=False)
    assert cluster.wait(timeout=30) == 0, cluster.logs_tail()
    hosts = ["127.0.0.1", "localhost", "127.0.0.1"]
    for rank, host in enumerate(hosts):
        report = json.loads(cluster.output(rank))
        assert report["cwd"] == os.getcwd()
        assert report["env"] == {"PSKV_NUM_NODES": "3", "PSKV_RANK": str(rank), "PSKV_HOST": host,
                                 "PSKV_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    assert sorted((bin_dir / "ssh-hosts.txt").read_text().split()) == sorted(hosts)


def test_ssh_failure_on_one_host_fails_the_launch(cluster_factory, ssh_env):
    """A node failing on `localhost` makes the whole launch non-zero and stops the other."""
    env, hostfile, _ = ssh_env
    code = ("import os, sys, time\n"
            "if os.environ['PSKV_HOST'] == 'localhost': time.sleep(0.3); sys.exit(5)\n"
            "time.sleep(60)")
    cluster = cluster_factory(2, [sys.executable, "-c", code], env=env, hostfile=hostfile,
                              coordinator=False, failure_timeout=1)
    # everything ended within wait()'s 30 s, so the other node was stopped before its 60 s sleep ran out
    assert cluster.wait(timeout=30) == 5, cluster.logs_tail()
    assert cluster.alive_pids() == []


def test_ssh_cli_launch_with_hostfile(ssh_env):
    """`pskv launch --hostfile` runs the nodes over ssh with the real coordinator; status 0."""
    env, hostfile, _ = ssh_env
    env = {**os.environ, **env, "PYTHONPATH": str(SRC)}
    code = "import os; print('on', os.environ['PSKV_HOST'], os.environ['PSKV_COORDINATOR'])"
    result = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", "2", "--hostfile",
                             str(hostfile), "--", sys.executable, "-c", code],
                            env=env, capture_output=True, text=True, timeout=40)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("[node 0] on 127.0.0.1 127.0.0.1:") for line in lines), lines
    assert any(line.startswith("[node 1] on localhost 127.0.0.1:") for line in lines), lines
