"""Disk tables (store.disk, node.table(storage="disk")): exact values, resident memory under the
budget while pushes sweep a table larger than it, and checkpoints that stream."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pskv

pytestmark = pytest.mark.timeout(120)

ROWS, DIM, CACHE = 200_000, 16, 5_000  # a 12.8 MB table, a 320 KB budget of rows


def test_a_disk_table_sums_exactly_and_stays_under_its_budget(node, tmp_path):
    t = node.table("big", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1), storage="disk", cache_rows=CACHE,
                   path=tmp_path / "rows")
    ref = node.table("ref", rows=ROWS, dim=DIM, updater=pskv.Adagrad(lr=0.1))
    rng = np.random.default_rng(0)
    disk = node.catalog.get("big").shard.disk
    peak = 0
    for step in range(20):  # random rows all over the table: far more pages than the budget
        keys = rng.integers(0, ROWS, 2_000)
        grads = rng.standard_normal((2_000, DIM)).astype(np.float32)
        t.push(keys, grads).wait()
        ref.push(keys, grads).wait()
        peak = max(peak, disk.resident_bytes())
    keys = rng.permutation(ROWS)[:50_000]
    assert np.array_equal(t.pull(keys), ref.pull(keys))
    budget = CACHE * DIM * 4 + 2 * 2_000 * 4096  # the budget, plus what one push of 2,000 rows may touch
    assert peak <= budget + 2_000 * 4096, (peak, budget)
    assert disk.trims > 0 and (tmp_path / "rows" / "big.node0.rows").stat().st_size == ROWS * DIM * 4
    stats = node.stats()["tables"]["big"]
    assert stats["disk_file_bytes"] >= ROWS * DIM * 4 and stats["disk_trims"] == disk.trims


def test_a_checkpoint_of_a_disk_table_streams_it(node, tmp_path):
    t = node.table("big", rows=ROWS, dim=DIM, storage="disk", cache_rows=CACHE, path=tmp_path / "rows")
    t.push(np.arange(0, ROWS, 7), np.ones((len(range(0, ROWS, 7)), DIM))).wait()
    disk = node.catalog.get("big").shard.disk
    disk.trim()
    disk.peak_bytes = 0
    node.checkpoint(tmp_path / "ckpt")
    assert disk.peak_bytes <= 5 * 2**20  # one 4 MiB chunk of the 12.8 MB table at a time
    saved = pskv.load_checkpoint(tmp_path / "ckpt")["big"].values
    expected = np.zeros((ROWS, DIM), np.float32)
    expected[::7] = 1.0
    assert np.array_equal(saved, expected)


def test_a_restore_into_a_disk_table_streams_it(tmp_path):
    """A node restored from a checkpoint reads a disk table's rows into its files 4 MiB at a time,
    dropping the pages after each: the whole table never sits in memory, and every value is back."""
    with pskv.init() as first:
        t = first.table("big", rows=ROWS, dim=DIM, storage="disk", cache_rows=CACHE, path=tmp_path / "rows")
        t.push(np.arange(0, ROWS, 7), np.ones((len(range(0, ROWS, 7)), DIM))).wait()
        first.checkpoint(tmp_path / "ckpt")
    with pskv.init(restore=str(tmp_path / "ckpt")) as node:
        t = node.table("big", rows=ROWS, dim=DIM, storage="disk", cache_rows=CACHE, path=tmp_path / "rows2")
        disk = node.catalog.get("big").shard.disk
        assert 0 < disk.peak_bytes <= 5 * 2**20  # one 4 MiB chunk of the 12.8 MB table at a time
        assert disk.resident_bytes() <= 5 * 2**20
        got = t.pull(np.arange(ROWS))
    expected = np.zeros((ROWS, DIM), np.float32)
    expected[::7] = 1.0
    assert np.array_equal(got, expected)


def test_disk_options_are_checked(node, tmp_path):
    with pytest.raises(pskv.ConfigError, match="path=DIR"):
        node.table("a", rows=10, storage="disk", cache_rows=5)
    with pytest.raises(pskv.ConfigError, match="cache_rows"):
        node.table("b", rows=10, storage="disk", path=tmp_path)
    with pytest.raises(pskv.ConfigError, match="'memory' or 'disk'"):
        node.table("c", rows=10, storage="ssd", path=tmp_path)


@pytest.mark.parametrize("name", ["../x", "a/b", "/tmp/abs", "..", ".hidden", "", "a\x00b", "x" * 201, "ä/../b"])
def test_a_disk_table_name_that_is_no_plain_file_name_is_refused(tmp_path, name):
    """A disk table's name becomes its file names in DIR: a name that would reach outside DIR (or make
    a hidden file, or none) is a ConfigError naming the table and what is allowed, and nothing is written."""
    from pskv.store.disk import DiskRows

    inside = tmp_path / "rows"
    with pytest.raises(pskv.ConfigError, match=rf"table {re.escape(repr(name))}: a storage='disk' table's name .* "
                                               r"letters, digits, '_', '-' and '.', not start with '.'"):
        DiskRows(inside, name, 0, cache_rows=10, row_bytes=16)
    assert list(tmp_path.iterdir()) == []


def test_a_disk_table_with_a_dotted_name_keeps_its_files_in_dir(node, tmp_path):
    """Names of letters, digits, '_', '-' and '.' are files in DIR."""
    t = node.table("mf-items_v2.1", rows=10, dim=2, storage="disk", cache_rows=5, path=tmp_path / "rows")
    t.push(np.arange(10), np.ones((10, 2), np.float32)).wait()
    assert float(t.pull(np.arange(10)).sum()) == 20.0
    assert sorted(p.name for p in (tmp_path / "rows").iterdir()) == ["mf-items_v2.1.node0.rows"]


def test_a_disk_table_named_outside_dir_is_refused_by_node_table(node, tmp_path):
    """node.table refuses the name before any file is made."""
    with pytest.raises(pskv.ConfigError, match=r"table '\.\./escape': a storage='disk' table's name"):
        node.table("../escape", rows=10, storage="disk", cache_rows=5, path=tmp_path / "rows")
    assert list(tmp_path.iterdir()) == []
