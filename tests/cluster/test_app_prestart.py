"""What a user sees from `pskv run` and `pskv launch` (issue 33 items 4 and 6): app mistakes end in one line
with status 2 before any node starts; --resume against a real checkpoint (another --rank, a finished run,
no checkpoint yet); the launcher's lines at the start; with metrics, a bare `pskv top` finds the nodes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _pskv(*args: str, env: dict | None = None, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pskv", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def ratings(tmp_path) -> Path:
    """A small CSV of user, item, rating (300 ratings of 30 users and 20 items)."""
    path = tmp_path / "r.csv"
    path.write_text("user,item,rating\n" + "".join(f"u{k % 30},i{k * 7 % 20},{1 + k % 5}\n" for k in range(300)))
    return path


def test_mistakes_end_in_one_line_before_any_node(ratings, tmp_path):
    """Each mistake: status 2, one stderr line naming the flag, no node's output and no launcher line."""
    cases = [
        (["mf", "-n", "2", "--", "--data", str(ratings), "--resume"],
         "pskv run mf: error: --resume needs --checkpoint-dir DIR (where the run saves its checkpoints)"),
        (["kge", "--nodes", "2", "--", "--data", str(tmp_path / "nope")],
         "pskv run kge: error: --data '" + str(tmp_path / "nope") + "': no such file or directory; --data takes "
         "nations, umls, ml-100k-kg, lapse-toy, random:E,R,T, a directory of train/valid/test triples or one file "
         "of triples"),
        (["lr", "-n", "2", "--", "--consistency", "bsp"],
         "pskv run lr: error: unrecognized arguments: --consistency bsp; see `pskv run lr --help`"),
    ]
    for argv, line in cases:
        started = time.monotonic()
        proc = _pskv("run", *argv, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n"), (argv, proc.stdout, proc.stderr)
        assert time.monotonic() - started < 30  # (no cluster: an import and a parse)


def test_resume_checks_the_checkpoint_in_the_front_process(ratings, tmp_path):
    """A 1-node run writes checkpoints; resuming it on 2 nodes with another --rank is one line naming --rank;
    at its --epochs it has nothing to do (status 0, no node); with --epochs raised it goes on from epoch 3;
    --resume on an empty directory starts at epoch 1."""
    ckpt = tmp_path / "ckpt"
    base = ["--data", str(ratings), "--rank", "4", "--checkpoint-dir", str(ckpt), "--progress", "none"]
    first = _pskv("run", "mf", "--", *base, "--epochs", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    other = _pskv("run", "mf", "-n", "2", "--", *base, "--rank", "8", "--epochs", "3", "--resume")
    assert (other.returncode, other.stdout) == (2, ""), other.stderr
    assert other.stderr == (f"pskv run mf: error: --rank 8 does not match 4 in {ckpt}/ (its newest checkpoint, "
                            "checkpoint-000002); resume with the flags it was trained with, or start afresh in "
                            "another --checkpoint-dir\n")
    done = _pskv("run", "mf", "-n", "2", "--", *base, "--epochs", "2", "--resume")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert done.stderr == (f"pskv run mf: nothing to do: {ckpt}/checkpoint-000002 is after epoch 2 and --epochs "
                           "is 2; raise --epochs to train on from it\n")
    more = _pskv("run", "mf", "-n", "2", "--", *base, "--epochs", "3", "--resume")
    assert more.returncode == 0, more.stdout + more.stderr
    assert f"[node 0] mf: resumed from {ckpt} after epoch 2" in more.stdout
    assert re.findall(r"epoch +(\d+) ", more.stdout) == ["3"] and "train RMSE nan" not in more.stdout, more.stdout
    fresh = _pskv("run", "mf", "--", *base, "--checkpoint-dir", str(tmp_path / "new"), "--epochs", "1", "--resume")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert f"mf: --resume: no checkpoint in {tmp_path / 'new'} yet; starting at epoch 1" in fresh.stdout
    assert (tmp_path / "new" / "checkpoint-000001" / "manifest.json").is_file()


def _launcher_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[launcher]")]


def test_launcher_says_one_line_and_the_join_command_only_when_verbose():
    """`pskv launch -n 2`: one launcher line (nodes, threads, coordinator), no secret path; --verbose adds the
    join command with the secret file; `-n 1 --verbose` has nothing to join."""
    command = ["--", sys.executable, "-c", "pass"]
    plain = _pskv("launch", "-n", "2", "--threads", "2", *command)
    assert plain.returncode == 0, plain.stderr
    lines = _launcher_lines(plain.stderr)
    assert len(lines) == 1 and re.fullmatch(r"\[launcher\] 2 nodes x 2 threads, coordinator at 127\.0\.0\.1:\d+",
                                            lines[0]), plain.stderr
    assert "PSKV_SECRET_FILE" not in plain.stderr + plain.stdout
    verbose = _pskv("launch", "-n", "2", "--verbose", *command)
    lines = _launcher_lines(verbose.stderr)
    assert verbose.returncode == 0 and len(lines) == 2, verbose.stderr
    address = re.search(r"coordinator at (\S+)", lines[0]).group(1)
    assert re.fullmatch(rf"\[launcher\] add nodes while it runs with `PSKV_SECRET_FILE=\S+/secret pskv launch -n K "
                        rf"--join {re.escape(address)} -- CMD`", lines[1]), lines
    one = _pskv("launch", "-n", "1", "--verbose", *command)
    assert one.returncode == 0 and [re.sub(r":\d+$", ":P", line) for line in _launcher_lines(one.stderr)] == [
        "[launcher] 1 node x 1 thread, coordinator at 127.0.0.1:P"], one.stderr


def _port_pair() -> int:
    """P such that P and P + 1 were free just now."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two adjacent free ports on 127.0.0.1")


NODE = """\
import pathlib, sys, time
import pskv
with pskv.init() as node:
    print("metrics-node ready", flush=True)
    for _ in range(1200):  # bounded: 120 s
        if pathlib.Path(sys.argv[1]).exists():
            break
        time.sleep(0.1)
"""


def test_metrics_line_and_a_bare_pskv_top_finds_the_nodes(tmp_path):
    """`pskv launch -n 2 --metrics P`: a line with node 0's URL and the top command; `pskv top --once` with no
    endpoint (TMPDIR private to the test: only this run's file) shows both nodes; the file goes at the end."""
    script, stop = tmp_path / "node.py", tmp_path / "stop"
    script.write_text(NODE)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for _ in range(3):  # a node that lost its port to another process meanwhile: new ports
        port = _port_pair()
        stop.unlink(missing_ok=True)
        out, err = open(tmp_path / "launch.out", "w+"), open(tmp_path / "launch.err", "w+")
        launch = subprocess.Popen([sys.executable, "-m", "pskv", "launch", "-n", "2", "--metrics", str(port), "--",
                                   sys.executable, str(script), str(stop)], stdout=out, stderr=err, text=True, env=env)
        try:
            for _ in range(1200):  # bounded: 120 s
                if Path(out.name).read_text().count("metrics-node ready") == 2 or launch.poll() is not None:
                    break
                time.sleep(0.1)
            said = Path(err.name).read_text()
            if Path(out.name).read_text().count("metrics-node ready") < 2:
                continue
            lines = _launcher_lines(said)
            assert lines[1] == (f"[launcher] metrics at http://127.0.0.1:{port}/metrics (node r at port {port} + r); "
                                f"watch them with `pskv top` (or `pskv top --metrics-port {port} --nodes 2`)"), said
            top = _pskv("top", "--once", "--interval", "0.2", env={"TMPDIR": str(tmp_path)}, timeout=60)
            assert top.returncode == 0, top.stdout + top.stderr
            assert [line.split()[:2] for line in top.stdout.splitlines()[1:]] == [["0", "*"], ["1", "*"]], top.stdout
        finally:
            stop.touch()
            launch.wait(timeout=120)
            out.close()
            err.close()
        assert launch.returncode == 0, Path(out.name).read_text() + Path(err.name).read_text()
        assert not list((tmp_path / f"pskv-runs-{os.getuid()}").glob("run-*.json"))
        return
    raise AssertionError("3 tries, each lost a metrics port\n" + Path(tmp_path / "launch.err").read_text())
