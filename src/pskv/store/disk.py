"""DiskRows: a shard's rows (and updater state) in files, for tables larger than memory (Petuum Bösen's
out-of-core tables): `node.table(..., storage="disk", cache_rows=N, path=DIR)`.

The rows are a shared memory map of `DIR/<table>.node<R>.rows` (and `.state`), so every kernel of
the shard works on them unchanged. What stays in memory is bounded: the pages the shard touched
are its cache of hot rows, and once the rows touched since the last trim would exceed the
budget (`cache_rows` rows' worth of distinct pages of the rows file; the updater state's pages
follow the rows'), every page is dropped from this process (madvise MADV_DONTNEED: dirty pages
stay in the page cache) and from the page cache (posix_fadvise DONTNEED, which also starts
writing dirty pages back without waiting; cached neighbours would otherwise be mapped in with
each page touched later, the kernel's fault-around).
The file is the rows' home; the next access reads a row again. A touched row brings in its
whole page (4 KiB), so the budget counts pages, not rows.

The table's name becomes a file name, so only names that stay a plain file inside DIR are taken:
letters, digits, `_`, `-` and `.`, not starting with `.` (no `/`, no `..`, nothing hidden), at most
200 characters (ConfigError otherwise; a memory table may have any name).

Threads: the data path calls `touched()` from any thread; `trim()` needs no lock (dropping pages
of a shared file mapping is safe while other threads read or write it: they fault them back).
"""

from __future__ import annotations

import mmap
import os
import re
import threading
from pathlib import Path

import numpy as np

from ..errors import ConfigError

PAGE = mmap.PAGESIZE
_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")  # a table name that is one plain file name in DIR


class DiskRows:
    """The files of one shard, their maps, and the budget of resident pages."""

    def __init__(self, directory, name: str, rank: int, cache_rows: int, row_bytes: int) -> None:
        if cache_rows is None or int(cache_rows) < 1:
            raise ConfigError(f"table {name!r}: storage='disk' needs cache_rows >= 1 (rows kept in memory)")
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):  # "../x" or "a/b" would write outside DIR
            raise ConfigError(
                f"table {name!r}: a storage='disk' table's name names its files in {directory}, so it "
                "may only hold letters, digits, '_', '-' and '.', not start with '.', and have at most "
                "200 characters; rename the table"
            )
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"table {name!r}: cannot use {directory} for its rows on disk: {exc}") from None
        self.name, self.rank, self.cache_rows = name, rank, int(cache_rows)
        self.row_bytes = int(row_bytes)
        self.budget_pages = max(1, self.cache_rows * self.row_bytes // PAGE)  # distinct row pages allowed
        self._maps: dict[str, np.memmap] = {}
        self._seen = np.zeros(0, np.bool_)  # (pages of the rows file,) touched since the last trim
        self._since = 0  # distinct pages of rows touched since the last trim
        self._lock = threading.Lock()  # guards _since and the trim count
        self.trims = 0
        self.peak_bytes = 0  # the largest resident size measured (just before each trim)

    def path(self, which: str) -> Path:
        return self.directory / f"{self.name}.node{self.rank}.{which}"

    def array(self, which: str, shape: tuple, dtype) -> np.memmap:
        """A map of `which` (rows / state) of `shape`; the file grows to fit and keeps what it held."""
        path = self.path(which)
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with open(path, "ab") as f:
            if f.tell() < size:
                f.truncate(size)
        arr = np.memmap(path, dtype=dtype, mode="r+", shape=shape)
        # random access: no readahead, and no fault-around mapping the neighbours of a touched page (they
        # would be resident too: 2,000 random rows of a 12.8 MB file made all of it resident)
        mapping = _mapping(arr)
        assert mapping is not None  # (just mapped)
        mapping.madvise(mmap.MADV_RANDOM)
        self._maps[which] = arr
        return arr

    def touched(self, rows: np.ndarray) -> None:
        """Rows (positions in the rows file) were read or written: trim once the distinct pages of
        rows touched since the last trim exceed the budget (the state's pages follow the rows')."""
        rows = np.asarray(rows, np.int64)
        pages = np.unique(rows[rows >= 0] * self.row_bytes // PAGE)  # (rows moved here by relocation: no page)
        with self._lock:
            if len(pages) and pages[-1] >= len(self._seen):
                grown = np.zeros(max(int(pages[-1]) + 1, 2 * len(self._seen)), np.bool_)
                grown[: len(self._seen)] = self._seen
                self._seen = grown
            fresh = pages[~self._seen[pages]]
            self._seen[fresh] = True
            self._since += len(fresh)
            if self._since <= self.budget_pages:
                return
            hot, self._seen = self._seen, np.zeros_like(self._seen)
            self._since = 0
        self.trim(hot)

    def trim(self, hot: np.ndarray | None = None) -> None:
        """Drop the pages of the files from this process, and from the page cache, but those of rows
        touched since the last trim (`hot`: a page mask of the rows file; None: drop everything).
        madvise DONTNEED keeps a shared map's dirty pages in the page cache; fadvise DONTNEED starts
        writing them back without waiting and drops what is clean (pages left cached would be mapped
        in as neighbours of pages touched later: the kernel's fault-around)."""
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())
        for which, arr in list(self._maps.items()):
            mapping = _mapping(arr)
            if mapping is None:
                continue
            fd = os.open(self.path(which), os.O_RDONLY)
            try:
                for lo, hi in self._cold(arr, len(mapping), hot):
                    mapping.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                    os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        with self._lock:
            self.trims += 1

    def _cold(self, arr: np.memmap, size: int, hot: np.ndarray | None) -> list[tuple[int, int]]:
        """Byte ranges (page aligned) of `arr` (its map: `size` bytes) to drop: all, or the runs of pages
        with no hot row."""
        if hot is None or not hot.any():
            return [(0, size)]
        scale = arr.nbytes / max(len(arr), 1) / self.row_bytes  # this file's bytes per byte of rows
        keep = np.flatnonzero(hot)
        lows = (keep * PAGE * scale).astype(np.int64) // PAGE * PAGE  # the hot pages, in this file
        highs = -(-((keep + 1) * PAGE * scale).astype(np.int64) // PAGE) * PAGE
        out, at = [], 0
        for lo, hi in zip(np.minimum(lows, size).tolist(), np.minimum(highs, size).tolist(), strict=True):
            if lo > at:
                out.append((at, lo))
            at = max(at, hi)
        if at < size:
            out.append((at, size))
        return out

    def resident_bytes(self) -> int:
        """Bytes of this shard's files resident in this process now (/proc/self/smaps), or 0 where unknown."""
        names = {str(self.path(w)) for w in self._maps}
        total, counting = 0, False
        try:
            with open("/proc/self/smaps") as f:
                for line in f:
                    parts = line.split()
                    if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header line
                        counting = len(parts) >= 6 and parts[-1] in names  # (anonymous ones have no path)
                    elif counting and parts and parts[0] == "Rss:":
                        total += int(parts[1]) * 1024
        except OSError:
            return 0
        return total

    def counters(self) -> dict:
        return {
            "disk_trims": self.trims,
            "disk_resident_bytes": self.resident_bytes(),
            "disk_peak_bytes": self.peak_bytes,
            "disk_file_bytes": sum(a.nbytes for a in self._maps.values()),
        }


def _mapping(arr: np.memmap) -> mmap.mmap | None:
    """The mmap under a np.memmap, for madvise (numpy keeps it as the private `_mmap`; None once closed)."""
    return getattr(arr, "_mmap", None)
