"""A host's private directory of `ipc://` files: how the nodes of one machine reach each other without CURVE.

On one host the operating system protects instead (issue 31): with PSKV_SHARED_MEMORY (default 1)
a node's inbox and reply boxes also listen on `ipc://` files in a private directory,
/tmp/pskv-UID/HOST-netNS/PORT.ipc (`private_dir`: directories 0700 and files 0600, owned by this
user, checked, never followed through a link; HOST is the address the node binds, NS its network
namespace, PORT the TCP port of the same socket, so a peer's announced host:port names its file).
Those endpoints speak no CURVE: only processes of this user (or root) can connect, and they could
read the secret file anyway; the cipher's cost (ZeroMQ's I/O thread encrypting and decrypting
every byte) is gone between the processes of one machine. A node connects to a peer over ipc when
the peer binds the same host and its file exists; the coordinator, and every peer on another host,
stays on TCP with CURVE, so a process without the secret is still refused when it asks to join.
Files are removed on close; those of a crashed process (no listener, older than a minute) are swept
when the next node of the host starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import stat
import time
from pathlib import Path

import zmq

from ..errors import ConfigError
from .auth import ClusterKeys

log = logging.getLogger(__name__)
_IPC_ROOT = "/tmp"  # fixed, not $TMPDIR or $XDG_RUNTIME_DIR: every node of a host must find the same files
_IPC_PATH_MAX = 100  # a Unix socket path has at most 107 bytes (sun_path); a longer one: TCP
_STALE_AFTER = 60.0  # seconds: a file this old that nobody listens on is a crashed process's (a live one listens
# within milliseconds of binding, so the sweep never takes a file being bound)
_warned: set[str] = set()  # one warning per process and kind


def private_dir(host: str) -> Path | None:
    """The private directory of this user's ipc files for address `host`, made (0700) if missing and
    swept of crashed processes' files; None (and a warning, once) if it is unsafe or cannot be made:
    the caller uses TCP only."""
    base = Path(_IPC_ROOT) / f"pskv-{os.getuid()}"
    where = base / _host_name(host)
    try:
        for path in (base, where):
            _own_dir(path)
    except (OSError, ConfigError) as exc:
        if "dir" not in _warned:
            _warned.add("dir")
            log.warning("no ipc between the nodes of this host (%s); they talk over TCP", exc)
        return None
    _sweep(where)
    _sweep_namespaces(base, where)
    return where


def leave(directory: Path) -> None:
    """Remove this host's directory if no file is left in it (the last node of the host closed)."""
    try:
        directory.rmdir()
    except OSError:
        pass


def ipc_file(directory: Path, port: int) -> Path | None:
    """The ipc file of the socket on TCP `port` in `directory`; None if its path is too long for a Unix socket."""
    path = directory / f"{port}.ipc"
    return path if len(str(path)) <= _IPC_PATH_MAX else None


def bind_private(sock: zmq.Socket, keys: ClusterKeys | None, path: Path) -> Path | None:
    """Bind `sock` (a CURVE server for TCP when `keys`) also on `path`, without CURVE, the file 0600;
    returns `path`, or None (a warning) if it cannot: the socket then listens on TCP only. The directory
    (0700) and the file mode are the protection; CURVE stays on the TCP endpoint, whose options libzmq
    fixed when it bound."""
    if keys is not None:
        sock.setsockopt(zmq.CURVE_SERVER, 0)
    for attempt in range(2):
        try:
            if attempt:  # the directory went (another process's sweep took it empty): make it again, once
                for directory in (path.parent.parent, path.parent):
                    _own_dir(directory)
            sock.bind(f"ipc://{path}")
            os.chmod(path, 0o600)
            return path
        except (zmq.ZMQError, OSError, ConfigError) as exc:
            error = exc
    log.warning("cannot listen on %s (%s); this socket is reached over TCP only", path, error)
    return None


def forget(host: str, port: int) -> None:
    """Remove a file left for `port` by a crashed process (this one holds the port now and listens on no
    ipc: a peer must not connect to the stale file)."""
    directory = Path(_IPC_ROOT) / f"pskv-{os.getuid()}" / _host_name(host)
    try:
        if _is_private(directory.parent) and _is_private(directory):
            (directory / f"{port}.ipc").unlink()
    except OSError:
        pass


def _host_name(host: str) -> str:
    """The directory name of address `host` in this network namespace: ports are unique per namespace (two
    namespaces may both bind 127.0.0.1:5100), so nodes of one namespace and address share a directory."""
    try:
        namespace = f"-net{os.stat('/proc/self/ns/net').st_ino}"
    except OSError:  # no /proc (macOS): one namespace
        namespace = ""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) + namespace


def _own_dir(path: Path) -> None:
    """Make `path` a directory of this user, mode 0700; raises ConfigError if one exists that is not that."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # (mkdir's mode went through the umask)
        return
    except FileExistsError:
        pass
    if not _is_private(path):
        raise ConfigError(
            f"{path} exists but is not a directory of uid {os.getuid()} with mode 0700 (remove it, "
            "or chmod 700 it if it is yours)"
        )


def _is_private(path: Path) -> bool:
    st = path.lstat()  # a link is refused, never followed
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _sweep(directory: Path) -> None:
    """Remove the ipc files in `directory` that nobody listens on and that are older than _STALE_AFTER."""
    now = time.time()
    old = [path for path in directory.glob("*.ipc") if _age(path, now) >= _STALE_AFTER]
    if not old:
        return
    bound = _bound_paths()
    for path in old:
        try:
            if (str(path) in bound) if bound is not None else _listens(path):
                continue
            path.unlink()
            log.info("removed %s, left by a process that ended without closing", path)
        except OSError:
            continue


def _sweep_namespaces(base: Path, mine: Path) -> None:
    """Remove the directories of network namespaces that no process of this user is in any more (emulated
    hosts of an ended launch: nobody of theirs will start again to sweep them), their files first."""
    others = [d for d in base.glob("*-net*") if d != mine and d.name.rpartition("-net")[2].isdigit()]
    if not others:
        return
    alive = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):  # (ended meanwhile, or another user's)
            alive.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    for directory in others:
        if int(directory.name.rpartition("-net")[2]) in alive:
            continue
        for path in directory.glob("*.ipc"):
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()


def _age(path: Path, now: float) -> float:
    try:
        return now - path.lstat().st_mtime
    except OSError:
        return 0.0


def _bound_paths() -> set[str] | None:
    """The paths of this network namespace's bound Unix sockets (Linux), or None where /proc has no list."""
    try:
        with open("/proc/net/unix") as f:
            next(f)
            return {fields[7] for fields in map(str.split, f) if len(fields) > 7}
    except (OSError, StopIteration):
        return None


def _listens(path: Path) -> bool:
    """Whether a process accepts connections on `path` (without /proc: a live node then counts one failed
    handshake, from this probe, among its drops)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
            return True
        except ConnectionRefusedError:
            return False
