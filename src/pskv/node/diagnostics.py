"""What a node tells about itself when something is wrong or someone asks: the SIGUSR1 dump of
every live node's `debug_state()`, the exit hook of a node never shut down, the RequestStalled
error of a request without progress, and this process's memory.

`live` holds the nodes of this process weakly; `Node.__init__` adds itself, `_teardown` removes it.
"""

from __future__ import annotations

import signal
import sys
import threading
import weakref

from ..errors import ClosedError, RequestStalled

live: "weakref.WeakSet" = weakref.WeakSet()  # for the SIGUSR1 dump
_dump_installed = False


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
    for node in list(live):
        print(node.debug_state(), file=sys.stderr, flush=True)


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
