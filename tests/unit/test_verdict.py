"""launch.verdict: the launcher's last line after a failure names the root cause (issue 33)."""

from __future__ import annotations

from pskv.launch import verdict

PRIMARY = """step 1
Traceback (most recent call last):
  File "/tmp/train.py", line 7, in <module>
    raise ValueError("bad batch 7")
ValueError: bad batch 7
"""
SECONDARY = ("pskv.NodeFailure: node 1 (127.0.0.1:5) failed: node 1 left with ValueError('bad batch 7'); this "
             "cluster cannot continue without it (in /tmp/train.py, line 4)\n")
CHAINED = """Traceback (most recent call last):
  File "a.py", line 1, in <module>
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in <module>
RuntimeError: while loading
  more detail
"""


def test_exception_line_of_a_traceback_a_one_liner_and_none():
    """The last exception's `Type: message` (first line of it), a pskv one-liner, or None."""
    assert verdict.exception_line(PRIMARY) == "ValueError: bad batch 7"
    assert verdict.exception_line(SECONDARY) == SECONDARY.rstrip("\n")
    assert verdict.exception_line(CHAINED) == "RuntimeError: while loading"
    assert verdict.exception_line("loss 0.3\nvalue: 4\n") is None


def test_root_cause_skips_nodes_that_failed_because_another_did():
    """Node 0 exited first with the consequence; node 1's ValueError is the root cause."""
    outputs = {0: SECONDARY, 1: PRIMARY}
    assert verdict.root_cause([(0, 1), (1, 1)], outputs.get) == "node 1 (exit status 1): ValueError: bad batch 7"


def test_root_cause_of_consequences_only_and_of_a_killed_node():
    """Only consequences: the first failed node; a killed node without a traceback says so."""
    assert verdict.root_cause([(2, 1)], {2: SECONDARY}.get).startswith("node 2 (exit status 1): pskv.NodeFailure: node 1")
    assert verdict.root_cause([(1, -9), (0, 1)], {1: "step 3\n", 0: SECONDARY}.get) == (
        "node 1 (killed by SIGKILL): no Python exception; it was killed (out of memory? see `dmesg`), or stopped by "
        "the launcher")
