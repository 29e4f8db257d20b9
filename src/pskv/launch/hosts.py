"""Emulated hosts on one machine: the nodes of a launch run in H network namespaces, one per host,
each joined by a veth pair to one bridge, its link limited to a rate in both directions (issue 31).

Try it (as root): `pskv launch -n 4 --hosts 2 --link 1gbit -- sh -c 'echo $PSKV_HOST'`

Why: on one machine pskv nodes talk over loopback, at memory speed; a real cluster's links are
slower, and nodes on one host share memory (store.shm keys co-location by PSKV_HOST, the address
a node binds). With H namespaces the nodes of one emulated host share an address (and memory),
the others are a link away, and tc's tbf qdisc gives that link the rate of a real one: on each
host's own end of its veth (what it sends) and on the bridge's end (what it receives).

Names carry the launcher's PID, so launchers never clash and leftovers are recognised:
namespace `pskv<pid>h<i>`, bridge `pskvbr<pid>`, veth `pskv<pid>v<i>` on the bridge and `eth0`
inside host i (interface names have at most 15 characters: 4 + 7 digits of a PID + 1 + 3 of i).
The bridge holds 10.217.B.1/24 in the root namespace, where the launcher's coordinator binds
it; host i is 10.217.B.(i + 2). B is the first block no address or route of this machine
overlaps. Nodes go to hosts in blocks (rank r on host r * H // N: nodes 0..k-1 on host 0).

Threads and ownership: the thread that starts the cluster calls `start()`; `close()` may come
from any thread (Cluster.shutdown) and is idempotent under `_lock`. `start()` runs under an
exclusive flock on `_LOCK_FILE`, so two launchers starting at once see each other's block;
under it, it first removes what launchers that are no longer running left behind (`sweep`).
`close()` removes everything named with this launcher's PID, so it also cleans up a `start()`
that failed half way; after a SIGKILL the next launcher's `sweep()` does it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from ..errors import ConfigError

__all__ = ["Hosts", "check", "from_environ", "parse_rate", "sweep"]

logger = logging.getLogger(__name__)

_POOL = ipaddress.IPv4Network("10.217.0.0/16")  # private; each launcher takes one /24 of it
_LOCK_FILE = Path("/run/lock/pskv-hosts.lock") if Path("/run/lock").is_dir() else Path("/tmp/pskv-hosts.lock")
_LATENCY = "25ms"  # tbf's queue: at most this long a packet waits (more is dropped, as at a real switch)
_MIN_BURST = 16_000  # bytes; tbf needs at least a packet (GSO segments are split to fit)
_CMD_TIMEOUT = 20.0  # seconds for one `ip` or `tc` call (they take milliseconds)
_NETNS = re.compile(r"^pskv(\d+)h(\d+)$")
_LINK = re.compile(r"^pskv(?:br(\d+)|(\d+)v\d+)$")
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}  # tc's rate units are decimal


def parse_rate(text: str) -> float:
    """A tc rate (`100mbit`, `1gbit`, `125mbps`: bit or bytes per second) in bytes per second."""
    match = _RATE.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(
            f"--link {text!r} is not a rate; write a number and a unit tc knows, e.g. 100mbit, "
            "1gbit or 10gbit (bits per second), or 125mbps (bytes per second)"
        )
    value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    return value / 8 if match.group(3).lower() == "bit" else value


def from_environ(environ) -> tuple[int | None, str | None]:
    """(hosts, link) from PSKV_HOSTS and PSKV_LINK, launcher variables (`pskv run --hosts` sets them)."""
    raw, link = environ.get("PSKV_HOSTS") or None, environ.get("PSKV_LINK") or None
    if raw is not None and not raw.isdigit():
        raise ConfigError(f"PSKV_HOSTS={raw!r} is not a number of hosts; set it to e.g. 2, or unset it")
    return (None if raw is None else int(raw)), link


def _is_root() -> bool:
    return os.geteuid() == 0


def check(hosts: int | None, nodes: int, link: str | None, *, conflicts: dict | None = None) -> None:
    """Raise ConfigError, before anything starts, if `nodes` cannot run as `hosts` emulated hosts
    here: a bad count or rate, a set option of `conflicts` ({flag: value or None}), not root, or
    no `ip` (or `tc`, with a link) on PATH."""
    if hosts is None:
        raise ConfigError(f"--link {link} limits the links between emulated hosts; give --hosts H too")
    if not isinstance(hosts, int) or not 1 <= hosts <= nodes:
        raise ConfigError(
            f"--hosts {hosts} with {nodes} node(s): give 1 to {nodes} hosts (each host runs at least one node)"
        )
    if hosts > 250:
        raise ConfigError(f"--hosts {hosts}: at most 250 emulated hosts (one /24 of addresses)")
    for flag, value in (conflicts or {}).items():
        if value is not None:
            raise ConfigError(
                f"{flag} does not apply with --hosts: the emulated hosts are network namespaces of "
                "this machine, and the launcher runs their coordinator on their bridge"
            )
    if link is not None:
        parse_rate(link)
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None and (tool == "ip" or link)]
    if not _is_root():
        raise ConfigError(
            "--hosts runs each host in a network namespace with veth pairs, a bridge and tc, which "
            "needs root (CAP_NET_ADMIN) and this process is not root; run the launcher as root "
            "(e.g. `sudo -E pskv launch ...`) or leave out --hosts and --link"
        )
    if missing:
        raise ConfigError(
            f"--hosts needs {' and '.join(missing)} (iproute2) on PATH, and it is not there; install "
            "iproute2 (apt-get install iproute2) or leave out --hosts and --link"
        )


class Hosts:
    """`count` emulated hosts for the `nodes` nodes of this launcher (see the module docstring).
    Construction does nothing; `start()` makes them, `close()` removes them."""

    def __init__(self, count: int, nodes: int, link: str | None = None, *, pid: int | None = None) -> None:
        self.count, self.nodes, self.link = count, nodes, link
        self.pid = os.getpid() if pid is None else pid
        self.block: ipaddress.IPv4Network | None = None  # chosen by start()
        self._lock = threading.Lock()  # guards _closed; held for all of close()
        self._closed = False

    def __repr__(self) -> str:
        return f"<Hosts {self.count} pid={self.pid} block={self.block} link={self.link or 'unlimited'}>"

    def namespace(self, host: int) -> str:
        return f"pskv{self.pid}h{host}"

    @property
    def bridge(self) -> str:
        return f"pskvbr{self.pid}"

    def veth(self, host: int) -> str:
        """The bridge's end of host `host`'s link (its other end is `eth0` in the host)."""
        return f"pskv{self.pid}v{host}"

    @property
    def coordinator_host(self) -> str:
        """The bridge's address in the root namespace: reachable from every host."""
        return str(self._block()[1])

    def address(self, host: int) -> str:
        return str(self._block()[host + 2])

    def host_of(self, rank: int) -> int:
        """Nodes go to hosts in blocks: 0..k-1 on host 0, as on a real cluster's hostfile."""
        return rank * self.count // self.nodes

    def node_host(self, rank: int) -> str:
        """PSKV_HOST of node `rank`: its host's address (nodes of one host share it, and memory)."""
        return self.address(self.host_of(rank))

    def argv(self, rank: int, command: list[str], *, path: str | None = None) -> list[str]:
        """`command` run in node `rank`'s host. `ip netns exec` execs it: the PID stays the node's.
        Raises ConfigError if `command` is no program on `path` (the node would only exit 255)."""
        if shutil.which(command[0], path=path) is None:
            raise ConfigError(
                f"cannot start node {rank}: {command[0]!r} is not a program on PATH; check the command and PATH"
            )
        return [shutil.which("ip") or "ip", "netns", "exec", self.namespace(self.host_of(rank)), *command]

    def describe(self) -> str:
        spread = ", ".join(
            f"{self.namespace(h)} {self.address(h)} (nodes "
            f"{_ranks([r for r in range(self.nodes) if self.host_of(r) == h])})"
            for h in range(self.count)
        )
        return (
            f"{self.count} emulated host(s), links {self.link or 'unlimited'}, coordinator "
            f"{self.coordinator_host} on bridge {self.bridge}: {spread}"
        )

    def start(self) -> None:
        """Make the bridge, namespaces, veth pairs and rate limits. Blocks (tens of ms per host).
        Raises ConfigError if a command fails (call close() then: it removes what was made)."""
        with _exclusive():
            sweep()
            if _ours(self.pid):
                raise ConfigError(
                    f"this process ({self.pid}) already runs emulated hosts ({self.bridge}); shut that "
                    "cluster down first, or start the other from another process"
                )
            self.block = _free_block()
            net = self.block.prefixlen
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.coordinator_host}/{net}", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        for host in range(self.count):
            ns, veth = self.namespace(host), self.veth(host)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/{net}", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            if self.link is not None:
                for where in ([], ["-n", ns]):  # what the bridge sends the host, what the host sends
                    _run("tc", *where, "qdisc", "add", "dev", veth if not where else "eth0", "root", *self._tbf())

    def close(self) -> None:
        """Remove everything named with this launcher's PID. Idempotent; never raises (a removal
        that fails is logged)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            _remove(self.pid)

    def _tbf(self) -> list[str]:
        rate = parse_rate(self.link or "")
        burst = max(_MIN_BURST, int(rate / 1000))  # a millisecond at the rate: finer bursts cost precision at 1gbit+
        return ["tbf", "rate", self.link or "", "burst", str(burst), "latency", _LATENCY]

    def _block(self) -> ipaddress.IPv4Network:
        if self.block is None:
            raise ConfigError("the emulated hosts have no addresses yet; call start() first")
        return self.block


def sweep() -> list[int]:
    """Remove the namespaces, veths and bridges of launchers whose process is gone (one that was
    SIGKILLed cannot clean up). Returns their PIDs."""
    dead = sorted(pid for pid in _pids_with_leftovers() if not _alive(pid))
    for pid in dead:
        _remove(pid)
    return dead


def _ranks(ranks: list[int]) -> str:
    return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def _pids_with_leftovers() -> set[int]:
    pids = {int(m.group(1)) for m in map(_NETNS.match, _namespaces()) if m}
    pids |= {int(m.group(1) or m.group(2)) for m in map(_LINK.match, _links()) if m}
    return pids


def _ours(pid: int) -> bool:
    return pid in _pids_with_leftovers()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links() -> list[str]:
    out = _run("ip", "-o", "link", "show", check=False)  # "7: pskv12v0@if2: <...> ..."
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]


def _remove(pid: int) -> None:
    """Delete the bridge, veths and namespaces named with `pid`; what is already gone is skipped.
    A veth goes with its pair, so deleting our end also takes eth0 out of the namespace."""
    for name in _links():
        m = _LINK.match(name)
        if m and int(m.group(1) or m.group(2)) == pid:
            _try("ip", "link", "del", name)
    for name in _namespaces():
        m = _NETNS.match(name)
        if m and int(m.group(1)) == pid:
            _try("ip", "netns", "del", name)


def _free_block() -> ipaddress.IPv4Network:
    """The first /24 of _POOL that no address or route of the root namespace overlaps (another
    launcher's bridge holds its block's .1, so it is taken)."""
    lines = (
        _run("ip", "-4", "-o", "addr", "show", check=False).splitlines()
        + _run("ip", "-4", "route", "show", "table", "all", check=False).splitlines()
    )
    taken = []
    for word in (word for line in lines for word in _ADDRESS.findall(line)):
        with contextlib.suppress(ValueError):  # e.g. 300.1.2.3: no address
            taken.append(ipaddress.ip_network(word, strict=False))
    for block in _POOL.subnets(new_prefix=24):
        if not any(block.overlaps(net) for net in taken if net.prefixlen > 0):
            return block
    raise ConfigError(
        f"every /24 of {_POOL} is in use on this machine (other launchers' bridges or routes); "
        "end the other launchers with --hosts, or remove stale pskvbr* bridges with `ip link del`"
    )


@contextlib.contextmanager
def _exclusive():
    with open(_LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a few tens of ms per holder: a launcher sweeping and taking its block
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(*argv: str, check: bool = True) -> str:
    """Run `ip`/`tc` and return its stdout; with check, a failure is a ConfigError quoting it."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_CMD_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        if not check:
            return ""
        raise ConfigError(f"emulated hosts: `{' '.join(argv)}` could not run ({exc}); check iproute2") from None
    if check and done.returncode != 0:
        raise ConfigError(
            f"emulated hosts: `{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}; "
            "the launcher removed what it had made (see --hosts in `pskv launch --help`)"
        )
    return done.stdout


def _try(*argv: str) -> None:
    """Run a removal; log (not raise) a failure other than the thing being gone already."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_CMD_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("emulated hosts: `%s` could not run (%s); remove it by hand", " ".join(argv), exc)
        return
    if done.returncode != 0 and "Cannot find" not in done.stderr and "No such" not in done.stderr:
        logger.warning("emulated hosts: `%s` failed: %s; remove it by hand", " ".join(argv), done.stderr.strip())
