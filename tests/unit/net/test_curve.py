"""net/auth.py: keys from the secret file; transports of one secret talk (CURVE), any other is refused at the handshake."""

from __future__ import annotations

import logging
import stat
import time

import pytest
import zmq

from pskv.errors import ClusterError, ConfigError
from pskv.net import auth
from pskv.net.transport import Transport
from pskv.net.wire import COORDINATOR, Header, Kind, control

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def secret(tmp_path):
    return auth.new_secret(tmp_path / "cluster.secret")


@pytest.fixture
def transports():
    """make(keys) -> a Transport on 127.0.0.1; every one is closed at the end."""
    made = []

    def make(keys):
        made.append(Transport("127.0.0.1", keys=keys, linger=0))
        return made[-1]

    try:
        yield make
    finally:
        for t in made:
            t.close()


def test_keys_come_from_the_secret_file(secret, tmp_path):
    """One file gives one CURVE keypair (z85, the public key derived from the secret); another file other keys."""
    keys = auth.load(secret)
    assert keys == auth.load(secret)
    assert len(keys.secret) == 40 and keys.public == zmq.curve_public(keys.secret)
    other = auth.load(auth.new_secret(tmp_path / "other.secret"))
    assert other.public != keys.public
    assert keys.secret.decode() not in repr(keys) and secret.read_text().strip() not in repr(keys)


def test_new_secret_is_private_and_never_overwritten(secret):
    """The file is mode 0600 with 64 hex digits; a second `new` on it raises ConfigError and keeps it."""
    before = secret.read_text()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(before.strip()) == 64
    with pytest.raises(ConfigError, match="exists; a cluster's secret is never overwritten"):
        auth.new_secret(secret)
    assert secret.read_text() == before


@pytest.mark.parametrize("content", [None, b"", b"short"], ids=["missing", "empty", "short"])
def test_load_refuses_a_missing_or_short_secret(tmp_path, content):
    """ConfigError names the file and how to make one."""
    path = tmp_path / "s"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match="PSKV_SECRET_FILE=.*pskv secret new FILE"):
        auth.load(path)


def test_one_secret_talks_encrypted(secret, transports):
    """Two transports with the keys of one secret deliver to each other, and the coordinator socket's handshake
    succeeds (no refusal raised)."""
    keys = auth.load(secret)
    a, b = transports(keys), transports(keys)
    b.set_address(0, a.address)
    b.set_address(COORDINATOR, a.address)
    b.send(0, [b"data"])
    b.send(COORDINATOR, [b"control"])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        frames = a.recv(0.05)
        if frames is not None:
            got.append(bytes(frames[0]))
        assert b.recv(0) is None
    assert sorted(got) == [b"control", b"data"]
    assert a.drops.total == 0 and b.drops.total == 0


@pytest.mark.parametrize("coordinator, node", [("right", None), ("right", "wrong"), (None, "right")],
                         ids=["no-secret", "wrong-secret", "unauthenticated-coordinator"])
def test_another_secret_is_refused_with_a_clear_error(tmp_path, secret, transports, coordinator, node, caplog):
    """A node whose secret differs from the coordinator's (or who has none) gets ClusterError from recv, saying
    the secrets differ and never showing one; the coordinator receives nothing and counts the failed handshakes."""
    keys = {"right": auth.load(secret), "wrong": auth.load(auth.new_secret(tmp_path / "wrong")), None: None}
    coord, joiner = transports(keys[coordinator]), transports(keys[node])
    joiner.set_address(COORDINATOR, coord.address)
    joiner.send(COORDINATOR, control(Kind.HELLO, 0, 1, {"address": joiner.address, "num_nodes": 2}))
    deadline = time.monotonic() + 20
    with caplog.at_level(logging.WARNING), pytest.raises(ClusterError) as info:
        while time.monotonic() < deadline:
            assert coord.recv(0.02) is None
            joiner.recv(0.02)
    message = str(info.value)
    assert message.startswith(f"the coordinator at {coord.address} refused this node's connection: ")
    assert ("PSKV_SECRET_FILE is unset" in message) == (node is None)
    for k in keys.values():
        assert k is None or (k.secret.decode() not in message and k.secret.decode() not in caplog.text)
    for path in (secret, tmp_path / "wrong"):
        assert not path.exists() or path.read_text().strip() not in caplog.text
    if coordinator is not None:  # it saw them fail (counted, logged once)
        while coord.drops.total == 0 and time.monotonic() < deadline:
            coord.recv(0.02)
        assert coord.drops.total >= 1
        assert caplog.text.count("dropped a message from unauthenticated peers") == 1


def test_a_client_with_the_public_key_but_not_the_secret_is_refused_by_zap(secret, transports):
    """Knowing the cluster's public key is not enough: the ZAP handler admits the cluster's key only."""
    keys = auth.load(secret)
    node = transports(keys)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        public, private = zmq.curve_keypair()
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys.public, public, private
        sock.connect(f"tcp://{node.address}")
        sock.send_multipart([Header(Kind.PUSH, sender=0, cluster=1).pack()])
        deadline = time.monotonic() + 20
        while node._guard.refused == 0 and time.monotonic() < deadline:
            assert node.recv(0.02) is None
        assert node._guard.refused >= 1 and node.drops.total >= 1
    finally:
        sock.close(linger=0)
        ctx.term()


def test_cli_secret_new_writes_a_private_file(tmp_path, capsys):
    """`pskv secret new FILE` makes a 0600 secret and says how to use it; a second time it refuses (status 2)."""
    from pskv.cli import main

    path = tmp_path / "job.secret"
    assert main(["secret", "new", str(path)]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    out = capsys.readouterr().out
    assert f"PSKV_SECRET_FILE={path}" in out and path.read_text().strip() not in out
    assert main(["secret", "new", str(path)]) == 2
    assert "exists; a cluster's secret is never overwritten" in capsys.readouterr().err
