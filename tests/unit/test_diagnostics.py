"""node.diagnostics: the SIGUSR1 dump shows every thread's Python stack; an uncaught NodeFailure prints
one line naming the caller's own line, not pskv's frames (issue 33)."""

from __future__ import annotations

import sys
import threading

import pytest

from pskv.errors import NodeFailure
from pskv.node import diagnostics

pytestmark = pytest.mark.timeout(30)


def _park_here(stop: threading.Event) -> None:
    stop.wait(20)


def test_thread_stacks_show_each_threads_python_stack():
    """A parked thread appears by name with the function it waits in; so does the calling thread."""
    stop = threading.Event()
    t = threading.Thread(target=_park_here, args=(stop,), name="test-parked", daemon=True)
    t.start()
    try:
        text = diagnostics.thread_stacks()
    finally:
        stop.set()
        t.join(5)
    assert "thread 'test-parked'" in text and "in _park_here" in text and "stop.wait(20)" in text, text
    assert "thread 'MainThread'" in text and "in test_thread_stacks_show_each_threads_python_stack" in text, text


def test_dump_prints_the_stacks_after_the_nodes(capsys):
    """dump() (the SIGUSR1 handler) ends with the stacks of this process's threads."""
    diagnostics.dump()
    err = capsys.readouterr().err
    assert "Python stacks of" in err and "in test_dump_prints_the_stacks_after_the_nodes" in err, err


def _fail() -> None:
    raise NodeFailure("node 1 (127.0.0.1:5) failed: it died; this cluster cannot continue without it", 1)


def test_node_failure_prints_one_line_with_the_callers_line(capsys):
    """The hook prints `pskv.NodeFailure: message (in FILE, line N)`, N the raising line outside pskv."""
    try:
        _fail()
    except NodeFailure as exc:
        diagnostics._excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    line = _fail.__code__.co_firstlineno + 1
    assert err == (f"pskv.NodeFailure: node 1 (127.0.0.1:5) failed: it died; this cluster cannot continue without "
                   f"it (in {__file__}, line {line})\n")


def test_other_exceptions_keep_pythons_traceback(capsys):
    """A ValueError (the user's own error: the root cause) prints its whole traceback."""
    try:
        raise ValueError("bad batch 7")
    except ValueError as exc:
        diagnostics._excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and err.endswith("ValueError: bad batch 7\n"), err


def test_install_keeps_a_hook_the_program_set_and_full_tracebacks(monkeypatch):
    """A program's own excepthook stays; PSKV_FULL_TRACEBACKS=1 (full=True) installs nothing."""
    mine = lambda *args: None  # noqa: E731
    monkeypatch.setattr(sys, "excepthook", mine)
    diagnostics.install_excepthook(False)
    assert sys.excepthook is mine
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    diagnostics.install_excepthook(True)
    assert sys.excepthook is sys.__excepthook__
    diagnostics.install_excepthook(False)
    assert sys.excepthook is diagnostics._excepthook
