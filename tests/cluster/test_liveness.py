"""Liveness across processes: a clean exit is a clean leave, and `kill -USR1 <launcher>` makes every
node say what it waits for."""

from __future__ import annotations

import os
import re
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

EXIT_ZERO = textwrap.dedent("""
    import sys
    import numpy as np
    import pskv

    with pskv.init() as node:
        table = node.table("t", rows=8)
        table.push(np.arange(8), np.ones((8, 1))).wait(30)
        node.run(lambda w: w.barrier())
        if node.rank == 0:
            sys.exit(0)  # a clean exit inside the block: node 1 must not see a failure
        total = float(table.pull(np.arange(8)).sum())
    print(f"node {node.rank} done total={total:g}", flush=True)
""")


def test_sys_exit_zero_inside_init_is_a_clean_leave(cluster_factory, tmp_path):
    """sys.exit(0) on node 0 inside `with pskv.init()` leaves cleanly: both nodes exit 0, node 1 finishes."""
    script = tmp_path / "exit_zero.py"
    script.write_text(EXIT_ZERO)
    cluster = cluster_factory(2, [sys.executable, str(script)])
    assert cluster.wait(timeout=60) == 0, cluster.logs_tail()
    assert "node 1 done total=16" in cluster.output(1), cluster.logs_tail()


WAITER = textwrap.dedent("""
    import os, sys, time
    import pskv

    with pskv.init() as node:
        node.table("t", rows=8)
        print(f"ready {node.rank}", flush=True)
        deadline = time.monotonic() + 40
        while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
            time.sleep(0.05)
""")


def test_sigusr1_to_the_launcher_dumps_every_node(tmp_path):
    """`kill -USR1` on `pskv launch` makes each node print its state (requests, collectives); the job goes on."""
    script, go = tmp_path / "waiter.py", tmp_path / "go"
    script.write_text(WAITER)
    launcher = subprocess.Popen([sys.executable, "-m", "pskv", "launch", "-n", "2", "--", sys.executable,
                                 str(script), str(go)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={k: v for k, v in os.environ.items() if not k.startswith("PSKV_")})
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in launcher.stdout], daemon=True)
    reader.start()
    seen: list[str] = []

    def until(*needles: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not all(any(n in line for line in seen) for n in needles):
            assert time.monotonic() < deadline, f"never saw {needles}; output:\n{''.join(seen)}"
            try:
                seen.append(lines.get(timeout=0.2))
            except queue.Empty:
                pass

    try:
        until("ready 0", "ready 1")
        launcher.send_signal(signal.SIGUSR1)
        until("pskv node 0/2", "pskv node 1/2", "outstanding requests: 0", "asked 2 node(s)")
        go.touch()
        assert launcher.wait(timeout=30) == 0, "".join(seen)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            try:
                launcher.wait(timeout=20)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait(timeout=10)
        reader.join(5)


ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "liveness.py"


def test_readme_liveness_block_is_the_example_file():
    """The python block of the docs' failures section is examples/liveness.py, verbatim."""
    block = re.search(r"## Failures never hang.*?```python\n(.*?)```", (ROOT / "docs" / "fault-tolerance.md").read_text(),
                      re.S).group(1)
    assert block.strip() in EXAMPLE.read_text()


def test_liveness_example_runs_on_two_nodes():
    """The example runs under `pskv launch -n 2`; each node reports no outstanding request."""
    cmd = [sys.executable, "-m", "pskv", "launch", "-n", "2", "--", sys.executable, str(EXAMPLE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=80, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PSKV_")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("outstanding requests: 0") == 2, proc.stdout
