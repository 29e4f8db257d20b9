"""Run a pskv cluster on Ray: one pskv node per Ray actor, placed and started by Ray.

Try it: `pskv launch --ray -n 2 -- python examples/quickstart.py` (a private local Ray), or
`pskv launch --ray --address auto -n 8 -- python train.py` on a machine of a running Ray cluster.

Two entry points over the same actors: `launch_ray(nodes, command)` runs a command in every actor
(what `pskv launch --ray` does; it returns the exit status like `launch.launch`), `run_ray(fn,
nodes)` calls a function in every actor's own process and returns its results by rank. Either
way: Ray places the `nodes` actors (SPREAD: one per Ray node while there are free ones), actor 0
picks a free port on its node for the coordinator, which pskv node 0 runs (no process outside the
actors does, so the driver may be a Ray client far away), and every actor runs with
PSKV_COORDINATOR, PSKV_NUM_NODES, PSKV_RANK, PSKV_THREADS and PSKV_HOST (its Ray node's address)
set, plus the driver's other PSKV_* settings. The cluster's secret (net.auth) is the driver's
PSKV_SECRET_FILE, or else a new one for this cluster, as `pskv launch` makes; it travels as its
content over Ray's own channel, and each actor writes it to a private file (mode 0600, removed when
the node ends) of its machine and points PSKV_SECRET_FILE there.

Failures: the first node that fails (a non-zero exit, an exception of `fn`, its actor dying) is
reported with its rank; the others then get `grace` seconds to stop by themselves (pskv raises
NodeFailure in them), after which every actor is stopped: a command's process group gets SIGTERM,
then SIGKILL, then the actor is killed (ray.kill).

Threads and ownership: the driver's calling thread owns the actors and waits on them; nothing here
starts a thread. In an actor (max_concurrency=2) `run` blocks in one Ray thread while `stop` may
run in the other; `_proc` is set once before the child runs, so `stop` needs no lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from .config import ConfigError, NodeConfig
from .errors import ClusterError, NodeFailure

__all__ = ["launch_ray", "run_ray"]

_PER_NODE = (
    "PSKV_COORDINATOR",
    "PSKV_NUM_NODES",
    "PSKV_RANK",
    "PSKV_HOST",
    "PSKV_THREADS",
    "PSKV_EXTERNAL_COORDINATOR",
    "PSKV_JOIN",
    "PSKV_SECRET_FILE",
)
_POLL = 0.2  # seconds between looks at the actors: a failure is noticed at once, this only bounds the loop
_STOP_WAIT = 5.0  # seconds a command gets after SIGTERM before SIGKILL
_TAIL = 40  # lines of a failed command's output quoted in the report


def launch_ray(
    nodes: int,
    command: list[str],
    *,
    address: str | None = None,
    threads: int = 1,
    host: str | None = None,
    num_cpus: float = 1,
    grace: float = 5.0,
    start_timeout: float = 300.0,
    **settings: Any,
) -> int:
    """Run `command` as pskv node 0..nodes-1, one per Ray actor, to completion; return 0 if every
    node exited 0, else the first failed node's status (1 if its actor died).

    Blocks. `address`: the Ray cluster (ray.init's: None starts a private local Ray unless one is
    initialised already; "auto" or "ray://HEAD:10001" joins a running one). `host`: the address
    every node binds (default: each actor's Ray node address). `num_cpus`: Ray CPUs per actor.
    `settings`: NodeConfig fields for every node (backups=1, failure_timeout=5). Output lines come
    back through Ray's log forwarding as `[node i] ...`. Raises ConfigError for bad arguments or a
    missing ray, ClusterError when the actors do not start within `start_timeout` seconds."""
    if not command:
        raise ConfigError("the command to launch is empty; give it after `--`")
    try:
        outcome = _run(
            nodes,
            list(command),
            None,
            (),
            address=address,
            threads=threads,
            host=host,
            num_cpus=num_cpus,
            grace=grace,
            start_timeout=start_timeout,
            settings=settings,
        )
    except KeyboardInterrupt:  # _run stopped every actor on its way out
        print("[launcher] interrupted; stopped all nodes", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    if outcome.failure is None:
        return 0
    rank, code, detail = outcome.failure
    print(f"[launcher] node {rank} failed: {detail}{outcome.stopped_text()}", file=sys.stderr, flush=True)
    if outcome.tail:
        print(f"[launcher] the last lines of node {rank}:\n{outcome.tail}", file=sys.stderr, flush=True)
    return code


def run_ray(
    fn: Callable[..., Any],
    nodes: int,
    *args: Any,
    address: str | None = None,
    threads: int = 1,
    host: str | None = None,
    num_cpus: float = 1,
    grace: float = 5.0,
    start_timeout: float = 300.0,
    **settings: Any,
) -> list[Any]:
    """Call `fn(*args)` in each of `nodes` Ray actors, as pskv node 0..nodes-1 (`pskv.init()`
    inside `fn` joins the cluster); return the results by rank.

    Blocks. `fn` and `args` travel by Ray's pickling (cloudpickle), results back the same way.
    Other arguments as in launch_ray. Raises NodeFailure(node_id=rank) for the first node whose
    `fn` raised or whose actor died, chained to that error, after stopping the others."""
    if not callable(fn):
        raise ConfigError(f"run_ray needs a function to run in every actor, not {fn!r}")
    outcome = _run(
        nodes,
        None,
        fn,
        args,
        address=address,
        threads=threads,
        host=host,
        num_cpus=num_cpus,
        grace=grace,
        start_timeout=start_timeout,
        settings=settings,
    )
    if outcome.failure is not None:
        rank, _, detail = outcome.failure
        raise NodeFailure(
            f"node {rank} failed in its Ray actor: {detail}{outcome.stopped_text()}", node_id=rank
        ) from outcome.error
    return [outcome.results[rank] for rank in range(nodes)]


class _Outcome:
    def __init__(self) -> None:
        self.results: dict[int, Any] = {}
        self.failure: tuple[int, int, str] | None = None  # (rank, exit status, what happened)
        self.error: BaseException | None = None  # the first failure's exception, if it raised
        self.tail = ""  # the first failed command's last lines of output
        self.stopped = 0  # nodes still running when we gave up on them (the grace period after a failure)

    def stopped_text(self) -> str:
        return f"; stopped the {self.stopped} node(s) still running" if self.stopped else ""


def _run(
    nodes: int,
    command: list[str] | None,
    fn: Callable | None,
    args: tuple,
    *,
    address: str | None,
    threads: int,
    host: str | None,
    num_cpus: float,
    grace: float,
    start_timeout: float,
    settings: dict,
) -> _Outcome:
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"nodes is {nodes!r}; launch at least 1 node")
    ray = _import_ray()
    base_env, secret = _base_env(threads, settings)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=address, log_to_driver=True)
    actors: list = []
    try:
        actor_class = ray.remote(num_cpus=num_cpus, max_concurrency=2, max_restarts=0)(_NodeActor)
        actors = [actor_class.options(scheduling_strategy="SPREAD").remote(rank) for rank in range(nodes)]
        hosts = _node_hosts(ray, actors, host, start_timeout)
        port = ray.get(actors[0].free_port.remote(hosts[0]), timeout=start_timeout)
        coordinator = f"[{hosts[0]}]:{port}" if ":" in hosts[0] else f"{hosts[0]}:{port}"
        refs = {}
        for rank, actor in enumerate(actors):
            env = {
                **base_env,
                "PSKV_COORDINATOR": coordinator,
                "PSKV_NUM_NODES": str(nodes),
                "PSKV_RANK": str(rank),
                "PSKV_HOST": hosts[rank],
                "PSKV_THREADS": str(threads),
            }
            refs[actor.run.remote(env, secret, command, fn, args)] = rank
        return _wait(ray, refs, command is not None, grace)
    finally:
        _stop(ray, actors)
        if started_ray:
            ray.shutdown()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--ray needs the ray package, which is not installed here; "
            "`pip install 'pskv[ray]'` (ray>=2.9), on every machine of the Ray cluster"
        ) from None
    return ray


def _base_env(threads: int, settings: dict) -> tuple[dict[str, str], bytes]:
    """The driver's PSKV_* settings for every node (per-node ones dropped), and the secret's bytes."""
    own = {k: v for k, v in os.environ.items() if k.startswith("PSKV_") and k not in _PER_NODE}
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(NodeConfig)})
    if unknown:
        raise ConfigError(
            f"unknown node settings {unknown}; pass NodeConfig fields such as backups= or failure_timeout="
        )
    base = NodeConfig.from_env(own, threads=threads, **settings)
    secret = (secrets.token_hex(32) + "\n").encode()  # a cluster of our making gets its own (net.auth's format)
    path = os.environ.get("PSKV_SECRET_FILE")
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read()
        except OSError as exc:
            raise ConfigError(
                f"PSKV_SECRET_FILE={path!r} cannot be read ({exc.strerror}); "
                "create it with `pskv secret new FILE`, or unset it"
            ) from None
    return {**base.to_env(), "PYTHONUNBUFFERED": "1"}, secret


def _node_hosts(ray, actors: list, host: str | None, timeout: float) -> list[str]:
    """Each actor's address (its Ray node's), once every actor has started."""
    refs = [actor.host.remote() for actor in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    if len(ready) < len(refs):
        raise ClusterError(
            f"only {len(ready)} of {len(refs)} Ray actors started within {timeout:g} s; the cluster "
            f"has {ray.available_resources().get('CPU', 0):g} CPUs free: launch fewer nodes, "
            "pass num_cpus= below 1, or add Ray nodes"
        )
    found = ray.get(refs)
    return [host or h for h in found]


def _wait(ray, refs: dict, is_command: bool, grace: float) -> _Outcome:
    outcome = _Outcome()
    pending = list(refs)
    deadline = None
    while pending and (deadline is None or time.monotonic() < deadline):
        done, pending = ray.wait(pending, num_returns=1, timeout=_POLL)
        for ref in done:
            rank = refs[ref]
            try:
                value = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the function raised (RayTaskError) or the actor died (RayActorError)
                _fail(outcome, rank, 1, _describe(exc), exc)
                continue
            if is_command and value[0] != 0:
                status, tail = value
                reason = f"exited with status {status}" if status > 0 else f"was killed by signal {-status}"
                if outcome.failure is None:
                    outcome.tail = tail
                _fail(outcome, rank, status if status > 0 else 1, f"its command {reason}", None)
            outcome.results[rank] = value
        if outcome.failure is not None and deadline is None:
            deadline = time.monotonic() + grace
    outcome.stopped = len(pending)
    return outcome


def _fail(outcome: _Outcome, rank: int, code: int, detail: str, error: BaseException | None) -> None:
    if outcome.failure is None:
        outcome.failure = (rank, code, detail)
        outcome.error = error


def _describe(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # RayTaskError: the function's own exception
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _stop(ray, actors: list) -> None:
    """Stop every actor's command (SIGTERM, then SIGKILL), then the actors themselves."""
    stops = []
    for actor in actors:
        with contextlib.suppress(Exception):  # an actor that already died cannot be asked
            stops.append(actor.stop.remote())
    with contextlib.suppress(Exception):
        ray.wait(stops, num_returns=len(stops), timeout=_STOP_WAIT + 5)
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor)


class _NodeActor:
    """One pskv node's Ray actor (made remote by _run, so importing this module needs no ray)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._proc: subprocess.Popen | None = None  # the command, once started
        self._reap_lock = threading.Lock()  # held to signal or reap the command: never signal a reaped PID

    def host(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def free_port(self, host: str) -> int:
        """A port free on `host` now, for node 0's coordinator (another program taking it first is unlikely)."""
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            return s.getsockname()[1]

    def run(
        self, env: dict[str, str], secret: bytes, command: list[str] | None, fn: Callable | None, args: tuple
    ) -> Any:
        """The node: `command` in a child process (returns (status, last lines)), or `fn(*args)` here."""
        secret_file = _write_secret(secret)
        env = {**env, "PSKV_SECRET_FILE": secret_file}
        try:
            if command is not None:
                return self._run_command(command, env)
            for name in [n for n in os.environ if n.startswith("PSKV_")]:
                del os.environ[name]
            os.environ.update(env)
            assert fn is not None  # (launch_ray gives a command, run_ray a function)
            return fn(*args)
        finally:
            shutil.rmtree(os.path.dirname(secret_file), ignore_errors=True)

    def _run_command(self, command: list[str], env: dict[str, str]) -> tuple[int, str]:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}
        try:
            self._proc = subprocess.Popen(
                command,
                env={**child_env, **env},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return 127, f"cannot start {command!r}: {exc.strerror}; check the command and PATH on this Ray node"
        tail: list[str] = []
        stdout = self._proc.stdout
        assert stdout is not None  # (stdout=PIPE)
        with stdout:
            for raw in iter(stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                print(f"[node {self.rank}] {line}", flush=True)  # Ray forwards it to the driver
                tail = [*tail, line][-_TAIL:]
        while True:  # reap only under the lock, so that stop() never signals a PID the OS may reuse
            with self._reap_lock:
                if self._proc.poll() is not None:
                    return self._proc.returncode, "\n".join(tail)
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM the command's process group, SIGKILL it after _STOP_WAIT s; only while the child is unreaped."""
        proc = self._proc
        if proc is None:
            return
        deadline = time.monotonic() + _STOP_WAIT
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with self._reap_lock:
                if proc.returncode is not None:
                    return
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
            while proc.returncode is None and time.monotonic() < deadline:
                time.sleep(0.05)  # run() reaps it


def _write_secret(secret: bytes) -> str:
    """The cluster's secret in a private directory (0700) and file (0600) of this machine; its path."""
    path = os.path.join(tempfile.mkdtemp(prefix="pskv-"), "secret")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(secret)
    return path
