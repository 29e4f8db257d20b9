"""The lasso app (pskv.apps.lasso) on the STRADS-style scheduler (pskv.schedule), on real clusters:
scikit-learn's objective reached, the same rounds for the same seed, parallel updates of correlated
coordinates diverging without the dependency check and not with it, and --scheduler all's plot."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _run(*args: str, nodes: int = 2) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "lasso", "--nodes", str(nodes), "--",
                           "--progress", "none", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _objective(proc) -> float:
    m = re.search(r"objective ([-+\w.]+)\s*$", proc.stdout.strip())
    assert m, proc.stdout[-1500:]
    return float(m.group(1))


def _sklearn(data: str, alpha: float) -> float:
    from sklearn.linear_model import Lasso

    from pskv.apps.lasso import load

    x, y = load(data, 20, 0)
    model = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(x, y)
    r = y - x @ model.coef_ - model.intercept_
    return float(r @ r / (2 * len(y)) + alpha * np.abs(model.coef_).sum())


DATA = "synthetic:400x500:0.5"


@pytest.mark.long
def test_strads_reaches_sklearns_objective_on_two_nodes():
    got = _objective(_run("--data", DATA, "--alpha", "0.05", "--epochs", "40"))
    assert got == pytest.approx(_sklearn(DATA, 0.05), rel=1e-3)  # (issue 16's target)


def test_rounds_are_deterministic_for_a_seed():
    """Two runs with one seed publish the same sets and end at the same objective to the last bit
    of what is printed (sums of two workers in a fixed order per slot: float64, the same each run)."""
    a = _run("--data", DATA, "--alpha", "0.05", "--epochs", "2", "--seed", "3")
    b = _run("--data", DATA, "--alpha", "0.05", "--epochs", "2", "--seed", "3")
    assert _objective(a) == _objective(b)
    assert re.findall(r"epoch +\d+ +objective (\S+)", a.stdout) == re.findall(r"epoch +\d+ +objective (\S+)", b.stdout)


@pytest.mark.long
def test_correlated_coordinates_diverge_without_the_dependency_check():
    """Blocks of 10 features correlated 0.5: 16 consecutive coordinates per round (cyclic) update
    correlated ones together and blow up; strads' check keeps the same run converging."""
    cyclic = _objective(_run("--data", DATA, "--alpha", "0.05", "--epochs", "6", "--scheduler", "cyclic"))
    strads = _objective(_run("--data", DATA, "--alpha", "0.05", "--epochs", "6"))
    assert not np.isfinite(cyclic) or cyclic > 1e6
    assert strads < 2 * _sklearn(DATA, 0.05)  # (on its way: 3.6 after one epoch, 1.56 after six)


@pytest.mark.long
def test_scheduler_all_runs_each_and_plots(tmp_path):
    png = tmp_path / "s.png"
    proc = _run("--data", "synthetic:200x200:0.3", "--alpha", "0.05", "--epochs", "1", "--scheduler", "all",
                "--plot", str(png), nodes=1)
    for policy in ("strads", "shotgun", "cyclic"):
        assert re.search(rf"lasso {policy}: objective \S+ after", proc.stdout), proc.stdout[-2000:]
    assert png.is_file() and png.stat().st_size > 5000


def test_out_writes_beta_and_intercept_that_give_the_printed_objective(tmp_path):
    """--out MODEL.npz: load_model's beta and intercept recompute the objective the app printed."""
    from pskv.apps.lasso import load, load_model

    got = _objective(_run("--data", DATA, "--alpha", "0.05", "--epochs", "3", "--out", str(tmp_path / "m.npz"),
                          nodes=1))
    beta, intercept = load_model(tmp_path / "m.npz")
    x, y = load(DATA, 20, 0)
    r = y - x @ beta - intercept
    assert r @ r / (2 * len(y)) + 0.05 * np.abs(beta).sum() == pytest.approx(got, rel=1e-8)
