"""What `pskv bench` prints: the cells as a table, authentication side by side, the targets of the
performance model, and the machine it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from .cells import Result


# ---- reporting ----------------------------------------------------------------------------------
def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f}"


def table(results: list[Result]) -> str:
    """The results as a markdown table."""
    us = lambda s: "" if s is None else f"{s * 1e6:,.0f}"  # noqa: E731
    head = ("op", "where", "mode", "n_keys", "dim", "keys/s", "GB/s", "p50 µs", "p99 µs", "x numpy", "reps")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 3 else "--:" for i in range(len(head))) + "|"]
    order = {"numpy": 0, "local": 1, "remote": 2, "remote+auth": 3}
    for r in sorted(results, key=lambda r: (r.dim, r.n, r.op, order[r.where])):
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(
            f"| {r.op} | {r.where} | {r.mode} | {r.n:,} | {r.dim} | {_si(r.keys_per_s)} | "
            f"{r.gb_per_s:.3f} | {us(r.p50)} | {us(r.p99)} | {ratio} | {r.reps} |"
        )
    return "\n".join(lines)


def auth_table(results: list[Result]) -> str:
    """Each remote cell next to its authenticated twin: p50 round trip, GB/s, and speed with / without."""
    plain = {(r.op, r.mode, r.n, r.dim): r for r in results if r.where == "remote"}
    lines = [
        "| op | mode | n_keys | dim | p50 µs | p50 µs auth | GB/s | GB/s auth | auth / plain speed |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for a in sorted((r for r in results if r.where == "remote+auth"), key=lambda r: (r.dim, r.n, r.op, r.mode)):
        p = plain.get((a.op, a.mode, a.n, a.dim))
        if p is None:
            continue
        us = lambda r: "" if r.p50 is None else f"{r.p50 * 1e6:,.0f}"  # noqa: E731
        lines.append(
            f"| {a.op} | {a.mode} | {a.n:,} | {a.dim} | {us(p)} | {us(a)} | {p.gb_per_s:.3f} | "
            f"{a.gb_per_s:.3f} | {p.seconds / a.seconds:.2f} |"
        )
    return "\n".join(lines)


def targets(results: list[Result]) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met?) for each target of the performance model; None: not measured."""
    out = []

    def find(op, where, mode, n, dim):
        return [r for r in results if (r.op, r.where, r.n, r.dim) == (op, where, n, dim) and r.mode.startswith(mode)]

    local = [r for r in results if r.where == "local" and r.n >= 10_000]
    for op in ("pull", "push"):
        rs = [r for r in local if r.op == op]
        got = ", ".join(f"{r.n:,}x{r.dim}: {r.ratio:.2f}" for r in rs)
        out.append(
            (
                f"local {op} of >= 10,000 keys >= 0.5x numpy",
                got or "not measured",
                all(r.ratio is not None and r.ratio >= 0.5 for r in rs) if rs else None,
            )
        )
    p50s = [
        (r.dim, r.p50)
        for r in results  # (every round-trip cell has its p50)
        if (r.op, r.where, r.mode, r.n) == ("pull", "remote", "rtt", 1_000) and r.p50 is not None
    ]
    out.append(
        (
            "remote 1,000-key pull round trip p50 <= 300 µs",
            ", ".join(f"dim {dim}: {p50 * 1e6:.0f} µs" for dim, p50 in p50s) or "not measured",
            all(p50 <= 300e-6 for _, p50 in p50s) if p50s else None,
        )
    )
    for op in ("pull", "push"):
        for dim, goal in ((64, "values >= 1 GB/s"), (1, ">= 60 M keys/s")):
            rs = find(op, "remote", "window", 100_000, dim)
            rtt = find(op, "remote", "rtt", 100_000, dim)
            if not rs:
                out.append((f"remote 100,000-key {op}, dim {dim}: {goal}", "not measured", None))
                continue
            r = rs[0]
            ok = r.gb_per_s >= 1.0 if dim == 64 else r.keys_per_s >= 60e6
            got = f"window: {r.gb_per_s:.2f} GB/s, {_si(r.keys_per_s)} keys/s"
            if rtt:
                got += f"; one at a time: {rtt[0].gb_per_s:.2f} GB/s, {_si(rtt[0].keys_per_s)} keys/s"
            out.append((f"remote 100,000-key {op}, dim {dim}: {goal}", got, ok))
    return out


def machine() -> str:
    import numba
    import zmq

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}; load {load_average()}; python "
        f"{platform.python_version()}, numpy {np.__version__}, pyzmq {zmq.__version__} (libzmq "
        f"{zmq.zmq_version()}), numba {numba.__version__}"
    )


def load_average() -> str:
    """The 1-minute load average: other busy processes make every figure here slower and noisier."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def revision() -> str:
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"
