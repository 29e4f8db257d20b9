"""Start, watch and tear down a set of node processes that all run one command.

Try it: `pskv launch -n 3 -- python -c "import os; print(os.environ['PSKV_RANK'])"`

`start_local()` starts a coordinator in this process (port 0: the OS picks a free one), then N
node processes, each with PSKV_COORDINATOR, PSKV_NUM_NODES, PSKV_RANK, PSKV_HOST and
PSKV_THREADS in its environment (this module is the only writer of PSKV_*; config.py reads
them). With a hostfile, node i runs on hosts[i % len(hosts)] through
`ssh -o BatchMode=yes HOST 'cd CWD && env PSKV_...=... COMMAND'`, with PSKV_HOST=HOST (launch.ssh).
The coordinator binds `coordinator_host`: by default 127.0.0.1, or, when a hostfile names a
host that is not loopback, the address of this machine's hostname
(socket.gethostbyname(socket.gethostname())); pass coordinator_host= when that is wrong.
With emulated_hosts=H (`pskv launch --hosts H`, launch.hosts), node i runs through `ip netns exec`
in host i * H // N's network namespace, with PSKV_HOST that host's address; the coordinator binds
the address of their bridge.

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

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ..config import ConfigError, NodeConfig
from . import console, hosts as emulation, ssh, verdict
from .cluster import BAR_TAG, POLL_INTERVAL, Cluster, terminal
from .ssh import read_hostfile

__all__ = ["BAR_TAG", "Cluster", "launch", "node_env", "read_hostfile", "start_local"]

logger = logging.getLogger(__name__)

_MAX_GRACE = 5.0  # a failed cluster's survivors get at most this long to exit by themselves
_PER_NODE_FIELDS = ("coordinator", "num_nodes", "rank", "host", "threads")  # written even at their defaults
_PER_NODE_VARS = (*("PSKV_" + name.upper() for name in _PER_NODE_FIELDS), "PSKV_EXTERNAL_COORDINATOR")

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


def start_local(
    nodes: int,
    command: list[str],
    *,
    threads: int = 1,
    env: dict | None = None,
    log_dir: Path | None = None,
    hostfile: Path | None = None,
    failure_timeout: float | None = None,
    echo: bool = False,
    coordinator: bool | str | CoordinatorFactory = True,
    coordinator_host: str | None = None,
    backups: int | None = None,
    restore: str | None = None,
    join: str | None = None,
    metrics: int | None = None,
    emulated_hosts: int | None = None,
    link: str | None = None,
) -> Cluster:
    """Start a coordinator and `nodes` processes running `command`; return at once.

    `env`: extra variables for the processes, on top of os.environ (with a hostfile they apply to
    the local ssh client; the remote command gets only PSKV_* and PYTHONUNBUFFERED). `log_dir`:
    also write node i's output to log_dir/node-i.log. `echo`: print every line as `[node i] ...`.
    `coordinator`: True starts pskv.membership.coordinator.Coordinator, False none (PSKV_COORDINATOR unset),
    "node0" lets node 0's process run it (at a free port of its host), or a factory called like Coordinator.
    `join`: "host:port" of a running cluster's coordinator: start no coordinator; the nodes join that
    cluster (each gets the next free rank from it). `metrics`: node r serves Prometheus metrics at
    port metrics + r (PSKV_METRICS_PORT). `emulated_hosts`: run the nodes as that many hosts of this
    machine, network namespaces whose links `link` limits (e.g. "1gbit"; launch.hosts; needs root).
    Raises ConfigError for bad arguments or hostfile."""
    hosts = _check(nodes, command, coordinator, hostfile, emulated_hosts, link, join, coordinator_host)
    parent_env, base = _environment(
        env,
        echo,
        threads=threads,
        failure_timeout=failure_timeout,
        backups=backups,
        restore=None if restore is None else str(restore),
        join=join,
        metrics_port=metrics,
    )
    if join is not None:
        coordinator = False
    if base.backups and base.backups >= nodes > 1:
        raise ConfigError(
            f"backups={base.backups} on {nodes} nodes: a key range can have at most {nodes - 1} "
            "backup(s) (one on each other node)"
        )
    cluster = Cluster(
        echo=echo,
        log_dir=log_dir,
        grace=min(_MAX_GRACE, base.failure_timeout),
        backups=base.backups,
        remote=hosts is not None,
        prefixed=nodes > 1 or join is not None,
    )  # (one node's lines need no
    # `[node 0] `, nor a joiner's: its rank is not 0)
    cluster.metrics_port = base.metrics_port
    insecure = os.environ.get("PSKV_INSECURE") == "1"  # the user's choice: no secret, no CURVE (trusted networks)
    if not base.secret_file and not insecure and (coordinator is True or coordinator == "node0"):  # ours
        cluster.secret_file = ssh.local_secret(hosts)  # (its directory goes at shutdown)
        base = dataclasses.replace(base, secret_file=cluster.secret_file)
    try:
        if emulated_hosts is not None:
            cluster.hosts = emulated = emulation.Hosts(emulated_hosts, nodes, link)  # shutdown() removes them
            emulated.start()
            coordinator_host = emulated.coordinator_host
        address = _start_coordinator(cluster, coordinator, base, nodes, hosts, coordinator_host)
        cluster.coordinator_address = join or address or ""
        _start_nodes(
            cluster, nodes, command, base, parent_env, hosts, address, in_node=coordinator == "node0", join=join
        )
        cluster.watch()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def _start_nodes(
    cluster: Cluster,
    nodes: int,
    command: list[str],
    base: NodeConfig,
    parent_env: dict[str, str],
    hosts: list[str] | None,
    address: str | None,
    *,
    in_node: bool,
    join: str | None,
) -> None:
    """Node i's process: its host (the hostfile's, an emulated host's, or this machine), its PSKV_*, its
    argv (through ssh or a network namespace)."""
    for rank in range(nodes):
        host = hosts[rank % len(hosts)] if hosts else "127.0.0.1"
        if cluster.hosts is not None:
            host = cluster.hosts.node_host(rank)
        if join is not None:  # rank and size come from the running cluster
            config = dataclasses.replace(base, host=host)
        else:
            config = dataclasses.replace(
                base,
                coordinator=address,
                num_nodes=nodes,
                rank=rank,
                host=host,
                external_coordinator=address is not None and not in_node,
            )
        child_env = {**parent_env, **node_env(config)}
        argv = ssh.ssh_argv(host, command, child_env) if hosts else list(command)
        if cluster.hosts is not None:
            argv = cluster.hosts.argv(rank, argv, path=child_env.get("PATH"))
        cluster.start_node(rank, host, argv, child_env)


def _check(
    nodes: int,
    command: list[str],
    coordinator: bool | str | CoordinatorFactory,
    hostfile: Path | None,
    emulated_hosts: int | None,
    link: str | None,
    join: str | None,
    coordinator_host: str | None,
) -> list[str] | None:
    """start_local's arguments checked before anything starts (ConfigError); the hostfile's hosts, or None."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"nodes is {nodes!r}; launch at least 1 node")
    if not command:
        raise ConfigError("the command to launch is empty; give it after `--`")
    if isinstance(coordinator, str) and coordinator != "node0":
        raise ConfigError(
            f'coordinator={coordinator!r}: use True, False, "node0" (node 0\'s process runs it) or a '
            "factory called like pskv.membership.coordinator.Coordinator"
        )
    hosts = read_hostfile(hostfile) if hostfile is not None else None
    if emulated_hosts is not None or link is not None:  # before anything starts: root, ip, tc
        emulation.check(
            emulated_hosts,
            nodes,
            link,
            conflicts={
                "--hostfile": hostfile,
                "--join": join,
                "--coordinator-host": coordinator_host,
                "a coordinator in node 0": coordinator == "node0" or None,
            },
        )
    return hosts


def _environment(env: dict | None, echo: bool, **settings) -> tuple[dict[str, str], NodeConfig]:
    """The nodes' common environment (os.environ and `env`, without the per-node PSKV_*), and the
    NodeConfig it and `settings` make."""
    parent_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    if echo and terminal():  # the apps' "auto" progress draws a bar, which we relay (Cluster._bar)
        parent_env.update(PSKV_TERMINAL="1", COLUMNS=str(shutil.get_terminal_size().columns))
    for name in _PER_NODE_VARS:
        parent_env.pop(name, None)
    base = NodeConfig.from_env({k: v for k, v in parent_env.items() if k.startswith("PSKV_")}, **settings)
    return parent_env, base


def _start_coordinator(
    cluster: Cluster,
    coordinator: bool | str | CoordinatorFactory,
    base: NodeConfig,
    nodes: int,
    hosts: list[str] | None,
    coordinator_host: str | None,
) -> str | None:
    """The coordinator's address: started here (`cluster.coordinator`), or a free port for node 0's
    process to run it at ("node0"), or None (no coordinator: `join`, or False)."""
    if coordinator == "node0":  # node 0's process runs it, as under a launcher that runs none (e.g. slurm)
        host = coordinator_host or (hosts[0] if hosts else "127.0.0.1")
        return f"{host}:{_free_port(host)}"
    if coordinator is True or callable(coordinator):
        host = coordinator_host or ssh.coordinator_host(hosts)
        config = dataclasses.replace(base, num_nodes=nodes, host=host)
        cluster.coordinator = _coordinator(coordinator, config)
    return cluster.coordinator.address if cluster.coordinator is not None else None


def launch(
    nodes: int,
    command: list[str],
    *,
    threads: int = 1,
    hostfile: Path | None = None,
    coordinator_host: str | None = None,
    backups: int | None = None,
    restore: str | None = None,
    join: str | None = None,
    metrics: int | None = None,
    emulated_hosts: int | None = None,
    link: str | None = None,
    verbose: bool = False,
) -> int:
    """Run `command` on `nodes` nodes to completion, echoing their output; return the exit
    status (0 if every node exited 0). Ctrl-C or SIGTERM stops every node; then 128 + signal.
    `emulated_hosts`, `link`: see start_local; unset, they come from PSKV_HOSTS and PSKV_LINK
    (what `pskv run --hosts H --link RATE` sets).

    It prints (on stderr) one `[launcher]` line at the start: nodes, threads and the coordinator's
    address (with emulated hosts, a second with their map); with metrics on (`metrics`, or
    PSKV_METRICS_PORT) one with node 0's metrics URL and the `pskv top` command that watches them
    (and a run file that lets a bare `pskv top` find them: pskv.monitor.runs); with `verbose` and
    more than one node, one with the command that adds nodes while it runs (the coordinator's
    address and the secret file's path)."""
    if emulated_hosts is None and link is None:
        emulated_hosts, link = emulation.from_environ(os.environ)
    with console.interrupt_on_sigterm():
        try:
            with (
                start_local(
                    nodes,
                    command,
                    threads=threads,
                    hostfile=hostfile,
                    echo=True,
                    coordinator_host=coordinator_host,
                    backups=backups,
                    restore=restore,
                    join=join,
                    metrics=metrics,
                    emulated_hosts=emulated_hosts,
                    link=link,
                ) as cluster,
                console.dump_on_sigusr1(cluster),
            ):
                for line in console.start_lines(cluster, nodes, threads, verbose=verbose, joining=join is not None):
                    print(f"[launcher] {line}", file=sys.stderr, flush=True)
                run_file = console.register(cluster, command)
                try:
                    while True:
                        # bounded waits: a signal the OS delivers to another of our threads runs its
                        # Python handler only when the main thread wakes up, so it must wake up
                        with contextlib.suppress(TimeoutError):
                            return verdict.report(cluster, cluster.wait(timeout=POLL_INTERVAL * 4))  # root cause last
                finally:
                    if run_file is not None:
                        run_file.unlink(missing_ok=True)
        except KeyboardInterrupt as exc:
            signum = exc.args[0] if exc.args and isinstance(exc.args[0], int) else signal.SIGINT
            print(
                f"[launcher] interrupted by {signal.Signals(signum).name}; stopped all nodes",
                file=sys.stderr,
                flush=True,
            )
            return 128 + signum


def _free_port(host: str) -> int:
    """A port that is free on `host` now (for node 0's coordinator; a race with other programs is unlikely)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _coordinator(coordinator: Literal[True] | CoordinatorFactory, config: NodeConfig) -> Any:
    factory: CoordinatorFactory
    if coordinator is True:
        from ..membership.coordinator import Coordinator  # lazily: process tests need no coordinator

        factory = Coordinator
    else:
        factory = coordinator
    coord = factory(num_nodes=config.num_nodes, host=config.host, port=0, config=config)
    try:
        coord.start()
    except BaseException:
        coord.close()
        raise
    return coord
