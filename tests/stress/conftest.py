"""Every stress test runs beside a CPU-bound process, so the cluster's threads compete for the cores."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture(autouse=True)
def cpu_burner():
    """A `while True: pass` process for the duration of the test; killed by its PID afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
