"""Backups of sparse tables (key_space="uint64"): what server.failover does differently for them.

A sparse table's key range r is the uint64 interval of `SparseRanges` range r; with backups it
lives on the same chain of B + 1 live nodes as dense range r (placement.chains), and its writes
travel that chain as any write does (server.chain). What differs is only the copies: a member
holds a `SparseShard` of the range (the keys written so far, nothing else), a SNAPSHOT carries
the written keys, their rows and updater state (`SparseShard.snapshot(lo, hi)`), and a node that
becomes the range's head promotes its copy into its main shard, which from then on serves the
interval too (`SparseShard.intervals`: client.stages.HeldRanges reads there, the restore of a
checkpoint loads there). A sparse table has no readers (localize refuses it: client.compat).

Threads and ownership: pskv-server, as server.failover (the copy a table's declaration makes, in
the main thread under `Copies.lock`).
"""

from __future__ import annotations

import logging

import numpy as np

from ..placement.ranges import KeyRanges
from ..store.sparse import SparseShard
from ..store.spec import TableSpec

log = logging.getLogger(__name__)


def fresh(spec: TableSpec, ranges: KeyRanges, r: int, rank: int) -> SparseShard:
    """Range r's copy as it starts: no key written."""
    return SparseShard(spec, rank, ranges.range_bounds(r))


def promote(r: int, copy: SparseShard, main: SparseShard) -> None:
    """This node heads range r now: its copy's keys, rows and state go into the main shard, which
    serves the range from now on (the interval is added last: a reader of `intervals` finds the rows)."""
    keys, rows, state = copy.snapshot()
    main.restore(keys, rows, state)
    if copy.key_range not in main.intervals:
        main.intervals = [*main.intervals, copy.key_range]
    log.info("node %d now serves key range %d of sparse table %r (%d keys)", main.rank, r, main.spec.name, len(keys))


def read(shard: SparseShard, ranges: KeyRanges, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(keys as int64, rows, state) of range r's written keys in `shard`: what a SNAPSHOT carries."""
    keys, rows, state = shard.snapshot(*ranges.range_bounds(r))
    return keys.view(np.int64), rows, state


def install(copy: SparseShard, keys: np.ndarray, rows: np.ndarray, state) -> SparseShard:
    """A SNAPSHOT of the range `copy` holds: a new copy with exactly its keys (ours may hold keys the
    head does not: written by a member that died before passing them on and never acknowledged)."""
    new = SparseShard(copy.spec, copy.rank, copy.key_range)
    new.restore(np.asarray(keys, np.int64).view(np.uint64), rows, state)
    return new
