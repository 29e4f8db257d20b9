"""Authentication: a cluster's secret, the CURVE keypair made from it, and the checks at both ends.

    pskv secret new ~/job.secret                       # 32 random bytes (hex), mode 0600
    PSKV_SECRET_FILE=~/job.secret python train.py      # on every node (`pskv launch` makes its own)

Every node of a cluster reads the same secret file (PSKV_SECRET_FILE). From it comes one CURVE
keypair, the same on every node: the secret key is blake2b(file contents, person "pskv-curve-v1")
(32 bytes, z85), the public key its curve25519 point (zmq.curve_public). Every socket that binds
(a node's inbox, its threads' reply boxes, the coordinator's inbox) is a CURVE server with that
keypair, every socket that connects (each PUSH, `send_once`) a CURVE client with it, and the ZAP
handler of each transport (`Guard`, pyzmq's ThreadAuthenticator) accepts only that public key. So
only a process that holds the secret completes a handshake: one without it cannot join, send a
single message, or receive a reply (a reply box or inbox of its own is no CURVE server, so no
node connects to it); and every message is encrypted (curve25519, then xsalsa20-poly1305).

A refused handshake shows at both ends, each through a socket monitor (`Handshakes`): the node
that connects to the coordinator learns it was refused, and `pskv.init()` raises ClusterError
saying the secrets differ (`refusal`); the side that binds counts the failed connections in its
`Drops` (one log line per minute). A process started with no secret runs unauthenticated (a
node of several says so once); a one-process `pskv.init()` has nobody to authenticate.

On one host the operating system protects instead (issue 31): net.private_ipc's `ipc://` files in a
private directory, without CURVE.

Threads and ownership: a Guard's thread (pskv-zap-PORT) answers ZAP requests of its transport's
context until `stop()`. `Handshakes.watch` may be called by any thread right after it made a
socket; only the thread that owns the transport's inbox (its `recv`) polls and reads the
monitors (`_lock` guards the hand-over list `_new`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import secrets
import stat
import threading
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from ..config import NodeConfig
from ..errors import ClusterError, ConfigError
from .drops import Drops

log = logging.getLogger(__name__)
_PERSON = b"pskv-curve-v1"  # domain separation: the same file used elsewhere gives other keys
_MIN_SECRET = 16  # bytes of a secret file at least (pskv writes 64 hex digits)
_REFUSED_AFTER = 3  # handshakes the coordinator cut off (100 ms apart, libzmq reconnects) before we give up;
# a refusal that says why (AUTH: ZAP said no; PROTOCOL: one side has no CURVE) is final at once, and libzmq
# does not retry it. A wrong server key shows as NO_DETAIL only: the server cannot decrypt our HELLO, hangs up.
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
_warned: set[str] = set()  # one warning per process and kind
_monitors = itertools.count()  # names of monitor endpoints (pyzmq's default, by fd, can clash with a closed one's)


@dataclasses.dataclass(frozen=True)
class ClusterKeys:
    """The cluster's CURVE keypair (z85) and the file it came from. Its repr never shows the secret key."""

    public: bytes
    secret: bytes = dataclasses.field(repr=False)
    source: str

    def server(self, sock: zmq.Socket) -> None:
        """Make `sock` (before it binds) a CURVE server that only this cluster's nodes get through."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def client(self, sock: zmq.Socket) -> None:
        """Make `sock` (before it connects) a CURVE client of this cluster's nodes."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)


def new_secret(path: str | os.PathLike) -> Path:
    """Write a new secret (64 hex digits) to `path`, readable by its owner only (0600). Raises
    ConfigError if the file exists (a running cluster's secret must not change under it)."""
    path = Path(path).expanduser()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(
            f"{path} exists; a cluster's secret is never overwritten: remove it first, or choose another path"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot create the secret file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def load(path: str | os.PathLike) -> ClusterKeys:
    """The keys made from the secret in `path`. Raises ConfigError if it cannot be read or is too short."""
    path = Path(path).expanduser()
    try:
        raw = path.read_bytes().strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(
            f"cannot read PSKV_SECRET_FILE={str(path)!r}: {exc.strerror}; give every node the "
            "cluster's secret file (`pskv secret new FILE` makes one)"
        ) from None
    if len(raw) < _MIN_SECRET:
        raise ConfigError(
            f"PSKV_SECRET_FILE={str(path)!r} holds {len(raw)} byte(s); a secret needs at least "
            f"{_MIN_SECRET} (`pskv secret new FILE` makes one)"
        )
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and "mode" + str(path) not in _warned:
        _warned.add("mode" + str(path))
        log.warning("the secret file %s can be read by other users (mode %o); chmod 600 it", path, mode & 0o777)
    secret = z85.encode(hashlib.blake2b(raw, digest_size=32, person=_PERSON).digest())
    return ClusterKeys(public=zmq.curve_public(secret), secret=secret, source=str(path))


def keys_for(config: NodeConfig) -> ClusterKeys | None:
    """The keys of `config.secret_file`, or None: unauthenticated (a warning, once, for a node of several)."""
    if config.secret_file:
        return load(config.secret_file)
    if (config.num_nodes > 1 or config.join) and "none" not in _warned:
        _warned.add("none")
        log.warning(
            "PSKV_SECRET_FILE is not set: this node runs unauthenticated, and anyone who reaches its "
            "ports can join and write; `pskv launch` sets it (see the README, Security)"
        )
    return None


def refusal(address: str, keys: ClusterKeys | None) -> str:
    """What to tell the user when the coordinator at `address` refused this node's handshakes."""
    if keys is None:
        return (
            f"the coordinator at {address} refused this node's connection: the cluster requires a secret and "
            "this node has none (PSKV_SECRET_FILE is unset); start it with PSKV_SECRET_FILE set to the "
            "cluster's secret file (`pskv launch` prints its path)"
        )
    return (
        f"the coordinator at {address} refused this node's connection: the secret in PSKV_SECRET_FILE="
        f"{keys.source!r} is not the cluster's (or the cluster runs without one); give every node the same "
        "secret file"
    )


class Guard:
    """The ZAP handler of one ZeroMQ context: admits CURVE clients with the cluster's public key only."""

    def __init__(self, ctx: zmq.Context, keys: ClusterKeys, drops: Drops, name: str) -> None:
        self._public = keys.public
        self._drops = drops
        self._auth = ThreadAuthenticator(ctx, log=logging.getLogger(__name__ + ".zap"))
        self._auth.start()  # before any socket binds: without a handler libzmq would admit every key
        self._auth.thread.name = f"pskv-zap-{name}"
        self._auth.configure_curve_callback("*", credentials_provider=self)
        self.refused = 0  # clients with another key (they knew our public key but not the secret)

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq calls it (its thread) with the client's z85 public key."""
        if key == self._public:
            return True
        self.refused += 1
        self._drops.add("unauthenticated peers", "refused a CURVE client whose key is not the cluster's")
        return False

    def stop(self) -> None:
        self._auth.stop()


class Handshakes:
    """Watches sockets' handshakes: failed ones on the inbox are counted; the coordinator's refusal is raised."""

    def __init__(self, keys: ClusterKeys | None, drops: Drops) -> None:
        self._keys = keys
        self._drops = drops
        self._lock = threading.Lock()  # guards _new (any thread adds, the owner thread takes)
        self._new: list[tuple[zmq.Socket, str]] = []  # (monitor, "inbox" or the coordinator's address)
        self._mine: dict[zmq.Socket, str] = {}  # owner thread only: the monitors in its poller
        self._coordinator_ok = False  # a handshake with the coordinator succeeded: later failures are no refusal
        self._failures = 0  # failed handshakes with the coordinator before any succeeded
        self._raised = False

    def watch(self, sock: zmq.Socket, where: str) -> None:
        """Watch `sock`'s handshakes (any thread, right after making it): where is "inbox" or an address."""
        monitor = sock.get_monitor_socket(
            _FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED, addr=f"inproc://pskv-handshakes-{os.getpid()}-{next(_monitors)}"
        )
        with self._lock:
            self._new.append((monitor, where))

    def adopt(self, poller: zmq.Poller) -> None:
        """Owner thread: poll the monitors added since."""
        if not self._new:
            return
        with self._lock:
            new, self._new = self._new, []
        for monitor, where in new:
            self._mine[monitor] = where
            poller.register(monitor, zmq.POLLIN)

    def read(self, ready: dict) -> None:
        """Owner thread: read the events of the ready monitors. Raises ClusterError, once, when the
        coordinator refused us before it ever accepted us: at once if it said why, else after
        _REFUSED_AFTER handshakes it cut off."""
        for monitor, where in self._mine.items():
            while ready.get(monitor) and int(monitor.get(zmq.EVENTS)) & zmq.POLLIN:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)["event"]
                if where == "inbox":
                    if event & _FAILED and event != zmq.EVENT_HANDSHAKE_FAILED_AUTH:  # (AUTH: the Guard counted it)
                        self._drops.add(
                            "unauthenticated peers",
                            "a connection failed authentication (no secret, or another cluster's)",
                        )
                elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._coordinator_ok = True
                elif not self._coordinator_ok:
                    self._failures += 1 if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL else _REFUSED_AFTER
                    if self._failures >= _REFUSED_AFTER and not self._raised:
                        self._raised = True
                        raise ClusterError(refusal(where, self._keys))

    @property
    def refused(self) -> bool:
        """Whether read() raised: the coordinator refused this node."""
        return self._raised

    def close(self) -> None:
        with self._lock:
            monitors = [m for m, _ in self._new] + list(self._mine)
            self._new, self._mine = [], {}
        for monitor in monitors:
            monitor.close(linger=0)
