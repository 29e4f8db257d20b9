"""Authentication on a real cluster: outsiders without the cluster's secret can neither join nor change a row.

`pskv launch` (start_local) makes the secret; node 1 waits until the test lets it start, so the outsiders
try first: one with no secret and one with another secret take node 1's free rank, a third asks to join.
Each is refused with a ClusterError that says the secrets differ. Then node 1 joins, and an outsider sends
a valid-looking message of every kind to node 1's inbox, asking for replies on a port of its own: nothing
comes back, nothing reaches node 1's dispatcher, and the table holds exactly what node 0 set.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from pskv.net import auth
from pskv.net.wire import COORDINATOR, Header, Kind, control, dtype_code

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SRC = Path(__file__).resolve().parents[2] / "src"
ROWS, DIM = 100, 4

NODE_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import numpy as np
    import pskv

    work = Path(sys.argv[1])

    def wait_for(name):
        deadline = time.monotonic() + 60
        while not (work / name).exists():
            assert time.monotonic() < deadline, f"no {name} from the test"
            time.sleep(0.02)

    if os.environ["PSKV_RANK"] == "1":
        wait_for("go")  # the outsiders try first
    node = pskv.init()
    t = node.table("t", rows=100, dim=4)
    expected = (np.arange(100)[:, None] * 10 + np.arange(4)).astype(np.float32)
    w = node.worker()
    if node.rank == 0:
        t.set(np.arange(100), expected).wait(30)
    w.barrier(timeout=30)
    if node.rank == 1:
        print("READY " + json.dumps({"address": node._transport.address, "cluster": node.cluster,
                                     "table": t.spec.table_id}), flush=True)
    wait_for("done")
    if node.rank == 0:
        got = t.pull(np.arange(100), timeout=30)
        print("RESULT " + json.dumps({"exact": bool(np.array_equal(got, expected))}), flush=True)
    w.barrier(timeout=60)
    if node.rank == 1:
        print("STATS " + json.dumps({"dropped": node.dropped, "errors": node.server.errors}), flush=True)
    w.close()
    node.shutdown(timeout=30)
    print("DONE", flush=True)
""")

OUTSIDER = "import pskv; pskv.init()"


def _line(cluster, rank: int, prefix: str):
    for line in cluster.output(rank).splitlines():
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1:])
    return None


def _outsider(env: dict) -> subprocess.Popen:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PYTHONPATH": str(SRC),
           "PSKV_RENDEZVOUS_TIMEOUT": "30", **env}
    return subprocess.Popen([sys.executable, "-c", OUTSIDER], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _every_kind(info: dict, reply_port: int) -> list[list[bytes]]:
    """A message of every Kind, as a member would send it: this cluster's id, sender 0, real table, keys of node 1."""
    keys = np.arange(60, 70, dtype=np.int64)
    values = np.full((10, DIM), 1e6, np.float32)
    out = []
    for kind in Kind:
        if kind >= Kind.HELLO:
            payload = {"address": f"127.0.0.1:{reply_port}", "rank": 0, "reason": "outsider", "clock": 99}
            out.append(control(kind, info["cluster"], COORDINATOR if kind in (Kind.WELCOME, Kind.ABORT) else 0,
                               payload))
            continue
        h = Header(kind, cluster=info["cluster"], sender=0, origin=0, table=info["table"], request_id=1 << 40,
                   n_keys=10, dim=DIM, dtype=dtype_code(np.float32), key_dtype=dtype_code(np.int64),
                   reply_to=reply_port)
        out.append([h.pack(), keys.tobytes(), values.tobytes()] if kind != Kind.PULL else [h.pack(), keys.tobytes()])
    return out


def test_auth_outsiders_refused_then_the_node_joins_and_rows_stay_exact(cluster_factory, tmp_path):
    """No secret, another secret, or a join with another secret: refused with a clear error. The real node
    then joins; an outsider's requests of every kind get no reply and change nothing."""
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    cluster = cluster_factory(2, [sys.executable, str(script), str(tmp_path)], env={"PYTHONPATH": str(SRC)})
    secret = Path(cluster.secret_file)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    wrong = auth.new_secret(tmp_path / "wrong.secret")
    address = cluster.coordinator_address
    rank1 = {"PSKV_COORDINATOR": address, "PSKV_NUM_NODES": "2", "PSKV_RANK": "1"}
    outsiders = {"no secret": _outsider(rank1), "wrong secret": _outsider({**rank1, "PSKV_SECRET_FILE": str(wrong)}),
                 "join": _outsider({"PSKV_JOIN": address, "PSKV_SECRET_FILE": str(wrong)})}
    try:
        said = {name: proc.communicate(timeout=60)[0] for name, proc in outsiders.items()}
    finally:
        for proc in outsiders.values():
            proc.kill()
            proc.wait(10)
    for name, proc in outsiders.items():
        assert proc.returncode == 1, (name, said[name])
        assert f"pskv.ClusterError: the coordinator at {address} refused this node's connection" in said[name], said
        assert secret.read_text().strip() not in said[name] and wrong.read_text().strip() not in said[name]
    assert "PSKV_SECRET_FILE is unset" in said["no secret"] and str(wrong) in said["wrong secret"]

    (tmp_path / "go").write_text("")
    deadline = time.monotonic() + 60
    while (info := _line(cluster, 1, "READY")) is None:
        assert time.monotonic() < deadline and len(cluster.alive_pids()) == 2, cluster.logs_tail()
        time.sleep(0.05)

    ctx = zmq.Context()
    replies, plain, forged = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    try:
        port = replies.bind_to_random_port("tcp://127.0.0.1")
        auth.load(wrong).client(forged)  # what a pskv node with another secret would send
        for sock in (plain, forged):
            sock.setsockopt(zmq.SNDTIMEO, 0)
            sock.connect(f"tcp://{info['address']}")
            for frames in _every_kind(info, port):
                try:
                    sock.send_multipart(frames)
                except zmq.Again:  # the refused connection took its pipe with it: nothing even queues
                    break
        assert replies.poll(2000) == 0  # a bounded look: nothing answers
    finally:
        for sock in (replies, plain, forged):
            sock.close(linger=0)
        ctx.term()
    (tmp_path / "done").write_text("")

    assert cluster.wait(timeout=60) == 0, cluster.logs_tail()
    assert _line(cluster, 0, "RESULT") == {"exact": True}
    assert _line(cluster, 1, "STATS") == {"dropped": 0, "errors": 0}
    refused = [line for line in cluster.output(1).splitlines() if "from unauthenticated peers" in line]
    assert len(refused) == 1 and "node 1 dropped a message from unauthenticated peers" in refused[0], refused
    cluster.shutdown()
    assert not secret.parent.exists()  # the launcher's secret goes with its cluster


def test_auth_launcher_with_remote_hosts_needs_a_shared_secret(tmp_path):
    """A hostfile naming other machines and no PSKV_SECRET_FILE: ConfigError saying how to share one."""
    from pskv.config import ConfigError
    from pskv.launch import start_local

    hostfile = tmp_path / "hosts"
    hostfile.write_text("10.0.0.7\n10.0.0.8\n")
    with pytest.raises(ConfigError, match="pskv secret new FILE.*PSKV_SECRET_FILE=FILE"):
        start_local(2, [sys.executable, "-c", "pass"], hostfile=hostfile, coordinator_host="127.0.0.1")


@pytest.mark.parametrize("flag, secret", [([], True), (["--insecure"], False)])
def test_auth_launch_makes_a_private_secret_unless_insecure(flag, secret):
    """`pskv launch` gives its nodes a secret file of mode 0600 in a private directory it removes at
    the end; with --insecure none (no CURVE: a trusted network's bandwidth)."""
    probe = ("import os, stat; p = os.environ.get('PSKV_SECRET_FILE'); "
             "print('secret', p and oct(stat.S_IMODE(os.stat(p).st_mode)), p)")
    proc = subprocess.run([sys.executable, "-m", "pskv", "launch", "-n", "2", *flag, "--", sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(line.split("] ", 1)[1] for line in proc.stdout.splitlines() if "] secret " in line)
    assert len(lines) == 2 and lines[0] == lines[1], lines  # the same file for both nodes
    if secret:
        _, mode, path = lines[0].split()
        assert mode == "0o600" and not Path(path).exists()  # removed with the cluster
    else:
        assert lines[0] == "secret None None"
