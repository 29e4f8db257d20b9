"""Issue 31: nodes of one host talk over private ipc files without CURVE; nodes of another host over TCP + CURVE.

Three nodes started by hand with one secret: nodes 0 and 1 bind 127.0.0.1, node 2 binds 127.0.0.2 (another
host: another address; Linux routes all of 127/8 to loopback). Each node writes and reads every key and
says where each of its sockets to the others connects. With PSKV_SHARED_MEMORY=0 everything is TCP. A node
killed with SIGKILL leaves its file behind; the next node of the host sweeps it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import free_port
from pskv.net import auth
from pskv.net.transport import Transport

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SRC = Path(__file__).resolve().parents[2] / "src"
HOSTS = ["127.0.0.1", "127.0.0.1", "127.0.0.2"]

NODE_SCRIPT = textwrap.dedent("""
    import json, os, stat
    import numpy as np
    import pskv

    node = pskv.init()
    t = node.table("t", rows=300, dim=4)
    w = node.worker()
    base = (np.arange(300)[:, None] * 10 + np.arange(4)).astype(np.float32)
    if node.rank == 0:
        t.set(np.arange(300), base).wait(30)
    w.barrier(timeout=60)
    t.push(np.arange(300), np.full((300, 4), node.rank + 1, np.float32)).wait(30)
    w.barrier(timeout=60)
    exact = bool(np.array_equal(t.pull(np.arange(300), timeout=30), base + 6))
    tr = node._transport
    others = [r for r in range(3) if r != node.rank]
    box = tr.reply_box()
    files = [p for p in (tr._ipc, box and box._ipc) if p]
    print("REPORT " + json.dumps({
        "exact": exact,
        "decided": {r: tr.url_of(r).split(":")[0] for r in others},
        "boxes": {r: tr.url_of(r, box.port).split(":")[0] for r in others},
        "connected": sorted({(o.rank, o.url.split(":")[0]) for o in tr._all if o.rank in others}),
        "files": [str(p) for p in files],
        "modes": [oct(stat.S_IMODE(os.stat(p).st_mode)) for p in files] + [oct(stat.S_IMODE(os.stat(p.parent).st_mode))
                                                                          for p in files[:1]],
    }), flush=True)
    w.barrier(timeout=60)
    w.close()
    node.shutdown(timeout=30)
""")


def _run_cluster(tmp_path: Path, shared_memory: str) -> list[dict]:
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    secret = auth.new_secret(tmp_path / "cluster.secret")
    coordinator = f"127.0.0.1:{free_port()}"
    procs = []
    try:
        for rank, host in enumerate(HOSTS):
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PYTHONPATH": str(SRC),
                   "PSKV_COORDINATOR": coordinator, "PSKV_NUM_NODES": "3", "PSKV_RANK": str(rank),
                   "PSKV_HOST": host, "PSKV_SECRET_FILE": str(secret), "PSKV_SHARED_MEMORY": shared_memory,
                   "PSKV_RENDEZVOUS_TIMEOUT": "60"}
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outputs = [proc.communicate(timeout=90)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert [proc.returncode for proc in procs] == [0, 0, 0], "\n".join(outputs)
    reports = []
    for out in outputs:
        lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
        assert len(lines) == 1, out
        reports.append(json.loads(lines[0][len("REPORT "):]))
    return reports


def test_local_ipc_same_host_over_ipc_other_host_over_tcp(tmp_path):
    """Nodes 0 and 1 (one host) reach each other's inbox and reply boxes over ipc, node 2 (another host) over
    TCP, both ways; files 0600 in a 0700 directory while up, gone after shutdown; every row exact."""
    reports = _run_cluster(tmp_path, "1")
    kinds = {0: {"1": "ipc", "2": "tcp"}, 1: {"0": "ipc", "2": "tcp"}, 2: {"0": "tcp", "1": "tcp"}}
    for rank, report in enumerate(reports):
        assert report["exact"], (rank, report)
        assert report["decided"] == kinds[rank] and report["boxes"] == kinds[rank], (rank, report)
        for peer, kind in report["connected"]:  # every socket it opened to a peer went the decided way
            assert kind == kinds[rank][str(peer)], (rank, report)
        assert len(report["files"]) == 2 and report["modes"] == ["0o600", "0o600", "0o700"], report
        assert all(Path(f).parent.name.startswith(HOSTS[rank] + "-net") for f in report["files"]), report
        assert not any(Path(f).exists() for f in report["files"]), report  # removed on close
    assert {(r, p) for r in (0, 1) for p, kind in reports[r]["connected"] if kind == "tcp"} <= {(0, 2), (1, 2)}


def test_local_ipc_off_everything_over_tcp(tmp_path):
    """PSKV_SHARED_MEMORY=0: no ipc file, every socket to a peer is TCP (CURVE), rows exact."""
    for rank, report in enumerate(_run_cluster(tmp_path, "0")):
        others = [str(r) for r in range(3) if r != rank]
        assert report["exact"] and report["files"] == [], report
        assert report["decided"] == report["boxes"] == {r: "tcp" for r in others}, report
        assert all(kind == "tcp" for _, kind in report["connected"]), report


KILLED = textwrap.dedent("""
    import sys, time
    from pskv.net.transport import Transport
    t = Transport("127.0.0.1", ipc=True)
    print(t._ipc, flush=True)
    time.sleep(60)
""")


def test_local_ipc_file_of_a_killed_node_is_swept_by_the_next(tmp_path):
    """SIGKILL leaves the ipc file; once it is older than a minute (here: its mtime set back), the next
    transport with ipc on that host removes it, and keeps its own."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED], env=env, stdout=subprocess.PIPE, text=True)
    try:
        path = Path(proc.stdout.readline().strip())
        assert stat.S_ISSOCK(path.lstat().st_mode)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert path.exists()  # nobody removed it
    old = time.time() - 120
    os.utime(path, (old, old), follow_symlinks=False)
    t = Transport("127.0.0.1", ipc=True)
    try:
        assert not path.exists() and t._ipc.exists()
    finally:
        t.close()
    assert not t._ipc.exists()
