"""Shared memory between the nodes of one host: the files a node's shards live in (issue 31).

A node of a cluster with more than one node keeps each in-memory dense shard (rows, updater
state, slot map, and a meta block with the stripe spinlocks) in files of a private directory,

    /dev/shm/pskv-<uid>/<cluster id>-<host>/<rank>.<pid>.t<table>.i<incarnation>.<what>

(0700 directories, 0600 files; `host` is the address the node binds, PSKV_HOST, so the nodes of
two emulated hosts never share one). Co-located nodes map each other's files (store.peer) and
read and update those rows in place under the shared stripe locks (store.spin), instead of
sending messages. A node removes its files when a shard is replaced and when it closes; the files
of a process that died (their name carries its PID) are swept when the next node on the host
starts. Meta block: int64 words (below), then the int32 spinlock words.

Threads and ownership: a `Segments` belongs to its node's Store (its lock guards `made`).
"""

from __future__ import annotations

import glob
import itertools
import logging
import mmap
import os
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import PskvError
from .spin import STRIDE, alive  # alive: one check, a zombie counting as dead (holders, owners, sweeps)

if TYPE_CHECKING:
    from .spec import TableSpec
    from .spin import Held

log = logging.getLogger(__name__)

MAGIC, PID, GEN, STATIC, RETIRED, START, STOP, CAPACITY, ROWS, DIM, WIDTH = range(11)  # the meta block's int64 words
META_WORDS = 16
MAGIC_VALUE = 0x70736B7673686D31  # "pskvshm1": written last, once the shard's files are complete
_NAME = re.compile(r"^(\d+)\.(\d+)\.t(\d+)\.i(\d+)\.([\w.]+)$")
_incarnations = itertools.count(1)


def root() -> str:
    """The per-user directory the cluster directories live in (0700)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"
    return os.path.join(base, f"pskv-{os.getuid()}")


def _private_dir(path: str) -> bool:
    """Make `path` 0700 (or find it so, owned by us); False when it is someone else's or open to others."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    return (
        st.st_uid == os.getuid() and (st.st_mode & 0o777) == 0o700 and os.path.isdir(path) and not os.path.islink(path)
    )


def host_dir(cluster: int, host: str) -> str | None:
    """The directory the nodes of `cluster` on `host` share, made if need be; None (no shared
    memory, with a warning) when a directory on the way is not private to this user."""
    top = root()
    path = os.path.join(top, f"{cluster:08x}-{re.sub(r'[^0-9A-Za-z.]', '_', host)}")
    if not (_private_dir(top) and _private_dir(path)):
        log.warning("shared memory off: %s is not a directory private to uid %d", path, os.getuid())
        return None
    return path


def sweep() -> int:
    """Remove the files of this user's processes that died (killed: they could not clean up), and
    cluster directories left empty for a minute (a younger one may be about to get its files);
    returns how many files went."""
    top, gone = root(), 0
    for d in glob.glob(os.path.join(top, "*")):
        for f in os.listdir(d) if os.path.isdir(d) else ():
            m = _NAME.match(f)
            if m and not alive(int(m.group(2))):
                try:
                    os.unlink(os.path.join(d, f))
                    gone += 1
                except FileNotFoundError:
                    pass
        try:
            if time.time() - os.stat(d).st_mtime > 60:
                os.rmdir(d)  # (only when empty)
        except OSError:
            pass
    return gone


def map_file(path: str, shape: tuple | None, dtype, create: bool = False) -> np.ndarray:
    """An array over the file at `path` (made 0600 and sized when `create`; `shape` None: 1-d over
    the whole file), shared with every process that maps it. The mapping lives as long as the
    array (and views of it)."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if shape is None:
            shape = (os.fstat(fd).st_size // np.dtype(dtype).itemsize,)
        size = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
        if create:
            os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    return np.frombuffer(mm, dtype, count=int(np.prod(shape))).reshape(shape)


def meta_block(stripes: int) -> tuple[tuple, type]:
    """The shape and dtype of a meta file: int32 words, the int64 header first, then the spinlocks
    (one cache line each: store.spin.STRIDE)."""
    return (2 * META_WORDS + stripes * STRIDE,), np.int32


def split_meta(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the int64 header words, the int32 spinlock words) of a meta block: views, shared."""
    return block[: 2 * META_WORDS].view(np.int64), block[2 * META_WORDS :]


class Segments:
    """One node's files in its host directory: made by its shards, removed when they retire."""

    def __init__(self, directory: str, rank: int) -> None:
        self.dir = directory
        self.rank = rank
        self.pid = os.getpid()
        self.made: set[str] = set()
        self._lock = threading.Lock()

    def prefix(self, table_id: int) -> str:
        """The start of the names of one shard's files (a new incarnation per call)."""
        return f"{self.rank}.{self.pid}.t{table_id}.i{next(_incarnations)}"

    def create(self, name: str, shape: tuple, dtype) -> np.ndarray:
        path = os.path.join(self.dir, name)
        try:
            arr = map_file(path, shape, dtype, create=True)
        except FileNotFoundError:  # the last node of the host closed and took the directory: again
            if not (_private_dir(os.path.dirname(self.dir)) and _private_dir(self.dir)):
                raise
            arr = map_file(path, shape, dtype, create=True)
        with self._lock:
            self.made.add(path)
        return arr

    def remove(self, name: str) -> None:
        path = os.path.join(self.dir, name)
        with self._lock:
            self.made.discard(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Remove every file still made (the node closes)."""
        with self._lock:
            paths, self.made = list(self.made), set()
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.dir)  # (the last node of the host to close)
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"<Segments {self.dir} files={len(self.made)}>"


def find_meta(directory: str, rank: int, table_id: int) -> tuple[str, np.ndarray] | None:
    """The live meta block of node `rank`'s shard of table `table_id` here: (its files' name
    prefix, the block), or None (no such shard on this host, or not complete yet)."""
    for path in glob.glob(os.path.join(directory, f"{rank}.*.t{table_id}.i*.meta")):
        try:
            block = map_file(path, None, np.int32)
        except (ValueError, OSError):  # (gone meanwhile, or still empty)
            continue
        if len(block) <= 2 * META_WORDS:
            continue
        header = split_meta(block)[0]
        if header[MAGIC] == MAGIC_VALUE and not header[RETIRED]:
            return os.path.basename(path)[: -len(".meta")], block
    return None


class Published:
    """The shared-memory side of a store.shard.Shard: its meta block, `static` mirrored there, its
    retirement (a mixin: the Shard holds `_seg`, `_prefix`, `_meta`, `_gen` and the arrays)."""

    # the Shard's, as this mixin reads them
    spec: TableSpec
    start: int
    stop: int
    width: int
    data: np.ndarray
    state: np.ndarray | None
    _seg: Segments | None  # shared: the node's files; None: private memory
    _prefix: str
    _meta: np.ndarray | None  # shared: the meta block's int64 header words
    _words: np.ndarray | None  # shared: the spinlock word of each stripe
    _gen: int
    _static: bool
    _locked: Callable[[np.ndarray | None], Held]

    def _publish(self, stripes: int) -> None:
        """Shared: the meta block, written last (MAGIC) so a peer maps only complete shards."""
        assert self._seg is not None  # (shared)
        block = self._seg.create(f"{self._prefix}.meta", *meta_block(stripes))
        header, self._words = split_meta(block)
        header[PID] = self._seg.pid
        header[STATIC] = 1
        header[START], header[STOP] = self.start, self.stop
        header[CAPACITY] = len(self.data)
        header[ROWS], header[DIM], header[WIDTH] = self.spec.rows, self.spec.dim, self.width
        header[MAGIC] = MAGIC_VALUE
        self._meta = header

    @property
    def static(self) -> bool:
        return self._static

    @static.setter
    def static(self, value: bool) -> None:  # (under every stripe)
        self._static = value
        if self._meta is not None:
            self._meta[STATIC] = int(value)

    @property
    def shared(self) -> bool:
        """Its rows are in shared memory, open to the node's co-located peers."""
        return self._meta is not None

    # ---- for the row-lock kernels (store.rowlock), which work on a shared shard's words -----------
    @property
    def lock_words(self) -> np.ndarray | None:
        """The spinlock word of each stripe (shared; None: private memory)."""
        return self._words

    @property
    def meta(self) -> np.ndarray | None:
        """The meta block's int64 header words (shared; None: private memory)."""
        return self._meta

    @property
    def generation(self) -> int:
        """The generation of its files of data and state (one more per grow): read it before the
        arrays, which a grow sets first."""
        return self._gen

    def follow(self) -> bool:
        """store.rowlock: the files changed under a row kernel; this shard's own `_grow` has already
        set its arrays (a peer view maps the new files: store.peer)."""
        return True

    def retire(self) -> None:
        """Shared: the shard is replaced or its node closes: peers stop using it, its files go."""
        if self._meta is None:
            return
        try:
            with self._locked(None):
                self._meta[RETIRED] = 1
        except PskvError:  # the node failed or closed while a stopped process held a stripe (store.spin.watch):
            self._meta[RETIRED] = 1  # retire without it; it writes into files already gone when it runs again
        assert self._seg is not None  # (shared: a meta block)
        for what in ("meta", "slot", f"rows.g{self._gen}", f"state.g{self._gen}"):
            self._seg.remove(f"{self._prefix}.{what}")
        self._meta = None
