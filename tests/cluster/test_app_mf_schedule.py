"""mf's `--schedule auto` (the default, issue 31): dsgd with --localize on more than one node, free on one
node or where dsgd does not go; on real clusters the default reaches exactly the factors of the explicit flags."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pskv.apps import mf

DATA = ("--max-ratings", "20000", "--epochs", "2", "--rank", "8", "--progress", "none")


def _args(*argv: str) -> argparse.Namespace:
    return mf._parser().parse_args(list(argv))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("argv", "nodes", "backups", "want"),
    [
        ((), 2, 0, ("dsgd", True, 0.0)),
        ((), 4, 0, ("dsgd", True, 0.0)),
        ((), 1, 0, ("free", False, None)),
        (("--localize",), 1, 0, ("free", True, None)),  # the user's --localize stays, with pskv's lease
        ((), 2, 1, ("free", False, None)),  # dsgd does not survive a dead node
        (("--intent",), 2, 0, ("free", False, None)),
        (("--replicate", "10"), 2, 0, ("free", False, None)),
        (("--storage", "disk", "--storage-path", "x"), 2, 0, ("free", False, None)),
        (("--consistency", "ssp:2"), 2, 0, ("free", False, None)),
        (("--lease", "3"), 2, 0, ("dsgd", True, 3.0)),  # the user's lease stays
        (("--schedule", "free"), 2, 0, ("free", False, None)),
        (("--schedule", "dsgd"), 2, 0, ("dsgd", False, None)),  # explicit dsgd without --localize: as asked
        (("--schedule", "dsgd", "--localize"), 2, 0, ("dsgd", True, 0.0)),
        (("--schedule", "ccd"), 2, 0, ("ccd", False, None)),
    ],
)
def test_auto_schedule_picks_dsgd_with_localize_on_several_nodes_only(argv, nodes, backups, want):
    args = _args(*argv)
    mf.auto_schedule(args, nodes, backups)
    assert (args.schedule, args.localize, args.lease) == want


def _run(out: Path, nodes: int, *flags: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pskv", "run", "mf", "--nodes", str(nodes), "--", *DATA, "--stats", "--out", str(out),
         *flags], capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL,
        check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _factors(out: Path) -> tuple[np.ndarray, np.ndarray]:
    return np.load(out / "item_factors.npy"), np.load(out / "user_factors.npy")


def _relocated(stdout: str) -> dict[int, int]:
    """Item rows moved to each node (its stats line after training)."""
    stats = [json.loads(line.split("@@stats ", 1)[1]) for line in stdout.splitlines() if "@@stats " in line]
    return {s["rank"]: s["tables"]["mf-items"]["relocated_in"] for s in stats}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_default_on_two_nodes_is_dsgd_with_localize_exactly(tmp_path):
    """2 nodes x 1 thread, MovieLens-100K slice: the default writes the very factors of `--schedule dsgd
    --localize --lease 0` (every access in a sub-epoch local, the blocks disjoint: one order of the same
    adds), says so in its header, and moves each node's other block there once per epoch and its own back
    once per epoch after the first: (2 x epochs - 1) moves of a half each. On one node the default is free."""
    auto = _run(tmp_path / "auto", 2)
    _run(tmp_path / "dsgd", 2, "--schedule", "dsgd", "--localize", "--lease", "0")
    assert "schedule dsgd with --localize (auto; --schedule free for the Hogwild order)" in auto
    for a, b in zip(_factors(tmp_path / "auto"), _factors(tmp_path / "dsgd"), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert json.loads((tmp_path / "auto" / "meta.json").read_text())["schedule"] == "dsgd"
    n_items = len(_factors(tmp_path / "auto")[0])
    half = {0: -(-n_items // 2), 1: n_items - -(-n_items // 2)}  # block 0: [0, ceil(n / 2)), as the table's halves
    assert _relocated(auto) == {0: 2 * half[1] + half[0], 1: 2 * half[0] + half[1]}
    one = _run(tmp_path / "one", 1)
    _run(tmp_path / "free", 1, "--schedule", "free")
    assert re.search(r"1 node\(s\) x 1 thread\(s\), 2 epochs, schedule free$", one, re.M), one[-2000:]
    for a, b in zip(_factors(tmp_path / "one"), _factors(tmp_path / "free"), strict=True):
        assert np.array_equal(a, b)
