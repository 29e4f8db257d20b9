"""What a node tells about itself when something is wrong or someone asks: its counters
(`Report.stats`, and the metrics exporter's `Report.sample`), what it waits for
(`Report.debug_state`), the requests that made no progress (`Report.expire`, pskv-server), the
SIGUSR1 dump of every live node's `debug_state()` and of every thread's Python stack, the exit
hook of a node never shut down, the one line an uncaught NodeFailure prints, the RequestStalled
error of a request without progress, and this process's memory.

`live` holds the nodes of this process weakly; `Node.__init__` adds itself, `_teardown` removes it.
A `Report` reads the node's parts, handed to it, and never blocks on the cluster.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import signal
import sys
import threading
import traceback
import weakref

from ..catalog import Catalog
from ..config import NodeConfig
from ..consistency.clocks import Clocks
from ..errors import ClosedError, NodeFailure, RequestStalled
from ..membership.barrier import LocalBarrier
from ..membership.client import CoordinatorClient
from ..membership.health import Health
from ..membership.view import View
from ..membership.waiting import Patience
from ..net.dispatch import Dispatcher
from ..net.endpoint import Endpoint
from ..net.requests import RequestTracker
from ..net.transport import Transport
from ..server.serve import Server
from .elastic import MembershipChanges

log = logging.getLogger(__name__)

live: weakref.WeakSet = weakref.WeakSet()  # for the SIGUSR1 dump
_dump_installed = False
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/pskv: frames in it are pskv's


def install_dump_handler() -> None:
    """SIGUSR1 logs every live node's debug_state() to stderr (main thread only; never replaces
    a handler the program installed itself)."""
    global _dump_installed  # noqa: PLW0603 - one handler per process, whichever node installs it
    if _dump_installed or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        return
    if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
        return
    signal.signal(signal.SIGUSR1, dump)
    _dump_installed = True


def dump(signum=None, frame=None) -> None:
    """Every live node's debug_state(), then every thread's Python stack (what each one waits in)."""
    for node in list(live):
        print(node.debug_state(), file=sys.stderr, flush=True)
    print(thread_stacks(), file=sys.stderr, flush=True)


def thread_stacks() -> str:
    """The Python stack of every thread of this process, the innermost call last (as a traceback)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = [f"pskv process {os.getpid()}: Python stacks of {len(names)} thread(s), innermost call last"]
    for ident, top in sys._current_frames().items():
        lines.append(f"  thread {names.get(ident, '?')!r} ({ident}):")
        lines += ["    " + part for entry in traceback.format_stack(top) for part in entry.rstrip().splitlines()]
    return "\n".join(lines)


def install_excepthook(full: bool) -> None:
    """An uncaught NodeFailure (the cluster stopped: another node failed, a collective or request
    stalled) prints one line, `pskv.NodeFailure: <what happened> (in FILE, line N)` naming the
    caller's own line, instead of a traceback through pskv's internals: the node that caused it
    prints the real traceback, and the launcher names it last. `full` (PSKV_FULL_TRACEBACKS=1)
    keeps Python's traceback. Other exceptions, and a hook the program set itself, are untouched."""
    if full or sys.excepthook is not sys.__excepthook__:
        return
    sys.excepthook = _excepthook


def _excepthook(exc_type, exc, tb) -> None:
    if not isinstance(exc, NodeFailure):
        sys.__excepthook__(exc_type, exc, tb)
        return
    print(one_line(exc, tb), file=sys.stderr, flush=True)


def one_line(exc: BaseException, tb) -> str:
    """`pskv.NodeFailure: message (in FILE, line N)`: the innermost frame outside pskv, if any."""
    user = [f for f in traceback.extract_tb(tb) if not os.path.abspath(f.filename).startswith(_PACKAGE + os.sep)]
    where = f" (in {user[-1].filename}, line {user[-1].lineno})" if user else ""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}: {exc}{where}"


def exit_hook(health, abort, teardown) -> None:
    """At interpreter exit, a node that was never shut down tells the others it is gone (`abort`,
    `teardown`: weak references to the node's own methods, so that the hook does not keep it alive)."""
    abort_, teardown_ = abort(), teardown()
    if abort_ is not None and teardown_ is not None and not health.closed:
        abort_("process exited without node.shutdown()", ClosedError("process exiting"))
        teardown_()


def stalled(
    desc: str,
    age: float,
    idle: float,
    remaining: int,
    total: int,
    ranks: list[int],
    seen: str,
    *,
    timeout: float,
    address,
) -> RequestStalled:
    """The error of a request that made no progress for `timeout` s (RequestTracker.expire makes it)."""
    where = f"sent to node(s) {ranks}" if ranks else "not sent to any node"
    return RequestStalled(
        f"{desc}: no progress for {idle:.1f} s (request_timeout {timeout:g} s, age "
        f"{age:.1f} s), {remaining} of {total} key(s) unanswered, {where}; last seen: {seen}. The node(s) may "
        "be hung, overloaded or unreachable: their logs (or SIGUSR1 to them) show what they wait for; raise "
        "PSKV_REQUEST_TIMEOUT if they are only slow",
        ranks[0] if ranks else -1,
        address(ranks[0]) if ranks else "",
        desc,
        ranks,
    )


def clock_waits(rank: int, every: float, clocks, client):
    """Clocks.waiting: a Patience for a pull that waits for the global clock to reach `needed`,
    naming the nodes whose applied clock the coordinator last saw below it."""

    def patience(needed: int, timeout: float | None) -> Patience:
        return Patience(
            every,
            timeout,
            lambda: (
                f"node {rank}: a pull still waits for the global clock to reach {needed} (it is {clocks.global_clock}; "
                f"behind: {client.behind(needed)})",
                ": a worker is more than the staleness behind, or did not call clock()",
            ),
        )

    return patience


def rss_now() -> int:
    """This process's resident memory now (VmRSS), or 0 where /proc is not there."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Report:
    """A node's counters, its wait state, and pskv-server's expiry of stalled requests."""

    def __init__(
        self,
        *,
        config: NodeConfig,
        view: View,
        health: Health,
        transport: Transport,
        dispatcher: Dispatcher,
        endpoint: Endpoint,
        tracker: RequestTracker,
        server: Server,
        client: CoordinatorClient,
        barrier: LocalBarrier,
        clocks: Clocks,
        catalog: Catalog,
        changes: MembershipChanges,
    ) -> None:
        self.rank, self.config, self.view, self.health = view.rank, config, view, health
        self.transport, self.dispatcher, self.endpoint, self.tracker = transport, dispatcher, endpoint, tracker
        self.server, self.client, self.barrier, self.clocks = server, client, barrier, clocks
        self.catalog, self.changes = catalog, changes
        self._next_expiry = 0.0  # pskv-server: when to look for stalled requests next

    def dropped(self) -> int:
        """Messages dropped as garbage or from another cluster (malformed packed frames count once)."""
        return self.dispatcher.dropped + self.transport.dropped + self.endpoint.dropped

    def stats(self) -> dict:
        """node.stats(): per table calls, local and remote keys; messages and bytes sent to other nodes."""
        tables = {
            s.spec.name: {
                **s.counters(),
                "forwards": s.shard.forwards,
                "relocated_in": s.shard.relocated_in,
                "replica_syncs": s.shard.replicas.syncs if s.shard.replicas else 0,
            }
            for s in self.catalog.tables()
        }
        server, clocks, transport = self.server, self.clocks, self.transport
        return {
            "rank": self.rank,
            "epoch": self.view.epoch,
            "members": self.view.members(),
            "tables": tables,
            "messages_sent": transport.messages_sent,
            "bytes_sent": transport.bytes_sent,
            "requests_served": server.requests,
            "request_errors": server.errors,
            "dropped": self.dropped(),
            "fenced": self.dispatcher.fenced,
            "forwards": server.forwards,
            "relocated_in": server.relocation.relocated_in,
            "declined": server.relocation.declined,
            "clock": clocks.global_clock,
            "clock_waits": clocks.waits,
            "clock_wait_seconds": round(clocks.wait_seconds, 6),
            "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # (Linux: KiB)
            "rss_bytes": rss_now(),
        }

    def sample(self) -> dict:
        """stats() and what only the metrics exporter reads (pskv.monitor): request latencies, queue
        depths, membership changes. Any thread (a scrape's); never blocks on the cluster."""
        return {
            **self.stats(),
            "latency": self.tracker.latency(),
            "messages_received": self.transport.messages_received,
            "bytes_received": self.transport.bytes_received,
            "pending_requests": len(self.tracker),
            "deferred_requests": self.server.relocation.waiting(),
            "held_messages": self.dispatcher.held(),
            "membership_changes": self.changes.count,
            "failed": self.health.has_failed(),
            "staleness": {s.spec.name: s.consistency.staleness for s in self.catalog.tables()},
        }

    def expire(self, now: float) -> None:
        """pskv-server: fail requests without progress for request_timeout; log why, once per batch."""
        if now < self._next_expiry:
            return
        timeout = self.config.request_timeout
        self._next_expiry = now + min(1.0, timeout / 4)
        stalled_ = self.tracker.expire(
            now, timeout, functools.partial(stalled, timeout=timeout, address=self.view.address)
        )
        if stalled_:
            log.error(
                "node %d: %d request(s) made no progress for %g s (PSKV_REQUEST_TIMEOUT); the first: %s\n%s",
                self.rank,
                len(stalled_),
                timeout,
                stalled_[0],
                self.debug_state(),
            )

    def debug_state(self) -> str:
        """What this node waits for, as text: outstanding and deferred requests, collectives, clocks,
        worker barrier, queues. Any thread; never blocks on the cluster."""
        lines = [f"pskv node {self.rank}/{self.config.num_nodes} ({self.health!r}) at {self.transport.address}"]
        lines += ["  " + line for line in self.tracker.describe()]
        lines += ["  " + line for line in self.server.describe()]
        lines += ["  " + line for line in self.client.describe()]
        lines.append(f"  {self.barrier!r}")
        lines.append(f"  {self.clocks!r} waits={self.clocks.waits}")
        lines += [f"  table {s.spec.name!r}: {' '.join(s.parts())}" for s in self.catalog.tables() if s.parts()]
        lines.append(f"  transport: {self.transport!r}; early messages held: {self.dispatcher.held()}")
        return "\n".join(lines)
