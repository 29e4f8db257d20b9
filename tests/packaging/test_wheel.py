"""Packaging: `python -m build` makes a wheel that a clean virtual environment installs (its
dependencies from the package index) and that runs `pskv version` and `pskv demo` there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long(90), pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def _copy_source(dest: Path) -> Path:
    """The files a build reads, copied: building in the tree would rewrite its egg-info while other
    tests import pskv from it."""
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.nbi",
                                                                              "*.nbc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


def test_the_wheel_installs_in_a_clean_venv_and_runs_the_demo(tmp_path):
    source = _copy_source(tmp_path / "source")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSKV_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                            str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300, env=env)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheel, = (tmp_path / "dist").glob("pskv-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pskv/py.typed" in names and "pskv/cli/__init__.py" in names and "pskv/apps/mf.py" in names
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]

    venv.create(tmp_path / "venv", with_pip=True, clear=True)  # no system site-packages: only what the wheel pulls
    bin_dir = tmp_path / "venv" / "bin"
    install = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=400, env=env)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run([str(bin_dir / "pskv"), "version"], capture_output=True, text=True, timeout=60, env=env,
                           cwd=tmp_path)
    assert shown.stdout.strip() == f"pskv {version}", shown.stdout + shown.stderr
    demo = subprocess.run([str(bin_dir / "pskv"), "demo", "--data", "synthetic", "--epochs", "1", "--ratings", "5000",
                           "--users", "500", "--items", "200", "--nodes", "2", "--threads", "1", "--plot", ""],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert demo.stdout.strip().splitlines()[-1].startswith("test RMSE ")
    typed = subprocess.run([str(bin_dir / "python"), "-c", "import pathlib, pskv; "
                            "print(pathlib.Path(pskv.__file__).with_name('py.typed').is_file())"],
                           capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert typed.stdout.strip() == "True", typed.stderr
