"""benchmarks/bench_wire_hosts.py (issue 31 item 5) in its smallest form, so the script cannot rot: one
round of every figure between two emulated hosts (--insecure), pskv and raw pyzmq, printed with ratios
and targets (not how fast: speed lives in benchmarks/RESULTS.md). The table's layout is checked without
processes. The run needs root and iproute2 (network namespaces), as `pskv launch --hosts` does."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "benchmarks" / "bench_wire_hosts.py"
_CAN_EMULATE = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "tc"))


@pytest.fixture(scope="module")
def bw():
    spec = importlib.util.spec_from_file_location("bench_wire_hosts", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_table_ratios_and_targets(bw):
    """Ratios are pskv speed / raw speed (time figures inverted); targets are judged for --insecure only."""
    result = {"figures": [
        {"figure": "pull 1,000 keys x 64, round trip p50", "unit": "µs", "raw": [400.0, 500.0], "pskv": [500.0, 500.0]},
        {"figure": "push 100,000 x 64, GB/s", "unit": "GB/s", "raw": [0.2, 0.2], "pskv": [0.1, 0.3]},
        {"figure": "burst: 8 pull_async of 1 key, then wait all, ops/s", "unit": "ops/s", "raw": [100.0],
         "pskv": [50.0]}]}
    table = bw.table_of("insecure", result)
    assert "| pull 1,000 keys x 64, round trip p50 | 450 µs | 500 µs | 0.90 (0.80-1.00) | round trip within 1.3x " \
           "of raw: met |" in table
    assert "| push 100,000 x 64, GB/s | 0.20 GB/s | 0.20 GB/s | 1.00 (0.50-1.50) | >= 0.9x raw: met |" in table
    assert "| 100 ops/s | 50 ops/s | 0.50 (0.50-0.50) | >= 1.0x raw one message per op: missed |" in table
    assert "| 0.50 (0.50-0.50) | >= 1.0x raw one message per op |" in bw.table_of("curve", result)


@pytest.mark.skipif(not _CAN_EMULATE, reason="emulated hosts need root and iproute2's ip and tc")
@pytest.mark.timeout(150)
def test_one_round_between_two_emulated_hosts():
    """Every figure comes out with a number for raw pyzmq and for pskv, and the launch exits 0."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PSKV_")}, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, str(PATH), "--setups", "insecure", "--rounds", "1", "--budget", "0.05"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # SIGTERM first: the launcher then stops its nodes and removes its namespaces
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, out[-3000:]
    rows = re.findall(r"^\| (pull|push|8 outstanding|pskv pull|burst)(.*?) \| ([\d,.]+) \S+ \| ([\d,.]+) \S+ \| "
                      r"(\d+\.\d\d) \(", out, re.M)
    assert len(rows) == 9, out[-3000:]
    assert all(float(raw.replace(",", "")) > 0 and float(pskv.replace(",", "")) > 0 for _, _, raw, pskv, _ in rows)
