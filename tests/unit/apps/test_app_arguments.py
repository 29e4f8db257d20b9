"""apps/arguments.py and each app's check(argv): every app's --help (each default once, every option
described, no flag the app ignores), one-line errors with status 2, and --resume against a checkpoint's
manifest. No processes: check() runs in this one, as `pskv run` runs it before any node starts."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from pskv import cli
from pskv.apps import APPS, arguments

pytestmark = pytest.mark.timeout(60)

CHECKED = [app for app in APPS if app != "lasso"]  # lasso: its own helper's checks (opt-in: a check(argv))
TECHNIQUES = ("--localize", "--replicate", "--sampling", "--consistency", "--lease", "--location-caches")


def _help(app: str, capsys) -> str:
    assert cli.main(["run", app, "--help"]) == 0
    return capsys.readouterr().out


def _entries(text: str) -> dict[str, str]:
    """Option -> its whole help entry (first line from the option on, then its indented lines)."""
    entries, current = {}, None
    for line in text.splitlines():
        m = re.match(r"  (-{1,2}[\w-]+)", line)
        if m:
            current = m.group(1)
            entries[current] = " ".join(line.split())
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("app", list(APPS))
def test_help_shows_each_default_once_and_describes_every_option(app, capsys):
    """`pskv run APP --help`: no option says `(default:` twice, and every option has a description."""
    text = _help(app, capsys)
    entries = _entries(text)
    assert "--epochs" in entries and "--seed" in entries, text
    twice = {opt: e for opt, e in entries.items() if e.count("(default:") > 1 or e.count("default:") > 1}
    assert not twice, twice
    module = importlib.import_module(APPS[app])
    parser = module._parser()
    bare = [a.option_strings for a in parser._actions if a.option_strings and not (a.help or "").strip()]
    assert not bare, bare


def test_help_of_mf_says_what_biases_and_global_mean_do(capsys):
    entries = _entries(_help("mf", capsys))
    assert entries["--biases"].startswith("--biases, --no-biases learn a bias per user and per item")
    assert entries["--biases"].endswith("(default: True)")
    assert entries["--seed"] == "--seed SEED seed of data splits, initial values and order (default: 0)"
    assert entries["--backups"].endswith("(default: PSKV_BACKUPS, else 0)")


@pytest.mark.parametrize("app, has", [("mf", True), ("kge", True), ("word2vec", True), ("lr", False),
                                      ("mnist", False), ("lasso", False)])
def test_an_app_lists_only_the_techniques_it_uses(app, has, capsys):
    """lr, mnist and lasso ignore the Lapse/NuPS/Petuum flags: not in their help, and refused."""
    entries = _entries(_help(app, capsys))
    assert all((flag in entries) == has for flag in TECHNIQUES), sorted(entries)
    if not has and app != "lasso":
        with pytest.raises(SystemExit) as info:
            importlib.import_module(APPS[app]).check(["--localize"])
        assert info.value.code == 2
        assert capsys.readouterr().err == (f"pskv run {app}: error: unrecognized arguments: --localize; "
                                           f"see `pskv run {app} --help`\n")


@pytest.mark.parametrize("app, argv, says", [
    ("mf", ["--data", "no/such.csv"], "--data 'no/such.csv' is not ml-100k, lapse-toy, zipf:ROWSxCOLSxNNZ nor a "
                                      "file of ratings"),
    ("mf", ["--resume"], "--resume needs --checkpoint-dir DIR (where the run saves its checkpoints)"),
    ("mf", ["--epochs", "0"], "--epochs 0 must be >= 1"),
    ("mf", ["--storage", "disk"], "--storage disk needs --storage-path DIR (where each node keeps its item rows)"),
    ("kge", ["--dim", "7"], "--dim 7: ComplEx needs an even dim >= 2 (real | imaginary)"),
    ("kge", ["--data", "no/such/dir"], "--data 'no/such/dir': no such file or directory; --data takes nations, "
                                       "umls, ml-100k-kg, lapse-toy, random:E,R,T, a directory of train/valid/test "
                                       "triples or one file of triples"),
    ("word2vec", ["--window", "-1"], "--window -1 must be >= 0"),
    ("lr", ["--test", "no.libsvm"], "--test 'no.libsvm': no such file; give census or a libsvm / .pskvsp file"),
    ("mnist", ["--mode", "bsp"], "--mode 'bsp' is not sync, async or ssp:S (S a staleness >= 0)"),
    ("mnist", ["--eval-freq", "5"], "--eval-freq needs --checkpoint-dir DIR (where pskv evaluate finds the "
                                    "checkpoints)"),
])
def test_check_fails_in_one_line_with_status_2(app, argv, says, capsys):
    """An app's check(argv): one line `pskv run APP: error: ...` naming the flag, SystemExit(2)."""
    with pytest.raises(SystemExit) as info:
        importlib.import_module(APPS[app]).check(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"pskv run {app}: error: {says}\n"


def _checkpoint(directory, step: int, epoch: int, tables: dict, *, complete: bool = True):
    """A checkpoint directory as format.steps and read_manifest see it (the manifest only: check reads no rows)."""
    path = directory / f"checkpoint-{step:06d}"
    path.mkdir(parents=True)
    if complete:
        (path / "manifest.json").write_text(json.dumps({"format": "pskv-checkpoint", "version": 1, "step": step,
                                                        "tables": tables, "extra": {"epoch": epoch}}))
    return path


MF_TABLES = {"mf-items": {"dim": 5, "updater": {"name": "add"}}, "mf-users-out": {"dim": 5, "updater": {"name": "add"}}}


@pytest.mark.parametrize("argv, says", [
    (["--rank", "8"], "--rank 8 does not match 4"),
    (["--rank", "4", "--no-biases"], "--no-biases does not match --biases"),
    (["--rank", "4", "--item-updater", "adagrad"], "--item-updater adagrad does not match sgd"),
])
def test_mf_resume_names_the_flag_that_does_not_fit_the_checkpoint(tmp_path, argv, says, capsys):
    """--resume with flags that make other tables than the newest complete checkpoint's: the flag, both values."""
    ratings = tmp_path / "r.csv"
    ratings.write_text("u,i,r\na,b,3\n")
    ckpt = tmp_path / "ckpt"
    _checkpoint(ckpt, 2, 2, MF_TABLES)
    _checkpoint(ckpt, 3, 3, {}, complete=False)  # a run died while writing it: never read
    from pskv.apps import mf

    with pytest.raises(SystemExit) as info:
        mf.check(["--data", str(ratings), "--checkpoint-dir", str(ckpt), "--resume", *argv])
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"pskv run mf: error: {says} in {ckpt}/ (its newest checkpoint, "
                                       "checkpoint-000002); resume with the flags it was trained with, or start "
                                       "afresh in another --checkpoint-dir\n")


def test_resume_goes_on_starts_fresh_or_has_nothing_to_do(tmp_path, capsys):
    """--resume: a fitting checkpoint before --epochs goes on (check returns the arguments); none yet (no
    directory, or only incomplete ones) starts fresh; one at --epochs says what to raise and exits 0."""
    ratings = tmp_path / "r.csv"
    ratings.write_text("u,i,r\na,b,3\n")
    from pskv.apps import mf

    argv = ["--data", str(ratings), "--rank", "4", "--checkpoint-dir", str(tmp_path / "ckpt"), "--resume"]
    assert mf.check([*argv, "--epochs", "3"]).resume  # no directory yet: a fresh start
    _checkpoint(tmp_path / "ckpt", 1, 3, {}, complete=False)
    assert mf.check([*argv, "--epochs", "3"]).rank == 4  # only an incomplete one
    assert arguments.newest_checkpoint(tmp_path / "ckpt") is None
    path = _checkpoint(tmp_path / "ckpt", 2, 3, MF_TABLES)
    assert arguments.newest_checkpoint(tmp_path / "ckpt") == path
    assert mf.check([*argv, "--epochs", "4"]).epochs == 4
    with pytest.raises(SystemExit) as info:
        mf.check([*argv, "--epochs", "3"])
    assert info.value.code == 0
    assert capsys.readouterr().err == (f"pskv run mf: nothing to do: {path} is after epoch 3 and --epochs is 3; "
                                       "raise --epochs to train on from it\n")


def test_kge_and_word2vec_resume_check_the_dim(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    _checkpoint(ckpt, 1, 1, {"entities": {"dim": 32}, "relations": {"dim": 32}, "syn0": {"dim": 20},
                             "syn1neg": {"dim": 20}})
    for app, dim, theirs in (("kge", 64, 32), ("word2vec", 30, 20)):
        with pytest.raises(SystemExit):
            importlib.import_module(APPS[app]).check(["--dim", str(dim), "--checkpoint-dir", str(ckpt), "--resume",
                                                      "--data", "lapse-toy"])
        assert capsys.readouterr().err.startswith(f"pskv run {app}: error: --dim {dim} does not match {theirs} in ")


def test_pskv_run_takes_n_like_pskv_launch():
    """`pskv run -n 2 APP` and `pskv run APP -n 2` are `--nodes 2`."""
    parser = cli._parser()
    for argv in (["run", "-n", "2", "mf"], ["run", "mf", "-n", "2", "--", "--rank", "4"]):
        args, rest = parser.parse_known_args(argv)
        assert (args.app, args.nodes) == ("mf", 2), argv
