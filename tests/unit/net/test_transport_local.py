"""net/transport.py with ipc (issue 31): transports of one host talk over private ipc:// files without CURVE;
other hosts (another loopback address), the coordinator, and anything without the secret stay on TCP + CURVE.

Every test puts the private directory under a short directory of its own (`root`), never /tmp/pskv-UID.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from pskv.net import auth, private_ipc
from pskv.net.transport import Transport
from pskv.net.wire import COORDINATOR

pytestmark = pytest.mark.timeout(30)
HOST_DIR = f"127.0.0.1-net{os.stat('/proc/self/ns/net').st_ino}"  # the address, in this network namespace


@pytest.fixture
def root(monkeypatch):
    """A short private root for the ipc directories (a Unix socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="pskvt", dir="/tmp"))
    monkeypatch.setattr(private_ipc, "_IPC_ROOT", str(path))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def keys(tmp_path):
    return auth.load(auth.new_secret(tmp_path / "cluster.secret"))


@pytest.fixture
def transports():
    """make(host, keys, ipc=True) -> a Transport that knows every other one made here as ranks 0, 1, ..."""
    made: list[Transport] = []

    def make(host="127.0.0.1", keys=None, *, ipc=True, **kwargs):
        made.append(Transport(host, keys=keys, ipc=ipc, **kwargs))
        for t in made:
            for rank, other in enumerate(made):
                t.set_address(rank, other.address)
        return made[-1]

    try:
        yield make
    finally:
        for t in made:
            t.close()


def _receive(t: Transport, n: int, timeout: float = 10.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        frames = t.recv(0.05)
        if frames is not None:
            got.append(bytes(frames[0]))
    return got


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_transport_local_files_are_private_and_removed_on_close(root, keys, transports):
    """/ROOT/pskv-UID and its host directory are 0700 and ours; the inbox's and a reply box's files are 0600
    sockets named by their TCP ports; close() removes both, and the host directory left empty."""
    a = transports("127.0.0.1", keys)
    box = a.reply_box()
    base, host = root / f"pskv-{os.getuid()}", root / f"pskv-{os.getuid()}" / HOST_DIR
    files = sorted(host.iterdir())
    assert files == sorted([host / f"{a.port}.ipc", host / f"{box.port}.ipc"])
    assert [_mode(base), _mode(host)] == [0o700, 0o700]
    assert all(stat.S_ISSOCK(f.lstat().st_mode) and _mode(f) == 0o600 for f in files)
    assert {p.lstat().st_uid for p in [base, host, *files]} == {os.getuid()}
    a.close()
    assert not host.exists() and base.exists()


def test_transport_local_same_host_uses_ipc_and_other_hosts_tcp_with_curve(root, keys, transports):
    """Two transports on 127.0.0.1 reach each other (inbox and reply box) over ipc; one on 127.0.0.2 (another
    host) is reached over TCP, with CURVE, both ways; the coordinator always over TCP. Every message arrives."""
    a, b, c = transports("127.0.0.1", keys), transports("127.0.0.1", keys), transports("127.0.0.2", keys)
    b.set_address(COORDINATOR, a.address)
    box = b.reply_box()
    assert a.url_of(1) == f"ipc://{root}/pskv-{os.getuid()}/{HOST_DIR}/{b.port}.ipc"
    assert a.url_of(1, box.port) == f"ipc://{root}/pskv-{os.getuid()}/{HOST_DIR}/{box.port}.ipc"
    assert a.url_of(2) == f"tcp://127.0.0.2:{c.port}" and c.url_of(0) == f"tcp://127.0.0.1:{a.port}"
    assert b.url_of(COORDINATOR) == f"tcp://127.0.0.1:{a.port}" and a.url_of(0).startswith("inproc://")
    b.send(0, [b"b->a ipc"])
    c.send(0, [b"c->a tcp"])
    b.send(COORDINATOR, [b"b->coordinator tcp"])
    a.send(2, [b"a->c tcp"])
    a.send(1, [b"a->b's box ipc"], port=box.port)
    assert sorted(_receive(a, 3)) == [b"b->a ipc", b"b->coordinator tcp", b"c->a tcp"]
    assert _receive(c, 1) == [b"a->c tcp"]
    assert bytes(box.recv(10)[0]) == b"a->b's box ipc"
    assert a.drops.total == 0 and c.drops.total == 0


def test_transport_local_tcp_without_the_secret_is_still_refused(root, keys, transports):
    """With ipc on, the TCP endpoint is still a CURVE server: a plain client and one with another key get nothing
    through (the Guard refuses the key); the ipc file takes a plain client of this user."""
    a = transports("127.0.0.1", keys)
    ctx = zmq.Context()
    plain, forged, local = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    try:
        public, private = zmq.curve_keypair()
        forged.curve_serverkey, forged.curve_publickey, forged.curve_secretkey = keys.public, public, private
        urls = [f"tcp://{a.address}"] * 2 + [f"ipc://{root}/pskv-{os.getuid()}/{HOST_DIR}/{a.port}.ipc"]
        for sock, url in zip((plain, forged, local), urls):
            sock.setsockopt(zmq.SNDTIMEO, 0)
            sock.connect(url)
        plain.send(b"plain tcp")
        forged.send(b"forged tcp")
        local.send(b"local ipc")
        assert _receive(a, 1) == [b"local ipc"]
        deadline = time.monotonic() + 10
        while a._guard.refused == 0 and time.monotonic() < deadline:
            assert a.recv(0.02) is None
        assert _receive(a, 1, timeout=0.5) == [] and a._guard.refused >= 1
    finally:
        for sock in (plain, forged, local):
            sock.close(linger=0)
        ctx.term()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another user")
def test_transport_local_another_user_cannot_connect(root, transports):
    """A process of another uid can neither list the directory nor connect to a node's ipc file (EACCES)."""
    a = transports("127.0.0.1")
    path = root / f"pskv-{os.getuid()}" / HOST_DIR / f"{a.port}.ipc"
    os.chmod(root, 0o755)  # our test root stays traversable: the private directory must stop them itself
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit
        code = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                os.listdir(path.parent)
                code |= 1
            except PermissionError:
                pass
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(str(path))
                    code |= 2
                except PermissionError:
                    pass
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_transport_local_off_is_tcp_and_removes_a_stale_file_of_its_port(root, keys, transports):
    """ipc=False (PSKV_SHARED_MEMORY=0): no file, TCP + CURVE to a peer of the same host, even one with a file; a
    file a crashed process left for the port it now holds is removed, so no peer sends into it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = private_ipc.private_dir("127.0.0.1")
    stale = host / f"{port}.ipc"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))  # closed without unlink: what SIGKILL leaves
    a = transports("127.0.0.1", keys, ipc=False, port=port)
    b = transports("127.0.0.1", keys, ipc=True)
    assert not stale.exists() and [p.name for p in host.iterdir()] == [f"{b.port}.ipc"]
    assert b.url_of(0) == f"tcp://127.0.0.1:{port}" and a.url_of(1) == f"tcp://127.0.0.1:{b.port}"
    a.send(1, [b"a->b"])
    b.send(0, [b"b->a"])
    assert _receive(b, 1) == [b"a->b"] and _receive(a, 1) == [b"b->a"]


def test_transport_local_sweeps_files_of_crashed_processes(root, transports):
    """A new transport removes files older than a minute that no socket is bound to; a live listener's old file
    and a fresh file (a process binding right now) stay."""
    host = private_ipc.private_dir("127.0.0.1")
    dead, fresh, live = host / "1.ipc", host / "2.ipc", host / "3.ipc"
    for path in (dead, fresh):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(live))
        listener.listen()
        old = time.time() - 120
        for path in (dead, live):
            os.utime(path, (old, old), follow_symlinks=False)
        a = transports("127.0.0.1")
        assert sorted(p.name for p in host.iterdir()) == sorted(["2.ipc", "3.ipc", f"{a.port}.ipc"])
        assert not private_ipc._listens(fresh) and private_ipc._listens(live)  # the probe used where /proc has no list
    finally:
        listener.close()


def test_transport_local_sweeps_directories_of_ended_namespaces(root, transports):
    """A host directory of a network namespace no process is in (an ended launch's emulated host) goes with
    its files; one of a live namespace (ours, another address) stays."""
    base = root / f"pskv-{os.getuid()}"
    base.mkdir(mode=0o700)
    gone, kept = base / "10.217.0.2-net1", base / f"127.0.0.9-net{os.stat('/proc/self/ns/net').st_ino}"
    for directory in (gone, kept):
        directory.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(directory / "1.ipc"))
    transports("127.0.0.1")
    assert not gone.exists() and (kept / "1.ipc").exists()


@pytest.mark.parametrize("unsafe", ["loose mode", "symlink", "a file"])
def test_transport_local_refuses_an_unsafe_directory(root, transports, unsafe, caplog):
    """A base directory that is group/world accessible, a link, or no directory: no ipc (a warning saying what
    to do), and the transport works over TCP."""
    base = root / f"pskv-{os.getuid()}"
    if unsafe == "loose mode":
        base.mkdir(mode=0o755)
        os.chmod(base, 0o755)
    elif unsafe == "symlink":
        (root / "elsewhere").mkdir(mode=0o700)
        base.symlink_to(root / "elsewhere")
    else:
        base.write_text("")
    private_ipc._warned.discard("dir")
    with caplog.at_level(logging.WARNING):
        a, b = transports("127.0.0.1"), transports("127.0.0.1")
    assert "no ipc between the nodes of this host" in caplog.text and "talk over TCP" in caplog.text
    assert a.url_of(1) == f"tcp://127.0.0.1:{b.port}"
    b.send(0, [b"over tcp"])
    assert _receive(a, 1) == [b"over tcp"]
    if unsafe == "symlink":
        assert list((root / "elsewhere").iterdir()) == []


def test_transport_local_bind_remakes_a_swept_directory_once_or_goes_tcp(root, caplog):
    """The host directory removed between private_dir and the bind (another process's sweep took it empty):
    bind_private makes it again (0700) and binds; if the base became unsafe meanwhile, it binds nothing, says
    so, and returns None (the socket is reached over TCP)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        host = private_ipc.private_dir("127.0.0.1")
        shutil.rmtree(host)
        path = private_ipc.bind_private(sock, None, host / "1.ipc")
        assert path == host / "1.ipc" and _mode(host) == 0o700 and _mode(path) == 0o600
        shutil.rmtree(root / f"pskv-{os.getuid()}")
        (root / "elsewhere").mkdir(mode=0o700)
        (root / f"pskv-{os.getuid()}").symlink_to(root / "elsewhere")
        with caplog.at_level(logging.WARNING):
            assert private_ipc.bind_private(sock, None, host / "2.ipc") is None
        assert "this socket is reached over TCP only" in caplog.text and list((root / "elsewhere").iterdir()) == []
    finally:
        sock.close(linger=0)
        ctx.term()
