"""Catalog: the tables this node knows, by name and by id; each a `TableState` with one part per technique.

Threads and ownership: the main thread adds tables (`node.table()`); every thread looks them up.
`_lock` guards the two maps. A `TableState`'s parts are made before it is added and never replaced;
its counters are GIL-atomic `+=` (approximate under threads).

The parts that client/ makes (the request path, node aggregation, intents and their copies) are
typed here by Protocols of what is used of them through a TableState: catalog sits below client in
the layer order (docs/design.md §1), so it names no client class, and mypy checks each class
against its Protocol where node/ hands it in.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .consistency.buffer import PushBuffer
from .consistency.cache import RowCache
from .errors import TableError, UnknownTable
from .net.future import Future
from .options import Consistency, TableOptions
from .placement.ranges import KeyRanges
from .store.shard import Shard
from .store.spec import TableSpec

if TYPE_CHECKING:
    from .net.codec import Codec
    from .store.intent_replicas import IntentReplicas


class RequestPath(Protocol):
    """A table's client.path.Path: its calls' first stages, and what a checkpoint and a flush ask of it."""

    request: Callable[..., Future]
    read: Callable[..., Future]
    push: Callable[..., Future]
    set: Callable[..., Future]
    push_pull: Callable[..., Future]
    localize: Callable[..., Future]
    peek: Callable[..., Any]
    sample: Callable[..., Any]

    def exchange(
        self,
        h: Any,
        keys: np.ndarray,
        values: np.ndarray,
        copy: bool | None,
        pulls: np.ndarray,
        out: np.ndarray | None,
        fresh: bool,
        codec: Codec | None,
    ) -> Future: ...
    def flush(self) -> None: ...
    def send_buffered(self, keys: np.ndarray, values: np.ndarray) -> Future: ...
    def hold(self) -> None: ...
    def release(self) -> None: ...
    def describe(self) -> dict[str, str]: ...


class RoundsPart(Protocol):
    """A NodeAggregate table's client.aggregate.Aggregator (level 1: a node's rounds)."""

    rounds: int
    messages: int

    def hold(self) -> None: ...
    def release(self) -> None: ...
    def leave(self, worker: Any) -> None: ...


class IntentsPart(Protocol):
    """A table's client.intents.NodeIntents (the node's intent windows of its keys)."""

    @property
    def pending(self) -> bool: ...
    def granted(self, keys: np.ndarray) -> None: ...
    def counters(self) -> dict: ...


class CopiesPart(Protocol):
    """A table's client.intent_sync.Copies (copies of keys several nodes intend)."""

    replicas: IntentReplicas | None
    rate: float
    next_sync: float

    def every(self, seconds: float) -> None: ...
    def make(self, keys: np.ndarray, intended: np.ndarray) -> Future | None: ...
    def round(self, flush: bool) -> list[Future]: ...
    def counters(self) -> dict: ...


@dataclasses.dataclass
class TableState:
    """A table as this node knows it: spec, key ranges, local shard, technique parts and counters."""

    spec: TableSpec
    ranges: KeyRanges
    shard: Shard
    options: TableOptions
    consistency: Consistency
    loc_cache: np.ndarray  # (rows,) int64 last known owner per key, -1 unknown; empty when off
    cache: RowCache | None = None  # BSP/SSP: copies of remote rows, shared by the node's workers
    buffer: PushBuffer | None = None  # BSP/SSP: remote updates waiting for the next flush
    aggregator: RoundsPart | None = None  # NodeAggregate: a client.aggregate.Aggregator (mshadow-ps level 1)
    # its client.path.Path, composed from the parts above once they are made: before the catalog holds the table
    path: RequestPath = dataclasses.field(init=False, repr=False, compare=False)
    codec: Codec | None = None  # node.table(filters=): this table's wire filters when a call gives none
    next_sync: float = 0.0  # Replicate: when the pskv-replica thread syncs this table next
    declined_until: np.ndarray | None = None  # (rows,) monotonic time before which localize skips a key; lazily
    intents: IntentsPart | None = None  # a client.intents.NodeIntents once a worker signaled an intent (table.intent)
    copies: CopiesPart | None = None  # a client.intent_sync.Copies: keys several nodes intend, copied here (dense,
    # not aggregated)
    pulls: int = 0  # calls
    pushes: int = 0
    local_keys: int = 0  # keys served from this node's memory without a message
    remote_keys: int = 0  # keys sent to another node
    shared_keys: int = 0  # of local_keys, those served from a co-located node's shard in shared memory (store.peer)
    localizes: int = 0  # keys this node asked to move here

    @property
    def sampling(self):
        return self.options.sampling

    def note_declined(self, keys: np.ndarray, owner: int, seconds: float) -> None:
        """pskv-server: a manager declined our localize of `keys` (another node's lease holds them at
        `owner` for `seconds` more). Remember where they are (location cache) and do not ask for
        them again until then: each ask would be declined, a LOCALIZE and a DECLINE for nothing. A
        hint, never a guarantee: localize skips the keys, pulls and pushes reach them wherever they are."""
        if self.loc_cache.size:
            self.loc_cache[keys] = owner
        if self.declined_until is None:
            self.declined_until = np.full(self.spec.rows, -np.inf)
        self.declined_until[keys] = time.monotonic() + seconds

    def counters(self) -> dict:
        """Calls and keys of this table on this node, and its technique parts' counters."""
        out = {
            "pulls": self.pulls,
            "pushes": self.pushes,
            "local_keys": self.local_keys,
            "remote_keys": self.remote_keys,
            "localizes": self.localizes,
        }
        if self.cache is not None:
            out.update(
                cache_hits=self.cache.hits,
                cache_misses=self.cache.misses,
                cache_evictions=self.cache.evictions,
                cache_rows=len(self.cache),
            )
        if self.buffer is not None:
            out.update(
                flushes=self.buffer.flushes, buffered_rows=self.buffer.rows_in, flushed_rows=self.buffer.rows_out
            )
        if self.aggregator is not None:
            out.update(aggregated_rounds=self.aggregator.rounds, aggregated_messages=self.aggregator.messages)
        disk = getattr(self.shard, "disk", None)  # (a sparse shard has none)
        if disk is not None:
            out.update(disk.counters())
        if self.intents is not None:
            out.update(self.intents.counters())
        return out

    def parts(self) -> list[str]:
        """Its technique parts, for debug dumps."""
        return [
            repr(x)
            for x in (self.buffer, self.cache, self.aggregator, self.shard.replicas, self.intents)
            if x is not None
        ]

    def stages(self) -> dict[str, str]:
        """Each call's stages on this node ({"pull": "replica > local > shared > route", ...}; client.path)."""
        return self.path.describe()


class Catalog:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._by_name: dict[str, TableState | None] = {}  # None: a declaration that failed (keeps ids aligned)
        self._by_id: dict[int, TableState] = {}
        self._lock = threading.Lock()  # guards both maps

    def next_id(self, name: str) -> int:
        """The id of a new table `name` (ids follow declaration order, the same on every node)."""
        with self._lock:
            if name in self._by_name:
                raise TableError(f"table {name!r} is already declared on node {self.rank}; declare each table once")
            return len(self._by_name)

    def add(self, state: TableState) -> None:
        with self._lock:
            self._by_name[state.spec.name] = self._by_id[state.spec.table_id] = state

    def discard(self, name: str) -> None:
        """A declaration the cluster refused: the name stays taken, so ids stay aligned; using it raises."""
        with self._lock:
            self._by_name[name] = None

    def get(self, name: str) -> TableState:
        state = self._by_name.get(name)
        if state is None:
            raise UnknownTable(
                f"no table {name!r} on node {self.rank}; declared tables: {self.names()}; "
                "declare it with node.table() on every node first"
            )
        return state

    def by_id(self, table_id: int) -> TableState | None:
        return self._by_id.get(table_id)

    def require(self, table_id: int) -> TableState:
        """Table `table_id`; UnknownTable if this node has not declared it (yet)."""
        state = self._by_id.get(table_id)
        if state is None:
            raise UnknownTable(
                f"node {self.rank} has no table with id {table_id}; every node declares the same "
                "tables in the same order"
            )
        return state

    def names(self) -> list[str]:
        return sorted(n for n, s in list(self._by_name.items()) if s is not None)

    def tables(self) -> list[TableState]:
        return [s for s in list(self._by_name.values()) if s is not None]

    def __len__(self) -> int:
        return len(self._by_name)

    # ---- across tables ------------------------------------------------------------------------------
    def flush_buffers(self) -> list[Future]:
        """Send every BSP/SSP table's buffered updates; their Futures (any thread)."""
        futures = [s.buffer.flush() for s in self.tables() if s.buffer is not None]
        return [f for f in futures if f is not None]

    def hold_rounds(self) -> None:
        """A checkpoint writes: no NodeAggregate round is applied or handed on until `release_rounds()`
        (each table's path: `Path.hold`; its other writes wait at the write gate)."""
        for s in self.tables():
            s.path.hold()

    def release_rounds(self) -> None:
        for s in self.tables():
            s.path.release()

    def clear_caches(self) -> None:
        """After a barrier, cached rows may miss updates issued before it: drop them."""
        for s in self.tables():
            if s.cache is not None:
                s.cache.clear()
