"""DiskRows: a shard's rows (and updater state) in files, for tables larger than memory (Petuum Bösen's
out-of-core tables): `node.table(..., storage="disk", cache_rows=N, path=DIR)`.

The rows are a shared memory map of `DIR/<table>.node<R>.rows` (and `.state`), so every kernel of
the shard works on them unchanged. What stays in memory is bounded: the pages the shard touched
are its cache of hot rows, and once the rows touched since the last trim would exceed the
budget (`cache_rows` rows), dirty pages are written back (msync) and every page is dropped, from
this process (madvise MADV_DONTNEED) and from the page cache (posix_fadvise DONTNEED: cached
neighbours would otherwise be mapped in with each page touched later, the kernel's fault-around).
The file is the rows' home; the next access reads a row again. Counted conservatively: a
touched row may bring in a page of 4 KiB, so the budget counts pages, not rows.

Threads: the data path calls `touched()` from any thread; `trim()` needs no lock (dropping pages
of a shared file mapping is safe while other threads read or write it: they fault them back).
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import numpy as np

from ..errors import ConfigError

PAGE = mmap.PAGESIZE


class DiskRows:
    """The files of one shard, their maps, and the budget of resident pages."""

    def __init__(self, directory, name: str, rank: int, cache_rows: int, row_bytes: int) -> None:
        if cache_rows is None or int(cache_rows) < 1:
            raise ConfigError(f"table {name!r}: storage='disk' needs cache_rows >= 1 (rows kept in memory)")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"table {name!r}: cannot use {directory} for its rows on disk: {exc}") from None
        self.name, self.rank, self.cache_rows = name, rank, int(cache_rows)
        self.budget_pages = max(1, self.cache_rows * row_bytes // PAGE)  # resident pages allowed
        self._maps: dict[str, np.memmap] = {}
        self._since = 0  # pages possibly brought in since the last trim
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
        arr._mmap.madvise(mmap.MADV_RANDOM)
        self._maps[which] = arr
        return arr

    def touched(self, n: int) -> None:
        """`n` rows were read or written: trim when the budget may be exceeded."""
        with self._lock:
            self._since += n
            if self._since <= self.budget_pages:
                return
            self._since = 0
        self.trim()

    def trim(self) -> None:
        """Write dirty rows back and drop every page of the files from this process and from the page
        cache (else the kernel maps cached neighbours of each page touched later: fault-around)."""
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())
        for which, arr in list(self._maps.items()):
            if arr._mmap is None:
                continue
            arr._mmap.flush()  # write-back (msync)
            arr._mmap.madvise(mmap.MADV_DONTNEED)
            fd = os.open(self.path(which), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        with self._lock:
            self.trims += 1

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

    def flush(self) -> None:
        for arr in self._maps.values():
            arr.flush()

    def counters(self) -> dict:
        return {"disk_trims": self.trims, "disk_resident_bytes": self.resident_bytes(),
                "disk_peak_bytes": self.peak_bytes, "disk_file_bytes": sum(a.nbytes for a in self._maps.values())}

    def close(self) -> None:
        for arr in self._maps.values():
            if arr._mmap is not None:
                arr._mmap.close()
        self._maps.clear()

    def remove(self) -> None:
        for which in ("rows", "state"):
            try:
                os.unlink(self.path(which))
            except FileNotFoundError:
                pass
