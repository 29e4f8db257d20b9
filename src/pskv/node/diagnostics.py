"""What a node tells about itself when something is wrong or someone asks: the SIGUSR1 dump of
every live node's `debug_state()` and of every thread's Python stack, the exit hook of a node
never shut down, the one line an uncaught NodeFailure prints, the RequestStalled error of a
request without progress, and this process's memory.

`live` holds the nodes of this process weakly; `Node.__init__` adds itself, `_teardown` removes it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
import weakref

from ..errors import ClosedError, NodeFailure, RequestStalled
from ..membership.waiting import Patience

live: "weakref.WeakSet" = weakref.WeakSet()  # for the SIGUSR1 dump
_dump_installed = False
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/pskv: frames in it are pskv's


def install_dump_handler() -> None:
    """SIGUSR1 logs every live node's debug_state() to stderr (main thread only; never replaces
    a handler the program installed itself)."""
    global _dump_installed
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


def exit_hook(ref) -> None:
    """At interpreter exit, a node that was never shut down tells the others it is gone."""
    node = ref()
    if node is not None and not node.health.closed:
        node._abort("process exited without node.shutdown()", ClosedError("process exiting"))
        node._teardown()


def stalled(desc: str, age: float, idle: float, remaining: int, total: int, ranks: list[int], seen: str, *,
            timeout: float, address) -> RequestStalled:
    """The error of a request that made no progress for `timeout` s (RequestTracker.expire makes it)."""
    where = f"sent to node(s) {ranks}" if ranks else "not sent to any node"
    return RequestStalled(
        f"{desc}: no progress for {idle:.1f} s (request_timeout {timeout:g} s, age "
        f"{age:.1f} s), {remaining} of {total} key(s) unanswered, {where}; last seen: {seen}. The node(s) may "
        "be hung, overloaded or unreachable: their logs (or SIGUSR1 to them) show what they wait for; raise "
        "PSKV_REQUEST_TIMEOUT if they are only slow", ranks[0] if ranks else -1,
        address(ranks[0]) if ranks else "", desc, ranks)


def clock_waits(rank: int, every: float, clocks, client):
    """Clocks.waiting: a Patience for a pull that waits for the global clock to reach `needed`,
    naming the nodes whose applied clock the coordinator last saw below it."""
    def patience(needed: int, timeout: float | None) -> Patience:
        return Patience(every, timeout, lambda: (
            f"node {rank}: a pull still waits for the global clock to reach {needed} (it is {clocks.global_clock}; "
            f"behind: {client.behind(needed)})",
            ": a worker is more than the staleness behind, or did not call clock()"))
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
