"""What `launch()` says and which signals it takes: its `[launcher]` lines at the start, the run file
that lets a bare `pskv top` find the nodes, SIGTERM as Ctrl-C, and SIGUSR1 passed on to the nodes.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from pathlib import Path

from .cluster import Cluster


def start_lines(cluster: Cluster, nodes: int, threads: int, *, verbose: bool, joining: bool) -> list[str]:
    """What launch() says at the start: nodes and coordinator; the emulated hosts; metrics; how to join."""
    where = ("joining the cluster at " if joining else "coordinator at ") + (cluster.coordinator_address or "?")
    lines = [
        f"{nodes} node{'s' if nodes != 1 else ''} x {threads} thread{'s' if threads != 1 else ''}, {where}"
        + (f", backups {cluster.backups}" if cluster.backups else "")
    ]
    if cluster.hosts is not None:
        lines.append(cluster.hosts.describe())
    if cluster.metrics_port:
        urls, host = cluster.metrics_urls(), cluster.node_host(0)
        watch = f"pskv top --metrics-port {cluster.metrics_port}" + (f" --host {host}" if host != "127.0.0.1" else "")
        spread = f" (node r at port {cluster.metrics_port} + r)" if len(urls) > 1 else ""
        lines.append(f"metrics at {urls[0]}{spread}; watch them with `pskv top` (or `{watch} --nodes {len(urls)}`)")
    if verbose and nodes > 1 and cluster.coordinator is not None and not cluster.backups and cluster.hosts is None:
        secret = f"PSKV_SECRET_FILE={shlex.quote(cluster.secret_file)} " if cluster.secret_file else ""
        lines.append(
            f"add nodes while it runs with `{secret}pskv launch -n K --join {cluster.coordinator_address} -- CMD`"
        )
    return lines


def register(cluster: Cluster, command: list[str]) -> Path | None:
    """The run file that lets a bare `pskv top` find these nodes (with metrics on), or None."""
    if not cluster.metrics_port:
        return None
    from ..monitor import runs

    return runs.register(cluster.metrics_urls(), shlex.join(command), cluster.metrics_port)


@contextlib.contextmanager
def interrupt_on_sigterm():
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
def dump_on_sigusr1(cluster: Cluster):
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
