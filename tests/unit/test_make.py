"""The Makefile's pytest command lines are ones pytest accepts with the project's settings (addopts
run tests in test processes: `make stress` once passed `-p no:xdist`, which those settings refuse)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def _pytest_args(target: str) -> list[str]:
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    line = next(l for l in recipe.splitlines() if " -m pytest " in l)
    return line.split(" -m pytest ", 1)[1].split()


def test_make_stress_collects_its_tests():
    """(`make test` is what CI runs: its own line is checked by every run.)"""
    args = [a.strip("'") for a in _pytest_args("stress")]
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = [l for l in proc.stdout.splitlines() if "::" in l]  # (the recipes say -q: one node id a line)
    assert len(collected) >= 9 and all("tests/stress/" in l for l in collected), proc.stdout[-2000:]


def test_make_test_lints_and_type_checks_first_with_pinned_tools():
    """`make test` depends on `lint` (ruff check, ruff format --check, then mypy, as pyproject.toml configures them), and the
    dev extra pins both exactly: a new release must not fail CI by itself."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: lint$", makefile, re.M), "make test must run the lint target first"
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert [line.strip() for line in lint.splitlines()] == [
        "$(PY) -m ruff check src",
        "$(PY) -m ruff format --check src",
        "$(PY) -m mypy",
    ]
    pyproject = (ROOT / "pyproject.toml").read_text()
    pins = re.findall(r'"(ruff|mypy)==(\d+(?:\.\d+)*)"', pyproject)
    assert sorted(name for name, _ in pins) == ["mypy", "ruff"], pins
