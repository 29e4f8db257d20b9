"""benchmarks/bench_versions.py without clusters: its options, its report, and the check that fails
a child which imported pskv from the wrong tree."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_versions.py"


@pytest.fixture(scope="module")
def bv():
    spec = importlib.util.spec_from_file_location("bench_versions", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_defaults_and_quick(bv):
    args = bv._parser().parse_args([])
    assert (args.base, args.head, args.jobs) == ("ccc6578", "WORKTREE", ["kv", "kge", "mf"])
    assert bv.plan_for(args).rounds == 5
    quick = bv._parser().parse_args(["--quick", "--base", "HEAD~1", "--head", "HEAD", "--jobs", "kv,mf"])
    assert (quick.base, quick.head, quick.jobs) == ("HEAD~1", "HEAD", ["kv", "mf"])
    assert bv.plan_for(quick).rounds == 2
    assert bv.plan_for(bv._parser().parse_args(["--quick", "--rounds", "7"])).rounds == 7


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--rounds", "x"], ["--jobs", "kv,word2vec"], ["--jobs", ","]])
def test_bad_options_are_refused(bv, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bv._parser().parse_args(argv)
    assert exc.value.code == 2
    assert "expected" in capsys.readouterr().err


def _summary(bv, key, base, head):
    figure = next(f for f in bv.FIGURES if f.key == key)
    return bv.Summary(figure, base, head)


def test_verdict_uses_the_min_max_ranges_and_the_direction(bv):
    assert _summary(bv, "push_p50_us", [600, 620, 700], [650, 660, 800]).verdict == "~"
    assert _summary(bv, "push_p50_us", [600, 620, 640], [700, 710, 720]).verdict == "slower"  # µs: lower is better
    assert _summary(bv, "pull_gbs", [1.0, 1.1, 1.2], [1.5, 1.6, 1.7]).verdict == "faster"  # GB/s: higher is better
    assert _summary(bv, "pull_gbs", [1.5, 1.6, 1.7], [1.0, 1.1, 1.2]).verdict == "slower"
    assert _summary(bv, "kge_wall_s", [3.0, 3.1], [9.0, 9.1]).verdict == "-"  # too few rounds for a verdict
    assert _summary(bv, "mf_epoch_s", [0.4, 0.5, 0.6], [0.6, 0.8, 1.0]).ratio == pytest.approx(0.8 / 0.5)


def test_report_table(bv):
    values = {"base": {"push_p50_us": [600.0, 612.0, 640.0], "pull_gbs": [1.5, 1.52, 1.6]},
              "head": {"push_p50_us": [605.0, 630.0, 700.0], "pull_gbs": [1.4, 1.45, 1.55], "kge_wall_s": [3.0]}}
    rows = bv.summarize(values)
    assert [r.figure.key for r in rows] == ["push_p50_us", "pull_gbs"]  # only figures both sides measured
    table = bv.markdown(rows, "ccc6578", "WORKTREE (ccc6578-dirty)")
    lines = table.splitlines()
    assert lines[0].startswith("| figure | unit | base ccc6578: median (min-max) | head WORKTREE (ccc6578-dirty):")
    assert lines[2] == ("| push 1k x 64, round trip p50 | µs, lower is better | 612 (600-640) | 630 (605-700) "
                        "| 1.029 | ~ |")
    assert lines[3] == "| pull 100k x 64 | GB/s, higher is better | 1.52 (1.50-1.60) | 1.45 (1.40-1.55) | 0.954 | ~ |"
    assert all(line.count("|") == 7 for line in lines)
    assert bv.conclusion(rows) == "slower beyond this run's noise: none"


def test_result_line_is_found_behind_the_launcher_prefix(bv):
    out = "[node 1] hello\n[node 0] " + bv.TAG + '{"push_p50_us": 612.5}\n'
    assert bv.tagged(out) == {"push_p50_us": 612.5}
    with pytest.raises(bv.BenchError, match="no result line"):
        bv.tagged("[node 0] nothing\n")


def test_a_child_that_imports_pskv_from_another_tree_fails_loudly(bv, tmp_path):
    import pskv

    # the pskv this test imported (installed, or PYTHONPATH=src) is not under tmp_path
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(pskv.__file__).resolve().parents[1]),
           "BENCHV_SRC": str(tmp_path)}
    proc = subprocess.run(bv.pskv_command("version"), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == bv.CHECK_FAILED
    assert "bench_versions: pskv was imported from" in proc.stderr and str(tmp_path) in proc.stderr
    with pytest.raises(bv.BenchError, match="wrong tree"):
        bv.run_child(bv.pskv_command("version"), env, tmp_path, "check")
