"""pskv's sparse example files: libsvm text in, the .pskvsp binary format out, memory-mapped shards."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pskv import cli
from pskv.data import DataError
from pskv.data.sparse import SparseData, convert, load, read_libsvm, write_libsvm

pytestmark = pytest.mark.timeout(60)

TEXT = """# a comment line
+1 3:1 17:0.5 18446744073709551615:2
-1 4:1

0 1:-1.5 # trailing comment
1
"""


def test_libsvm_parses_labels_keys_values_and_comments(tmp_path):
    path = tmp_path / "a.libsvm"
    path.write_text(TEXT)
    data = read_libsvm(path)
    assert data.labels.tolist() == [1, 0, 0, 1]
    assert data.indptr.tolist() == [0, 3, 4, 5, 5]
    assert data.keys.tolist() == [3, 17, 2**64 - 1, 4, 1]
    assert data.values.tolist() == [1, 0.5, 2, 1, -1.5]


@pytest.mark.parametrize("line,what", [("+1 3:x", "idx:value"), ("+1 3", "idx:value"), ("2 3:1", "label"),
                                       ("+1 -3:1", "non-negative"), ("+1 3:nan", "finite"), ("yes 1:1", "label")])
def test_malformed_libsvm_names_file_and_line(tmp_path, line, what):
    path = tmp_path / "bad.libsvm"
    path.write_text(f"+1 1:1\n-1 2:1\n{line}\n")
    with pytest.raises(DataError, match=f"bad.libsvm:3: .*{what}"):
        read_libsvm(path)


def test_binary_round_trip_and_shards_cover_every_row(tmp_path):
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 6, 101)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    keys = rng.integers(0, 2**64 - 1, indptr[-1], dtype=np.uint64, endpoint=True)
    data = SparseData(rng.integers(0, 2, 101).astype(np.float32), indptr, keys, None, {"note": "x"})
    back = SparseData.open(data.write(tmp_path / "d.pskvsp"))
    assert back.values is None and back.meta["note"] == "x"
    assert np.array_equal(back.keys, keys) and np.array_equal(back.indptr, indptr)
    shards = [back.shard(r, 4) for r in range(4)]
    assert sum(s.rows for s in shards) == 101
    assert np.array_equal(np.concatenate([np.asarray(s.keys) for s in shards]), keys)
    assert all(s.indptr[0] == 0 for s in shards)


def test_convert_writes_what_read_libsvm_reads_and_the_cli_reports_it(tmp_path, capsys):
    path = tmp_path / "a.libsvm"
    path.write_text(TEXT)
    data = convert(path, tmp_path / "a.pskvsp", quiet=True)
    assert np.array_equal(data.values, read_libsvm(path).values)
    assert cli.main(["data", "convert", str(path), str(tmp_path / "b.pskvsp"), "--quiet"]) == 0
    assert "4 examples, 5 non-zeros, 5 distinct features" in capsys.readouterr().out
    write_libsvm(data, tmp_path / "c.libsvm")
    assert np.array_equal(read_libsvm(tmp_path / "c.libsvm").keys, data.keys)
    assert load(tmp_path / "a.libsvm", cache_dir=tmp_path / "cache").rows == 4  # converted once, then mapped
    assert len(list((tmp_path / "cache").glob("a.libsvm.*.pskvsp"))) == 1


def test_the_conversion_cache_tells_files_of_one_name_apart(tmp_path):
    """Two train.libsvm in two folders, and one rewritten in place, each read as they are now."""
    cache = tmp_path / "cache"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "train.libsvm").write_text(TEXT)
    (tmp_path / "b" / "train.libsvm").write_text("+1 7:1\n")
    assert load(tmp_path / "a" / "train.libsvm", cache_dir=cache).rows == 4
    assert load(tmp_path / "b" / "train.libsvm", cache_dir=cache).rows == 1
    assert load(tmp_path / "a" / "train.libsvm", cache_dir=cache).rows == 4  # its own copy, mapped again
    again = tmp_path / "a" / "train.libsvm"
    again.write_text("-1 3:1\n+1 4:1\n")
    os.utime(again, ns=(1, 1))  # (older than the cached copy: a copy made with cp -p, say)
    got = load(again, cache_dir=cache)
    assert got.rows == 2 and list(got.keys) == [3, 4]


def test_a_file_that_is_no_sparse_file_is_a_data_error(tmp_path):
    (tmp_path / "x.pskvsp").write_bytes(b"PSKVSP01" + b"\xff" * 20)
    with pytest.raises(DataError, match="convert it again"):
        SparseData.open(tmp_path / "x.pskvsp")
    assert cli.main(["data", "convert", str(tmp_path / "missing.libsvm"), str(tmp_path / "o")]) == 2


def test_convert_real_labels_keeps_regression_targets(tmp_path, capsys):
    """`pskv data convert --real-labels`: the label column as float64 targets (lasso), exactly as written."""
    path = tmp_path / "r.libsvm"
    path.write_text("2.5 1:1 3:0.5\n-0.125 2:2\n7 1:1\n")
    assert cli.main(["data", "convert", str(path), str(tmp_path / "r.pskvsp"), "--quiet", "--real-labels"]) == 0
    assert "3 examples, 4 non-zeros, 3 distinct features, targets -0.125..7" in capsys.readouterr().out
    from pskv.data.sparse import SparseData

    labels = SparseData.open(tmp_path / "r.pskvsp").labels
    assert labels.dtype == np.float64 and labels.tolist() == [2.5, -0.125, 7.0]
