"""A running set of node processes (`Cluster`, made by `pskv.launch.start_local`): their pipes,
their exits, failure handling and teardown, and what they print (prefixed, logged, node 0's
progress bar drawn in place). Threads and ownership: see pskv.launch."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from ..errors import ConfigError, WaitTimeout

logger = logging.getLogger("pskv.launch")

POLL_INTERVAL = 0.05  # seconds between looks at the processes: fast enough for tests, cheap
_KILL_AFTER = 3.0  # then SIGTERM; SIGKILL whoever is left this much later
_READER_JOIN = 2.0  # seconds to let the reader threads drain the pipes of exited nodes
_KEPT_LINES = 100_000  # per node, for output(): bounded memory for a run that prints for days
LOOPBACK = ("127.0.0.1", "localhost", "::1")
BAR_TAG = "@@pskv-bar "  # a node's line that is a progress bar frame for the launcher to draw (pskv.apps)


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

    def __init__(
        self,
        *,
        echo: bool,
        log_dir: Path | None,
        grace: float,
        backups: int = 0,
        remote: bool = False,
        prefixed: bool = True,
    ) -> None:
        """`backups` > 0: the others go on when a node dies; `remote`: the nodes run through ssh (a
        hostfile); `prefixed`: echo each line as `[node i] line` (not for a lone node, nor a joiner)."""
        self.coordinator_address = ""
        self.secret_file = ""  # the secret this launcher made for the cluster (net.auth), in a private directory
        self.metrics_port = 0  # P: node r serves Prometheus metrics at port P + r of its host (0: none)
        self.pids: list[int] = []
        self._nodes: list[_Node] = []
        self.coordinator: Any = None  # the coordinator service, when this launcher runs it (launch sets it)
        self._echo, self._log_dir, self._grace = echo, log_dir, grace
        self._echo_lock = threading.Lock()  # guards writes to sys.stdout (and _bar): one whole line at a time
        self._bar = ""  # the last progress bar frame a node sent (BAR_TAG lines), drawn below the others
        self._prefixed = prefixed
        self._failure: tuple[int, int] | None = None  # (rank, code) of the first failed node
        self.backups = backups  # > 0: the others go on when a node dies (its backups take over)
        self._died: set[int] = set()  # ranks reported failed to the coordinator
        self._stop = threading.Event()  # tells the watcher to return (shutdown() took over)
        self._done = threading.Event()  # set once every node has exited and been reaped
        self._shutdown_lock = threading.Lock()  # held for all of shutdown(); guards _closed
        self._closed = False
        self._remote = remote
        self.hosts: Any = None  # launch.hosts.Hosts when the nodes run as emulated hosts; removed at shutdown
        self._watcher = threading.Thread(target=self._watch, name="pskv-launch-watch", daemon=True)

    def __repr__(self) -> str:
        return (
            f"<Cluster nodes={len(self._nodes)} alive={len(self.alive_pids())} "
            f"coordinator={self.coordinator_address!r} failure={self._failure}>"
        )

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    def wait(self, timeout: float | None = None) -> int:
        """Block until every node has exited; return 0 if all exited 0, else the first failed
        node's status (1 if a signal ended it). Raises TimeoutError after `timeout` seconds,
        leaving the processes running."""
        if not self._done.wait(timeout):
            raise WaitTimeout(
                f"{len(self.alive_pids())} of {len(self._nodes)} nodes still run "
                f"after {timeout}s; call shutdown() to stop them"
            )
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
            parts.append(f"--- node {node.rank} (pid {node.proc.pid}, host {node.host}, exit {node.exit_code()}) ---")
            parts.extend(f"[node {node.rank}] {line}" for line in tail)
        return "\n".join(parts)

    def node_host(self, rank: int) -> str:
        """The address node `rank` runs at (127.0.0.1, a hostfile's host, an emulated host's address)."""
        return self._nodes[rank].host

    def metrics_urls(self) -> list[str]:
        """http://HOST:(P + r)/metrics of every node r when they serve metrics (metrics_port P), else []."""
        if not self.metrics_port:
            return []
        return [f"http://{node.host}:{self.metrics_port + node.rank}/metrics" for node in self._nodes]

    def dump(self) -> int:
        """Ask every local node process to log what it waits for (SIGUSR1 to the node's own PID,
        not its group: children keep their default action). Returns how many were asked."""
        asked = 0
        for node in self._nodes:
            if self._remote:
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

    @property
    def failure(self) -> tuple[int, int] | None:
        """(rank, code) of the first node the watcher saw fail, or None."""
        return self._failure

    def exit_codes(self) -> list[tuple[int, int | None]]:
        """(rank, exit status or None while it runs) of every node started."""
        return [(node.rank, node.exit_code()) for node in self._nodes]

    def watch(self) -> None:
        """Start watching the nodes (once every node was started): a failure is reported and, without
        backups, stops the others."""
        self._watcher.start()

    def start_node(self, rank: int, host: str, argv: list[str], env: dict[str, str]) -> None:
        log = None
        if self._log_dir is not None:
            Path(self._log_dir).mkdir(parents=True, exist_ok=True)
            # open while the node runs (shutdown() closes it)
            log = open(Path(self._log_dir) / f"node-{rank}.log", "w", encoding="utf-8")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            if log is not None:
                log.close()
            raise ConfigError(
                f"cannot start node {rank}: {shlex.join(argv)!r} failed with {exc.strerror}; check the command and PATH"
            ) from exc
        node = _Node(rank, host, proc, log)
        self._nodes.append(node)
        self.pids.append(proc.pid)
        for name, pipe in (("out", proc.stdout), ("err", proc.stderr)):
            reader = threading.Thread(
                target=self._read, args=(node, pipe), daemon=True, name=f"pskv-launch-{rank}-{name}"
            )
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
                    self._relay_bar(line[len(BAR_TAG) :])
                else:
                    self._say(f"[node {node.rank}] {line}" if self._prefixed else line)

    def _relay_bar(self, frame: str) -> None:
        """A progress bar frame a node printed as a line (BAR_TAG; empty: the bar ended). On a
        terminal it is redrawn in place below the other lines; elsewhere only its last frame
        is printed, once, when it ends."""
        with self._echo_lock, contextlib.suppress(AttributeError, ValueError, OSError):
            if frame:
                self._bar = frame
                if terminal():
                    sys.stdout.write("\r\x1b[K" + frame)
                    sys.stdout.flush()
                return
            last, self._bar = self._bar, ""
            if last:
                sys.stdout.write(("\r\x1b[K" if terminal() else "") + last + "\n")
                sys.stdout.flush()

    def _say(self, line: str) -> None:
        # a closed or missing stdout must not stop the reader: the pipe must keep draining
        with self._echo_lock, contextlib.suppress(AttributeError, ValueError, OSError):
            bar = self._bar if terminal() else ""  # a live bar stays below the lines
            sys.stdout.write(("\r\x1b[K" if bar else "") + line + "\n" + bar)
            sys.stdout.flush()

    def _watch(self) -> None:
        escalation: collections.deque[tuple[float, int]] = collections.deque()  # (when, signal)
        while not self._stop.wait(POLL_INTERVAL):
            codes = [node.exit_code() for node in self._nodes]
            # (not strict: a node may start meanwhile)
            failed = [(n, c) for n, c in zip(self._nodes, codes, strict=False) if c not in (None, 0)]
            for node, code in failed:
                if node.rank in self._died:
                    continue
                first = self._failure is None
                self._on_failure(node, code)
                if first and not self.backups:
                    now = time.monotonic()
                    escalation.extend(
                        [(now + self._grace, signal.SIGTERM), (now + self._grace + _KILL_AFTER, signal.SIGKILL)]
                    )
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
        reason = (
            f"process exited with status {code}" if code > 0 else f"process was killed by {signal.Signals(-code).name}"
        )
        alive = len(self.alive_pids())
        if self.backups:
            message = f"node {node.rank} failed: {reason}" + (
                f"; the other {alive} nodes go on (backups={self.backups})" if alive else ""
            )
        else:
            message = f"node {node.rank} failed: {reason}" + (f"; stopping the other {alive} nodes" if alive else "")
        if self._echo:  # the user reads the echo; a log record too would print it twice
            self._say(f"[launcher] {message}")
        else:
            logger.warning(message)
        if self.coordinator is not None:
            try:
                self.coordinator.report_failure(node.rank, reason)
            except Exception:  # the nodes then notice by heartbeats, or by our SIGTERM
                logger.exception("could not report the failure of node %d", node.rank)

    def _terminate(self, timeout: float) -> None:
        for node in self._nodes:
            node.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive_pids() and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)

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
        try:
            if self.coordinator is not None:
                self.coordinator.close()
        finally:
            if self.hosts is not None:  # after the coordinator, which binds the bridge's address
                self.hosts.close()

    def _status(self) -> int:
        if self.backups and self._failure is not None:
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


def terminal() -> bool:
    """Whether our stdout is a terminal (a closed or replaced one is not)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
