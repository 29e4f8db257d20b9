"""benchmarks/bench_efficiency.py (issue 31) in its smallest form, so the script cannot rot: one app on tiny
data in every one-host row, and the kv part, measured and printed (not how fast: speed lives in
benchmarks/RESULTS.md). Its rows and options are checked without processes."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_efficiency.py"


@pytest.fixture(scope="module")
def be():
    spec = importlib.util.spec_from_file_location("bench_efficiency", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_rows_per_shared_memory_setting_and_hosts(be):
    """`both` adds the 2-process row with PSKV_SHARED_MEMORY=0; emulated hosts add two rows, one --insecure."""
    labels = [s.label for s in be.setups("on", hosts=False)]
    assert labels == ["1 process x 1 thread", "1 process x 2 threads", "2 processes x 1 thread"]
    both = be.setups("both", hosts=True)
    assert [(s.nodes, s.threads, s.hosts, dict(s.env)["PSKV_SHARED_MEMORY"], s.flags) for s in both] == [
        (1, 1, 0, "1", ()), (1, 2, 0, "1", ()), (2, 1, 0, "1", ()), (2, 1, 0, "0", ()), (2, 1, 2, "1", ()),
        (2, 1, 2, "1", ("--insecure",))]
    assert [s.baseline for s in both] == [True] + [False] * 5
    assert all(dict(s.env)["PSKV_SHARED_MEMORY"] == "0" for s in be.setups("off", hosts=False))
    no_flag = be.setups("on", hosts=True, insecure=())[-1]  # a `pskv run` without --insecure: the variable
    assert dict(no_flag.env)["PSKV_INSECURE"] == "1" and no_flag.flags == ()
    argv = be.app_argv(be.BY_NAME["mf"], both[-1], 6, quick=False)
    assert argv[3:] == ["run", "mf", "--nodes", "2", "--hosts", "2", "--insecure", "--threads", "1", "--",
                        "--data", "zipf:20000x10000x2000000", "--epochs", "6", "--progress", "none"]


def test_per_epoch_figures_and_ratios(be):
    """Ratios divide by the app's 1-process row: CPU ratio 1.0 is free, speedup 2.0 linear; failed rows get none."""
    mf = be.BY_NAME["mf"]
    rows = be.setups("on", hosts=False)
    got = [be.Row(mf, rows[0], 2.0, 2.0, 1000), be.Row(mf, rows[1], 3.0, 1.6, 1000),
           be.Row(mf, rows[2], 0.0, 0.0, 0, failed="exit status 1")]
    be.ratios(got)
    assert (got[0].cpu_ratio, got[0].speedup, got[0].items_per_s) == (1.0, 1.0, 500.0)
    assert (got[1].cpu_ratio, got[1].speedup) == (1.5, pytest.approx(1.25))
    table = be.app_table(got)
    assert "| mf | 1 process x 2 threads | 3.00 | 1.60 | 1.50 | 1.25 | 625 ratings |" in table
    assert "| mf | 2 processes x 1 thread | failed: exit status 1 |" in table


def test_rows_chosen_variants_and_io_threads(be):
    """--rows keeps the baseline and the rows named; each --variant repeats them (not the baseline) with the app's
    flags added; --io-threads N repeats the emulated-host rows with a sitecustomize that gives every zmq.Context N
    I/O threads, on PYTHONPATH after the pskv under test."""
    got = be.setups("on", hosts=True, keys=("hosts-insecure",), variants=(("dsgd", ("--schedule", "dsgd")),),
                    io_threads=2)
    assert [(s.label, s.app_flags) for s in got] == [
        ("1 process x 1 thread", ()), ("2 emulated hosts x 1 process, --insecure", ()),
        ("2 emulated hosts x 1 process, --insecure, 2 ZeroMQ I/O threads", ()),
        ("2 emulated hosts x 1 process, --insecure, dsgd", ("--schedule", "dsgd")),
        ("2 emulated hosts x 1 process, --insecure, 2 ZeroMQ I/O threads, dsgd", ("--schedule", "dsgd"))]
    env = be.child_env(got[2].env)
    paths = env["PYTHONPATH"].split(":")
    assert paths[0] == str(be.SRC) and (Path(paths[-1]) / "sitecustomize.py").is_file()
    code = "import zmq; print(zmq.Context().io_threads, zmq.Context(3).io_threads)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.stdout.split() == ["2", "3"], done.stderr
    argv = be.app_argv(be.BY_NAME["mf"], got[3], 2, quick=False)
    assert argv[-7:] == ["zipf:20000x10000x2000000", "--schedule", "dsgd", "--epochs", "2", "--progress", "none"]
    assert be._quality(be.BY_NAME["kge"], "epoch   1  loss 3.2296\nepoch   2  loss 2.7503  test_mrr 0.0031\n"
                                         "test MRR 0.0031\n") == "loss 2.7503, test MRR 0.0031"
    args = be._parser().parse_args(["--rows", "hosts,2p", "--variant", "d=--schedule dsgd --localize"])
    assert args.rows == ("hosts", "2p") and args.variant == [("d", ("--schedule", "dsgd", "--localize"))]


def test_rounds_give_medians_and_each_rounds_ratios(be):
    """With --rounds every row runs once per round; each round's CPU ratio divides rows of that round."""
    mf, plan = be.BY_NAME["mf"], be.setups("on", hosts=False, keys=("2p",))
    got = [[be.Row(mf, plan[0], c, 1.0, 10) for c in (1.0, 2.0, 4.0)],
           [be.Row(mf, plan[1], c, 1.0, 10) for c in (1.5, 2.0, 6.0)]]
    assert be._round_ratios(got) == ["- 2 processes x 1 thread: 1.50, 1.00, 1.50"]
    assert (be._median_row(got[1]).cpu, be._round_ratios([got[0][:1], got[1][:1]])) == (2.0, [])


@pytest.mark.parametrize("argv", [["--epochs", "6,2"], ["--epochs", "0,2"], ["--epochs", "x"], ["--apps", "mf,svm"],
                                  ["--rows", "hosts,3p"], ["--variant", "dsgd"], ["--variant", "=--x"]])
def test_bad_options_are_refused(be, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        be._parser().parse_args(argv)
    assert exc.value.code == 2
    assert "expected" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_quick_run_prints_every_row_and_the_kv_table():
    """--quick on MF: the three one-host rows with figures, and the kv table of pulls and pushes (own,
    co-located, numpy). Shared memory off and no emulated hosts: the script is under test here, not them."""
    proc = subprocess.run([sys.executable, str(PATH), "--quick", "--apps", "mf", "--shared-memory", "off",
                           "--hosts", "off", "--kv", "--kv-keys", "2000"], capture_output=True, text=True, timeout=110,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    num = r"-?\d+\.\d\d"
    ratio = rf"(?:{num}|nan)"  # a 1-epoch difference on tiny data can be noise below 0: no ratio then
    rmse = r"test RMSE \d\.\d+"
    rows = re.findall(rf"^\| mf \| (.+?) \| {num} \| {num} \| {ratio} \| {ratio} \| .* ratings \| {rmse} \|$", out,
                      re.M)
    assert rows == ["1 process x 1 thread", "1 process x 2 threads", "2 processes x 1 thread"], out
    kv = re.findall(rf"^\| (pull|push) \| (numpy|own shard|co-located shard) \| off \| {num} \| {num} \| {num} \|$",
                    out, re.M)
    assert sorted(kv) == sorted((op, where) for op in ("pull", "push")
                                for where in ("numpy", "own shard", "co-located shard")), out
    assert "emulated hosts: skipped (--hosts off)" in out
