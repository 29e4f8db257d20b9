"""Small helpers shared by the test tiers (tests/ is on sys.path: pytest puts the folder of the
root conftest.py there). They keep the suite free of wall-clock assertions: a test waits for an
event with a deadline far above any healthy delay (a loaded machine only makes it wait longer,
never fail), and the deadline only turns a hang into a clear failure.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")

# Deadlines of the waits below: far above what a healthy run needs on a loaded 2-core machine,
# well below pytest-timeout (120 s by default, 60 s in the faster files), so a hang fails with
# the message of the wait that noticed it.
PATIENCE = 30.0


def wait_until(predicate: Callable[[], T], timeout: float = PATIENCE, what: str = "the condition",
               interval: float = 0.02) -> T:
    """Poll `predicate` until it returns something truthy and return that; fail after `timeout`
    seconds, saying `what` did not happen (a callable `what` is called for the message)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what() if callable(what) else what} did not happen within {timeout} s")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on just now (another process may take it
    before we bind it: callers that must be robust retry on 'already in use')."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def together(*fns: Callable[[], object], timeout: float = PATIENCE) -> list:
    """Run each fn in its own thread at once; return each one's result or the exception it raised."""
    results: list = [None] * len(fns)

    def body(i, fn):
        try:
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i, fn), name=f"test-together-{i}", daemon=True)
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"calls still running after {timeout} s"
    return results


class RecordingTransport:
    """Stands in for net.Transport under an Endpoint: records (rank, frames) instead of sending.

    Sends to a rank in `fail_to` raise TransportError, as a full or dead peer's would."""

    def __init__(self) -> None:
        self.sent: list = []
        self.ports: list[int] = []  # the port of each send in `sent` (0: the rank's inbox)
        self.fail_to: set[int] = set()

    def send(self, rank: int, frames: list, *, copy: bool = False, port: int = 0) -> None:
        from pskv.errors import TransportError
        if rank in self.fail_to:
            raise TransportError(f"sending to node {rank} timed out")
        self.sent.append((rank, frames))
        self.ports.append(port)

    def reply_box(self):
        return None  # no thread has a reply box: replies come through the inbox


def recording_endpoint(rank: int, tracker=None, cluster: int = 7):
    """(Endpoint of node `rank` over a RecordingTransport, the transport)."""
    from pskv.net.endpoint import Endpoint
    from pskv.net.requests import RequestTracker
    transport = RecordingTransport()
    return Endpoint(rank, transport, tracker or RequestTracker(), lambda: cluster), transport


def replay_pushes(updater: str, nodes: int, most: int):
    """(most + 1,) float32 the first column of a (1, nodes) row of `updater` after m pushes of a 1 there
    (m = 0..most), applied one by one: what a row's column must be after m acknowledged pushes."""
    import numpy as np
    import pskv
    up = pskv.updaters.get(updater)
    row = np.zeros((1, nodes), np.float32)
    state = np.zeros((1, up.state_width(nodes)), np.float32)
    up.init_state(state)
    g = np.zeros((1, nodes), np.float32)
    g[0, 0] = 1.0
    values = [row[0, 0]]
    for _ in range(most):
        up.apply(row, state, np.zeros(1, np.int64), g)
        values.append(row[0, 0])
    return np.array(values, np.float32)


def wait_or_dump(cluster, timeout: float, *extra: tuple) -> int:
    """cluster.wait(timeout); on a timeout, every live node logs its debug_state (SIGUSR1) and the
    assertion shows every node's log tail; `extra` are (Popen, log path) of nodes started apart."""
    import os
    import signal
    import time
    try:
        return cluster.wait(timeout=timeout)
    except TimeoutError:
        for pid in cluster.alive_pids() + [proc.pid for proc, _ in extra if proc.poll() is None]:
            os.kill(pid, signal.SIGUSR1)
        time.sleep(2)
        raise AssertionError(cluster.logs_tail(80) + "".join(log.read_text()[-8000:] for _, log in extra)) from None
