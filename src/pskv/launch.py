"""Start, watch and tear down a set of node processes that all run one command.

Try it: `pskv launch -n 3 -- python -c "import os; print(os.environ['PSKV_RANK'])"`

`start_local()` starts a coordinator in this process (port 0: the OS picks a free one), then N
node processes, each with PSKV_COORDINATOR, PSKV_NUM_NODES, PSKV_RANK, PSKV_HOST and
PSKV_THREADS in its environment (this module is the only writer of PSKV_*; config.py reads
them). With a hostfile, node i runs on hosts[i % len(hosts)] through
`ssh -o BatchMode=yes HOST 'cd CWD && env PSKV_...=... COMMAND'`, with PSKV_HOST=HOST.
The coordinator binds `coordinator_host`: by default 127.0.0.1, or, when a hostfile names a
host that is not loopback, the address of this machine's hostname
(socket.gethostbyname(socket.gethostname())); pass coordinator_host= when that is wrong.

When any node exits non-zero, the coordinator tells the others (they raise pskv.NodeFailure),
they get min(5 s, failure_timeout) to exit on their own, then SIGTERM, then SIGKILL.

Threads and ownership: `pskv-launch-watch` polls the node processes every 50 ms and decides
about failures; two reader threads per node (`pskv-launch-N-out`, `pskv-launch-N-err`) drain
its pipes until EOF, so a chatty node never blocks on a full pipe. Any thread may call the
Cluster's methods. Each node runs in its own session (start_new_session=True), so its process
group id is its PID: signals go to that group, and only while its leader is not yet reaped
(we detect exits with waitid(WNOWAIT)), so a PID the OS has reused is never signalled.
Nodes started over ssh: ending the local ssh client ends the connection; the remote process
stops when it loses the coordinator (heartbeats), not by signal.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from .config import ConfigError, NodeConfig
from .errors import WaitTimeout
from .net.auth import new_secret

logger = logging.getLogger(__name__)

_POLL_INTERVAL = 0.05  # seconds between looks at the processes: fast enough for tests, cheap
_MAX_GRACE = 5.0  # a failed cluster's survivors get at most this long to exit by themselves
_KILL_AFTER = 3.0  # then SIGTERM; SIGKILL whoever is left this much later
_READER_JOIN = 2.0  # seconds to let the reader threads drain the pipes of exited nodes
_KEPT_LINES = 100_000  # per node, for output(): bounded memory for a run that prints for days
_PER_NODE_FIELDS = ("coordinator", "num_nodes", "rank", "host", "threads")  # written even at their defaults
_PER_NODE_VARS = tuple("PSKV_" + name.upper() for name in _PER_NODE_FIELDS) + ("PSKV_EXTERNAL_COORDINATOR",)
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
BAR_TAG = "@@pskv-bar "  # a node's line that is a progress bar frame for the launcher to draw (pskv.apps)

CoordinatorFactory = Callable[..., Any]  # (num_nodes=, host=, port=, config=) -> Coordinator-like


def node_env(config: NodeConfig) -> dict[str, str]:
    """The PSKV_* variables of one node: every non-default setting, plus the per-node ones even
    at their defaults (rank 0 included), so nothing inherited from the launcher overrides them."""
    env = config.to_env()
    for name in _PER_NODE_FIELDS:
        value = getattr(config, name)
        if value is not None:
            env["PSKV_" + name.upper()] = str(value)
    return env


def read_hostfile(path: Path) -> list[str]:
    """Hosts of a hostfile: one per line, `#` comments and blank lines ignored, an optional
    ` slots=K` accepted and ignored. Raises ConfigError naming the file and line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read hostfile {str(path)!r}: {exc.strerror}; "
                          "pass a file with one host per line") from None
    hosts = []
    for lineno, line in enumerate(text.splitlines(), 1):
        host, *rest = line.split("#", 1)[0].split() or [""]
        if not host:
            continue
        bad = [word for word in rest if not _is_slots(word)]
        if host.startswith("-") or bad:
            raise ConfigError(f"hostfile {str(path)!r} line {lineno}: {line.strip()!r} is not "
                              "'HOST' or 'HOST slots=K'; write one host per line")
        hosts.append(host)
    if not hosts:
        raise ConfigError(f"hostfile {str(path)!r} names no host; write one host per line")
    return hosts


def _is_slots(word: str) -> bool:
    key, _, value = word.partition("=")
    return key == "slots" and value.isdigit() and int(value) > 0


class _Node:
    """One node process and what it printed. `lock` guards lines and log."""

    def __init__(self, rank: int, host: str, proc: subprocess.Popen, log: TextIO | None) -> None:
        self.rank, self.host, self.proc, self.log = rank, host, proc, log
        self.lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self.lock = threading.Lock()  # guards lines and log; held only to append one line
        self.reap_lock = threading.Lock()  # held to signal or reap: never signal a reaped PID
        self.readers: list[threading.Thread] = []

    def exit_code(self) -> int | None:
        """Popen-style returncode (negative: killed by that signal), or None while running.
        Does not reap: a zombie keeps its PID (and process group id) from being reused."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # another thread reaped it just now
            return self.proc.returncode
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def signal_group(self, sig: int) -> None:
        """Send `sig` to this node's process group, unless its leader was already reaped.
        SIGTERM comes with SIGCONT, as a shell's `kill` does, so a stopped node ends too."""
        with self.reap_lock:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, sig)
                    if sig == signal.SIGTERM:
                        os.killpg(self.proc.pid, signal.SIGCONT)

    def reap(self) -> None:
        """SIGKILL what is left of the group (stragglers, leftover children), then reap."""
        self.signal_group(signal.SIGKILL)
        with self.reap_lock:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # e.g. stuck in uninterruptible I/O
                logger.error("node %d (pid %d) did not die after SIGKILL", self.rank, self.proc.pid)


class Cluster:
    """A running set of node processes; made by start_local(). Use `with` or call shutdown().

    Thread-safe. `pids` lists the node PIDs by rank; `coordinator_address` is "host:port"
    ("" when started with coordinator=False)."""

    def __init__(self, *, echo: bool, log_dir: Path | None, grace: float, backups: int = 0) -> None:
        self.coordinator_address = ""
        self.secret_file = ""  # the secret this launcher made for the cluster (net.auth), in a private directory
        self.pids: list[int] = []
        self._nodes: list[_Node] = []
        self._coordinator: Any = None
        self._echo, self._log_dir, self._grace = echo, log_dir, grace
        self._echo_lock = threading.Lock()  # guards writes to sys.stdout (and _bar): one whole line at a time
        self._bar = ""  # the last progress bar frame a node sent (BAR_TAG lines), drawn below the others
        self._prefixed = True  # echo each line as `[node i] line` (start_local: not for a lone node)
        self._failure: tuple[int, int] | None = None  # (rank, code) of the first failed node
        self._backups = backups  # > 0: the others go on when a node dies (its backups take over)
        self._died: set[int] = set()  # ranks reported failed to the coordinator
        self._stop = threading.Event()  # tells the watcher to return (shutdown() took over)
        self._done = threading.Event()  # set once every node has exited and been reaped
        self._shutdown_lock = threading.Lock()  # held for all of shutdown(); guards _closed
        self._closed = False
        self._remote = False  # nodes run through ssh (a hostfile)
        self._watcher = threading.Thread(target=self._watch, name="pskv-launch-watch", daemon=True)

    def __repr__(self) -> str:
        return (f"<Cluster nodes={len(self._nodes)} alive={len(self.alive_pids())} "
                f"coordinator={self.coordinator_address!r} failure={self._failure}>")

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    def wait(self, timeout: float | None = None) -> int:
        """Block until every node has exited; return 0 if all exited 0, else the first failed
        node's status (1 if a signal ended it). Raises TimeoutError after `timeout` seconds,
        leaving the processes running."""
        if not self._done.wait(timeout):
            raise WaitTimeout(f"{len(self.alive_pids())} of {len(self._nodes)} nodes still run "
                               f"after {timeout}s; call shutdown() to stop them")
        return self._status()

    def shutdown(self, timeout: float = 10) -> None:
        """Stop everything: SIGTERM the nodes, wait up to `timeout` s, SIGKILL stragglers, end
        the reader threads, close the log files and the coordinator. Blocks; idempotent."""
        with self._shutdown_lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            try:
                if self._watcher.is_alive():
                    self._watcher.join(timeout=5)
                self._terminate(timeout)
                self._reap()
            finally:
                self._close_files_and_coordinator()
                self._done.set()

    def alive_pids(self) -> list[int]:
        """PIDs of the nodes that have not exited yet."""
        return [node.proc.pid for node in self._nodes if node.exit_code() is None]

    def output(self, rank: int) -> str:
        """What node `rank` printed so far, stdout and stderr interleaved by line, unprefixed
        (only the last 100,000 lines are kept)."""
        node = self._nodes[rank]
        with node.lock:
            return "".join(line + "\n" for line in node.lines)

    def logs_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of every node, prefixed `[node i] `, for assertion messages."""
        parts = []
        for node in self._nodes:
            with node.lock:
                tail = list(node.lines)[-lines:]
            parts.append(f"--- node {node.rank} (pid {node.proc.pid}, host {node.host}, "
                         f"exit {node.exit_code()}) ---")
            parts.extend(f"[node {node.rank}] {line}" for line in tail)
        return "\n".join(parts)

    def dump(self) -> int:
        """Ask every local node process to log what it waits for (SIGUSR1 to the node's own PID,
        not its group: children keep their default action). Returns how many were asked."""
        asked = 0
        for node in self._nodes:
            if node.host not in _LOOPBACK or self._remote:
                continue  # an ssh client would die of it; dump remote nodes with `kill -USR1` there
            with node.reap_lock:
                if node.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(node.proc.pid, signal.SIGUSR1)
                        asked += 1
        return asked

    def kill(self, rank: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to node `rank` (its process group), e.g. to inject a fault."""
        self._nodes[rank].signal_group(sig)

    def _start_node(self, rank: int, host: str, argv: list[str], env: dict[str, str]) -> None:
        log = None
        if self._log_dir is not None:
            Path(self._log_dir).mkdir(parents=True, exist_ok=True)
            log = open(Path(self._log_dir) / f"node-{rank}.log", "w", encoding="utf-8")
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            if log is not None:
                log.close()
            raise ConfigError(f"cannot start node {rank}: {shlex.join(argv)!r} failed with "
                              f"{exc.strerror}; check the command and PATH") from exc
        node = _Node(rank, host, proc, log)
        self._nodes.append(node)
        self.pids.append(proc.pid)
        for name, pipe in (("out", proc.stdout), ("err", proc.stderr)):
            reader = threading.Thread(target=self._read, args=(node, pipe), daemon=True,
                                      name=f"pskv-launch-{rank}-{name}")
            reader.start()
            node.readers.append(reader)  # only started threads: shutdown() joins these

    def _read(self, node: _Node, pipe) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                with node.lock:
                    node.lines.append(line)
                    if node.log is not None:
                        node.log.write(line + "\n")
                        node.log.flush()
                if not self._echo:
                    continue
                if line.startswith(BAR_TAG):
                    self._relay_bar(line[len(BAR_TAG):])
                else:
                    self._say(f"[node {node.rank}] {line}" if self._prefixed else line)

    def _relay_bar(self, frame: str) -> None:
        """A progress bar frame a node printed as a line (BAR_TAG; empty: the bar ended). On a
        terminal it is redrawn in place below the other lines; elsewhere only its last frame
        is printed, once, when it ends."""
        with self._echo_lock, contextlib.suppress(AttributeError, ValueError, OSError):
            if frame:
                self._bar = frame
                if _terminal():
                    sys.stdout.write("\r\x1b[K" + frame)
                    sys.stdout.flush()
                return
            last, self._bar = self._bar, ""
            if last:
                sys.stdout.write(("\r\x1b[K" if _terminal() else "") + last + "\n")
                sys.stdout.flush()

    def _say(self, line: str) -> None:
        with self._echo_lock:
            # a closed or missing stdout must not stop the reader: the pipe must keep draining
            with contextlib.suppress(AttributeError, ValueError, OSError):
                bar = self._bar if _terminal() else ""  # a live bar stays below the lines
                sys.stdout.write(("\r\x1b[K" if bar else "") + line + "\n" + bar)
                sys.stdout.flush()

    def _watch(self) -> None:
        escalation: collections.deque[tuple[float, int]] = collections.deque()  # (when, signal)
        while not self._stop.wait(_POLL_INTERVAL):
            codes = [node.exit_code() for node in self._nodes]
            failed = [(n, c) for n, c in zip(self._nodes, codes) if c not in (None, 0)]
            for node, code in failed:
                if node.rank in self._died:
                    continue
                first = self._failure is None
                self._on_failure(node, code)
                if first and not self._backups:
                    now = time.monotonic()
                    escalation.extend([(now + self._grace, signal.SIGTERM),
                                       (now + self._grace + _KILL_AFTER, signal.SIGKILL)])
            if all(code is not None for code in codes):
                self._reap()
                self._done.set()
                return
            while escalation and time.monotonic() >= escalation[0][0]:
                sig = escalation.popleft()[1]
                for node in self._nodes:
                    node.signal_group(sig)

    def _on_failure(self, node: _Node, code: int) -> None:
        if self._failure is None:
            self._failure = (node.rank, code)
        self._died.add(node.rank)
        reason = (f"process exited with status {code}" if code > 0
                  else f"process was killed by {signal.Signals(-code).name}")
        alive = len(self.alive_pids())
        if self._backups:
            message = f"node {node.rank} failed: {reason}" + (
                f"; the other {alive} nodes go on (backups={self._backups})" if alive else "")
        else:
            message = f"node {node.rank} failed: {reason}" + (
                f"; stopping the other {alive} nodes" if alive else "")
        if self._echo:  # the user reads the echo; a log record too would print it twice
            self._say(f"[launcher] {message}")
        else:
            logger.warning(message)
        if self._coordinator is not None:
            try:
                self._coordinator.report_failure(node.rank, reason)
            except Exception:  # the nodes then notice by heartbeats, or by our SIGTERM
                logger.exception("could not report the failure of node %d", node.rank)

    def _terminate(self, timeout: float) -> None:
        for node in self._nodes:
            node.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive_pids() and time.monotonic() < deadline:
            time.sleep(_POLL_INTERVAL)

    def _reap(self) -> None:
        for node in self._nodes:
            node.reap()
        # so that output() is complete once wait() returns; a pipe still open now is held by a
        # process that left its node's group (setsid), and we stop waiting for it
        deadline = time.monotonic() + _READER_JOIN
        for node in self._nodes:
            for reader in node.readers:
                reader.join(timeout=max(0.0, deadline - time.monotonic()))

    def _close_files_and_coordinator(self) -> None:
        if self.secret_file:
            shutil.rmtree(Path(self.secret_file).parent, ignore_errors=True)
        for node in self._nodes:
            with node.lock:
                if node.log is not None:
                    node.log.close()
                    node.log = None
        if self._coordinator is not None:
            self._coordinator.close()

    def _status(self) -> int:
        if self._backups and self._failure is not None:
            # nodes that were killed by a signal died; the job succeeded if every other node finished well
            codes = [n.exit_code() for n in self._nodes]
            rest = [c for c in codes if c is None or c >= 0]
            if rest and all(c == 0 for c in rest):
                return 0
        if self._failure is not None:
            code = self._failure[1]
        else:
            code = next((c for c in (n.exit_code() for n in self._nodes) if c), 0)
        return code if code >= 0 else 1


def _terminal() -> bool:
    """Whether our stdout is a terminal (a closed or replaced one is not)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def start_local(nodes: int, command: list[str], *, threads: int = 1, env: dict | None = None,
                log_dir: Path | None = None, hostfile: Path | None = None,
                failure_timeout: float | None = None, echo: bool = False,
                coordinator: bool | str | CoordinatorFactory = True,
                coordinator_host: str | None = None, backups: int | None = None,
                restore: str | None = None, join: str | None = None, metrics: int | None = None) -> Cluster:
    """Start a coordinator and `nodes` processes running `command`; return at once.

    `env`: extra variables for the processes, on top of os.environ (with a hostfile they apply to
    the local ssh client; the remote command gets only PSKV_* and PYTHONUNBUFFERED). `log_dir`:
    also write node i's output to log_dir/node-i.log. `echo`: print every line as `[node i] ...`.
    `coordinator`: True starts pskv.membership.coordinator.Coordinator, False none (PSKV_COORDINATOR unset),
    "node0" lets node 0's process run it (at a free port of its host), or a factory called like Coordinator.
    `join`: "host:port" of a running cluster's coordinator: start no coordinator; the nodes join that
    cluster (each gets the next free rank from it). `metrics`: node r serves Prometheus metrics at
    port metrics + r (PSKV_METRICS_PORT). Raises ConfigError for bad arguments or hostfile."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"nodes is {nodes!r}; launch at least 1 node")
    if not command:
        raise ConfigError("the command to launch is empty; give it after `--`")
    hosts = read_hostfile(hostfile) if hostfile is not None else None
    parent_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    if echo and _terminal():  # the apps' "auto" progress draws a bar, which we relay (Cluster._bar)
        parent_env.update(PSKV_TERMINAL="1", COLUMNS=str(shutil.get_terminal_size().columns))
    for name in _PER_NODE_VARS:
        parent_env.pop(name, None)
    base = NodeConfig.from_env({k: v for k, v in parent_env.items() if k.startswith("PSKV_")},
                               threads=threads, failure_timeout=failure_timeout, backups=backups,
                               restore=None if restore is None else str(restore), join=join,
                               metrics_port=metrics)
    if join is not None:
        coordinator = False
    if base.backups and base.backups >= nodes > 1:
        raise ConfigError(f"backups={base.backups} on {nodes} nodes: a key range can have at most {nodes - 1} "
                          "backup(s) (one on each other node)")
    cluster = Cluster(echo=echo, log_dir=log_dir, grace=min(_MAX_GRACE, base.failure_timeout), backups=base.backups)
    insecure = os.environ.get("PSKV_INSECURE") == "1"  # the user's choice: no secret, no CURVE (trusted networks)
    if not base.secret_file and not insecure and (coordinator is True or coordinator == "node0"):  # ours
        cluster.secret_file = _new_secret(hosts)  # (its directory goes at shutdown)
        base = dataclasses.replace(base, secret_file=cluster.secret_file)
    cluster._remote = hosts is not None
    cluster._prefixed = nodes > 1 or join is not None  # one node's lines need no `[node 0] ` (nor a joiner's: rank > 0)
    try:
        in_node = coordinator == "node0"
        if in_node:  # node 0's process runs it, as under a launcher that runs none (e.g. slurm)
            host = coordinator_host or (hosts[0] if hosts else "127.0.0.1")
            address = f"{host}:{_free_port(host)}"
        elif coordinator is not False:
            host = coordinator_host or _coordinator_host(hosts)
            coord_config = dataclasses.replace(base, num_nodes=nodes, host=host)
            cluster._coordinator = _start_coordinator(coordinator, coord_config)
        if not in_node:
            address = cluster._coordinator.address if cluster._coordinator is not None else None
        cluster.coordinator_address = join or address or ""
        for rank in range(nodes):
            host = hosts[rank % len(hosts)] if hosts else "127.0.0.1"
            if join is not None:  # rank and size come from the running cluster
                config = dataclasses.replace(base, host=host)
            else:
                config = dataclasses.replace(base, coordinator=address, num_nodes=nodes, rank=rank,
                                             host=host, external_coordinator=address is not None and not in_node)
            child_env = {**parent_env, **node_env(config)}
            argv = _ssh_argv(host, command, child_env) if hosts else list(command)
            cluster._start_node(rank, host, argv, child_env)
        cluster._watcher.start()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def launch(nodes: int, command: list[str], *, threads: int = 1, hostfile: Path | None = None,
           coordinator_host: str | None = None, backups: int | None = None, restore: str | None = None,
           join: str | None = None, metrics: int | None = None) -> int:
    """Run `command` on `nodes` nodes to completion, echoing their output; return the exit
    status (0 if every node exited 0). Ctrl-C or SIGTERM stops every node; then 128 + signal."""
    with _interrupt_on_sigterm():
        try:
            with start_local(nodes, command, threads=threads, hostfile=hostfile, echo=True,
                             coordinator_host=coordinator_host, backups=backups, restore=restore,
                             join=join, metrics=metrics) as cluster, \
                    _dump_on_sigusr1(cluster):
                if cluster._coordinator is not None and not cluster._backups:
                    secret = f"PSKV_SECRET_FILE={shlex.quote(cluster.secret_file)} " if cluster.secret_file else ""
                    print(f"[launcher] coordinator at {cluster.coordinator_address}; add nodes while it runs with "
                          f"`{secret}pskv launch -n K --join {cluster.coordinator_address} -- CMD`", file=sys.stderr,
                          flush=True)
                while True:
                    # bounded waits: a signal the OS delivers to another of our threads runs its
                    # Python handler only when the main thread wakes up, so it must wake up
                    with contextlib.suppress(TimeoutError):
                        return cluster.wait(timeout=_POLL_INTERVAL * 4)
        except KeyboardInterrupt as exc:
            signum = exc.args[0] if exc.args and isinstance(exc.args[0], int) else signal.SIGINT
            print(f"[launcher] interrupted by {signal.Signals(signum).name}; stopped all nodes",
                  file=sys.stderr, flush=True)
            return 128 + signum


@contextlib.contextmanager
def _interrupt_on_sigterm():
    """Turn SIGTERM into KeyboardInterrupt(SIGTERM), as Ctrl-C is, so `with` cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _dump_on_sigusr1(cluster: Cluster):
    """`kill -USR1 <launcher>`: every node logs its outstanding requests and collectives."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        asked = cluster.dump()
        print(f"[launcher] SIGUSR1: asked {asked} node(s) to log what they wait for", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _free_port(host: str) -> int:
    """A port that is free on `host` now (for node 0's coordinator; a race with other programs is unlikely)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _start_coordinator(coordinator: bool | CoordinatorFactory, config: NodeConfig) -> Any:
    if coordinator is True:
        from .membership.coordinator import Coordinator  # lazily: process tests need no coordinator

        coordinator = Coordinator
    coord = coordinator(num_nodes=config.num_nodes, host=config.host, port=0, config=config)
    try:
        coord.start()
    except BaseException:
        coord.close()
        raise
    return coord


def _new_secret(hosts: list[str] | None) -> str:
    """A new cluster secret in a private directory (mode 0700, file 0600) of this machine."""
    if hosts and not all(host in _LOOPBACK for host in hosts):
        raise ConfigError("the hostfile names other machines, which cannot read a secret this launcher keeps in "
                          "its own /tmp; make one with `pskv secret new FILE`, copy it to the same path on every "
                          "host, and set PSKV_SECRET_FILE=FILE")
    return str(new_secret(Path(tempfile.mkdtemp(prefix="pskv-")) / "secret"))


def _coordinator_host(hosts: list[str] | None) -> str:
    """127.0.0.1 unless a hostfile names a remote host; then this machine's address."""
    if not hosts or all(host in _LOOPBACK for host in hosts):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as exc:
        raise ConfigError(f"cannot resolve this machine's hostname {socket.gethostname()!r} "
                          f"({exc}); pass --coordinator-host with an address the hosts can reach")


def _ssh_argv(host: str, command: list[str], env: dict[str, str]) -> list[str]:
    ssh = shutil.which("ssh", path=env.get("PATH"))
    if ssh is None:
        raise ConfigError("a hostfile was given but `ssh` is not on PATH; install an ssh client "
                          "or launch without --hostfile")
    remote_env = {k: v for k, v in env.items() if k.startswith("PSKV_")}
    remote_env["PYTHONUNBUFFERED"] = "1"
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(remote_env.items()))
    remote = f"cd {shlex.quote(os.getcwd())} && env {assignments} {shlex.join(command)}"
    return [ssh, "-o", "BatchMode=yes", host, remote]
