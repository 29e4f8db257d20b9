"""What a user sees under `pskv run`: a live bar on a terminal that log lines never break, no bar frames
in a file, the last frame once with `--progress bar` into a file, and `pskv run APP --help`."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

MF = ["-m", "pskv", "run", "mf", "--nodes", "2", "--", "--data", "ml-100k", "--max-ratings", "10000",
      "--epochs", "3", "--rank", "4"]


def _on_a_terminal(argv: list[str], timeout: float = 120) -> str:
    """Run argv with stdout and stderr on a pseudo-terminal; what it wrote there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, close_fds=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the other side closed (Linux: EIO)
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def test_a_terminal_shows_a_live_bar_that_lines_never_break():
    out = _on_a_terminal([sys.executable, *MF])
    pieces = [p for line in out.split("\n") for p in line.split("\r\x1b[K")]
    bars = [p for p in pieces if "%|" in p]
    assert bars, out[-2000:]  # drawn in place: every frame after "\r" + clear-line
    assert not [p for p in pieces if "%|" in p and "[node" in p], out[-2000:]  # never a line glued to a frame
    epochs = [p.strip() for p in pieces if "train_rmse" in p]
    assert [e.split()[3] for e in epochs] == ["1", "2", "3"] and all(e.startswith("[node 0] epoch") for e in epochs)
    assert "@@pskv-bar" not in out


def test_a_file_gets_no_bar_frames_and_bar_mode_its_last_frame_once(tmp_path):
    auto = subprocess.run([sys.executable, *MF], capture_output=True, text=True, timeout=120)
    assert auto.returncode == 0, auto.stderr[-2000:]
    assert "\r" not in auto.stdout and "@@pskv-bar" not in auto.stdout and "%|" not in auto.stdout
    bar = subprocess.run([sys.executable, *MF, "--progress", "bar"], capture_output=True, text=True, timeout=120)
    assert bar.returncode == 0, bar.stderr[-2000:]
    frames = [line for line in bar.stdout.splitlines() if "ratings/s]" in line]  # tqdm's "[time, rate]"
    assert len(frames) == 1 and "\r" not in bar.stdout and "@@pskv-bar" not in bar.stdout, bar.stdout[-2000:]


def test_run_app_help_shows_the_apps_options():
    mf = subprocess.run([sys.executable, "-m", "pskv", "run", "mf", "--help"], capture_output=True, text=True,
                        timeout=60)
    assert mf.returncode == 0 and "--rank" in mf.stdout and "--schedule" in mf.stdout and "--nodes N" in mf.stdout
    assert "[node" not in mf.stdout  # the app's own parser, in this process: no cluster started
    listing = subprocess.run([sys.executable, "-m", "pskv", "run", "--help"], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode == 0 and "apps: mf, kge, word2vec" in listing.stdout
    unknown = subprocess.run([sys.executable, "-m", "pskv", "run", "nope", "--help"], capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 2
