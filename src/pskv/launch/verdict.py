"""The last line of a failed run: which node failed first, with which exception and message (the
root cause, as torchrun's "Root Cause (first observed failure)"), so the user need not scroll up
through the other nodes' consequences of it.

The launcher knows each node's exit status and what it printed. A node that failed because
another did prints `pskv.NodeFailure: ...` (node.diagnostics: one line, no traceback): that is a
consequence, not a cause. The root cause is the first failed node (the watcher's order) whose
error is not such a consequence; if every failed node's is, the first failed node.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable

_TRACEBACK = "Traceback (most recent call last):"
_PSKV_LINE = re.compile(r"^pskv\.\w+: ")  # node.diagnostics.one_line, printed without a traceback
_CONSEQUENCES = ("pskv.NodeFailure",)  # another node failed (its subclasses name a stall or a fence: causes)


def exception_line(output: str) -> str | None:
    """The last Python exception a node printed, `Type: message` (the message's first line), or None."""
    lines = output.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == _TRACEBACK:
            # the exception line is the first unindented line after the frames (chained ones come earlier)
            return next((line for line in lines[i + 1 :] if line and not line[0].isspace()), None)
        if _PSKV_LINE.match(lines[i]):
            return lines[i]
    return None


def _status(code: int) -> str:
    if code > 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def root_cause(failed: list[tuple[int, int]], output: Callable[[int], str]) -> str:
    """One line naming the root cause among `failed` (rank, exit code) in the order they failed:
    `node 1 (exit status 1): ValueError: bad batch 7`. `output(rank)`: what that node printed."""
    errors = {rank: exception_line(output(rank)) for rank, _ in failed}
    causes = [
        (rank, code)
        for rank, code in failed
        if (error := errors[rank]) is None or not error.startswith(tuple(c + ":" for c in _CONSEQUENCES))
    ]
    rank, code = (causes or failed)[0]
    error = errors[rank]
    if error is None:
        error = (
            "no Python exception; it was killed (out of memory? see `dmesg`), or stopped by the launcher"
            if code < 0
            else "no Python exception; see its last lines above"
        )
    return f"node {rank} ({_status(code)}): {error}"


def report(cluster, code: int) -> int:
    """After a run whose status is `code`: unless it is 0, print `[launcher] root cause: ...` (to
    stderr, as the launcher's last line) for `cluster` (a launch.Cluster). Returns `code`."""
    if code == 0:
        return code
    failed = []
    first = cluster.failure  # (rank, code) the watcher saw fail first
    if first is not None:
        failed.append(first)
    for rank, status in cluster.exit_codes():
        if status not in (None, 0) and (first is None or rank != first[0]):
            failed.append((rank, status))
    if failed:
        print(f"[launcher] root cause: {root_cause(failed, cluster.output)}", file=sys.stderr, flush=True)
    return code
