"""Options of a table, one object per technique: consistency, where keys live, hot-key copies, sampling,
caching, aggregation.

    node.table("emb", rows, dim, updater=pskv.Adagrad(0.1),
               placement=pskv.Relocate(location_caches=True),       # Lapse: keys move to their users
               replicate=pskv.Replicate(hottest=1000, frequencies=counts),  # NuPS: hot keys everywhere
               sampling=pskv.Sampling(weights, scheme="pool"),       # NuPS: sampling access
               consistency=pskv.SSP(2), cache=pskv.Cache(rows=50_000))  # Bösen: bounded staleness
    node.table("dense", rows, dim, consistency=pskv.BSP(), aggregate=pskv.NodeAggregate())  # mshadow-ps

Each object checks its own values when made (ConfigError otherwise), so a mistake shows where it
was written. `TableOptions.of(...)` gathers a table's options, turns the keywords of earlier
releases (`location_caches=`, `replicate=KEYS`, `frequencies=`, `syncs_per_sec=`, `threshold=`,
`cache_rows=`, `buffer_rows=`, `aggregate="node"`) into these objects with a DeprecationWarning,
and rejects combinations that do not mix.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .errors import ConfigError, ConsistencyError, TableError

SCHEMES = ("naive", "preloc", "pool", "onlylocal")


# ---- consistency (the machinery is in pskv.consistency) -------------------------------------------
@dataclasses.dataclass(frozen=True)
class Consistency:
    """A consistency model: the staleness s a pull may see (0: BSP, inf: Async)."""

    staleness: float = math.inf

    @property
    def spec(self) -> str:
        """The model as text: 'async', 'bsp' or 'ssp:S' (PSKV_CONSISTENCY, `--consistency`)."""
        if self.staleness == math.inf:
            return "async"
        return "bsp" if self.staleness == 0 else f"ssp:{int(self.staleness)}"

    @property
    def synchronous(self) -> bool:
        return self.staleness != math.inf

    def __repr__(self) -> str:
        if self.staleness == math.inf:
            return "Async()"
        return "BSP()" if self.staleness == 0 else f"SSP(staleness={int(self.staleness)})"


def BSP() -> Consistency:
    """Bulk synchronous: a pull at clock c sees every update stamped <= c - 1 (SSP with s = 0)."""
    return Consistency(0)


def SSP(staleness: int = 1) -> Consistency:
    """Stale synchronous parallel: a pull at clock c sees every update stamped <= c - staleness - 1."""
    if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
        raise ConsistencyError(f"SSP staleness must be an integer >= 0, got {staleness!r}")
    return Consistency(int(staleness))


def Async() -> Consistency:
    """No clock bound: pulls never wait (the default)."""
    return Consistency(math.inf)


def as_consistency(value) -> Consistency:
    """A Consistency from itself, None (Async) or text: 'async', 'bsp', 'ssp:3', 'ssp(3)'."""
    if value is None:
        return Async()
    if isinstance(value, Consistency):
        return value
    text = str(value).strip().lower()
    if text in ("async", "asp"):
        return Async()
    if text == "bsp":
        return BSP()
    m = re.fullmatch(r"ssp[:(=]?\s*(\d+)\)?", text)
    if m:
        return SSP(int(m.group(1)))
    raise ConsistencyError(
        f"unknown consistency {value!r}; use pskv.BSP(), pskv.SSP(staleness=s), pskv.Async() "
        "or the text 'bsp', 'ssp:S', 'async'"
    )


# ---- placement, replication, caching, aggregation --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Relocate:
    """Lapse's dynamic parameter allocation: `table.localize(keys)` moves keys to the caller's node.

    Every table can relocate. `location_caches=True` remembers where relocated keys were last
    answered from, to skip the hop through their manager (changes latency, never results).

    `lease`: seconds a node keeps the keys its localize moved to it. The keys' manager declines a
    localize by another node of keys moved within the lease; that node then reads and updates
    them remotely, where they are. Without it, nodes that want the same keys (a KGE batch's
    relations, uniform negatives) take them from each other on every batch and wait for the
    TRANSFERs: measured 2-4x slower than static placement on 4 nodes (benchmarks/RESULTS.md,
    issue 11). The n-th move of a key holds it for 2**(n-1) leases (at most 1024): keys that nodes
    keep taking from each other soon stay put. 0: every localize moves the keys (Lapse). Changes
    placement, never results.

    `intent_sync`: seconds between two sync rounds of this table's copies of keys that several nodes
    intend (client.intent_sync); fewer rounds send fewer bytes and show other nodes' pushes later.
    `math.inf`: no rounds, the copies' pushes leave at flushes only (barrier, checkpoint, leave).
    None: the node's (`pskv.init(intent_sync=)`, PSKV_INTENT_SYNC, default 0.5)."""

    location_caches: bool = False
    lease: float = 10.0
    intent_sync: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.lease <= 3600:
            raise ConfigError(f"pskv.Relocate(lease={self.lease}): seconds between 0 and 3600")
        if self.intent_sync is not None and not self.intent_sync > 0:  # (also rejects nan)
            raise ConfigError(
                f"pskv.Relocate(intent_sync={self.intent_sync}): seconds between two sync rounds of the "
                "table's intent copies must be > 0 (math.inf: none, the copies sync at flushes only; "
                "None: the node's, pskv.init(intent_sync=) or PSKV_INTENT_SYNC)"
            )


@dataclasses.dataclass(frozen=True)
class Replicate:
    """NuPS hot-key replication: a copy of some keys on every node, synced in the background.

    `keys`: the keys to replicate; or `hottest=N` with `frequencies` (one count per row): the N
    most frequent rows. Each node's changes go to the others `syncs_per_sec` times a second, for
    keys whose change exceeds `threshold` (L2 norm; 0: every changed key)."""

    keys: object = None
    hottest: int | None = None
    frequencies: object = None
    syncs_per_sec: float = 25.0
    threshold: float = 0.0

    def __post_init__(self) -> None:
        if (self.keys is None) == (self.hottest is None):
            raise ConfigError("pskv.Replicate needs exactly one of keys=KEYS or hottest=N (with frequencies=)")
        if self.hottest is not None and (self.frequencies is None or int(self.hottest) < 0):
            raise ConfigError(
                f"pskv.Replicate(hottest={self.hottest}) needs frequencies= (one count per row) and hottest >= 0"
            )
        if self.syncs_per_sec < 0 or self.threshold < 0:
            raise ConfigError(
                f"pskv.Replicate: syncs_per_sec={self.syncs_per_sec} and threshold={self.threshold} "
                "must be >= 0 (syncs_per_sec=0: only worker.wait_replica_sync() sends)"
            )


@dataclasses.dataclass(frozen=True)
class Cache:
    """Bösen's row cache and push buffer of a BSP/SSP table on each node.

    `rows`: copies of remote rows kept (default min(rows, 100,000); 0: none). Remote updates
    wait, duplicates summed, until the node's clock advances or `buffer_rows` are waiting."""

    rows: int | None = None
    buffer_rows: int = 1 << 16

    def __post_init__(self) -> None:
        if (self.rows is not None and self.rows < 0) or self.buffer_rows < 1:
            raise ConfigError(
                f"pskv.Cache(rows={self.rows}, buffer_rows={self.buffer_rows}): use rows >= 0 and buffer_rows >= 1"
            )

    def capacity(self, table_rows: int) -> int:
        return min(table_rows, 100_000) if self.rows is None else int(self.rows)


@dataclasses.dataclass(frozen=True)
class NodeAggregate:
    """mshadow-ps's two levels: the node sums its worker threads' pushes of a key per round, and one
    update per node and round goes to the key's owner (see pskv.client.aggregate)."""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """A table's sampling distribution and default scheme.

    `dist`: one non-negative weight per row, or a function `draw(rng, n) -> keys`."""

    dist: npt.ArrayLike | Callable[[np.random.Generator, int], npt.ArrayLike]  # weights: an ndarray once made
    scheme: str = "naive"
    group_size: int = 256  # keys localized together by the pool scheme
    reuse: int = 1  # how often the pool scheme hands out each drawn key
    postpone: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"sampling scheme {self.scheme!r} is not one of {SCHEMES}")
        if self.group_size < 1 or self.reuse < 1:
            raise ConfigError(f"group_size={self.group_size} and reuse={self.reuse} must be >= 1")
        if not callable(self.dist):
            try:
                w = np.asarray(self.dist, np.float64)
            except (TypeError, ValueError):
                w = np.zeros(0)
            if w.ndim != 1 or (w < 0).any() or not w.sum() > 0:
                raise ConfigError(
                    f"sampling weights {str(self.dist)[:60]} must be a 1-D array of non-negative numbers "
                    "with a positive sum, or a function draw(rng, n) -> keys"
                )
            object.__setattr__(self, "dist", w / w.sum())

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if callable(self.dist):
            return np.asarray(self.dist(rng, n), np.int64)
        assert isinstance(self.dist, np.ndarray)  # (__post_init__ made it one)
        return rng.choice(len(self.dist), size=n, p=self.dist).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class TableOptions:
    """The techniques of one table, checked to mix."""

    placement: Relocate = Relocate()
    replicate: Replicate | None = None
    sampling: Sampling | None = None
    cache: Cache = Cache()
    aggregate: NodeAggregate | None = None

    @classmethod
    def of(
        cls, name: str, placement=None, replicate=None, sampling=None, cache=None, aggregate=None, **old
    ) -> TableOptions:
        """The options of table `name` from node.table()'s keywords (old ones deprecated)."""
        placement, replicate, cache, aggregate = _from_old(name, placement, replicate, cache, aggregate, old)
        for value, kind, word in (
            (placement, Relocate, "placement"),
            (replicate, Replicate, "replicate"),
            (sampling, Sampling, "sampling"),
            (cache, Cache, "cache"),
            (aggregate, NodeAggregate, "aggregate"),
        ):
            if value is not None and not isinstance(value, kind):
                raise ConfigError(f"table {name!r}: {word}={value!r}; use pskv.{kind.__name__}(...)")
        if aggregate is not None and (replicate is not None or (placement or Relocate()).location_caches):
            raise TableError(
                f"table {name!r}: aggregate=pskv.NodeAggregate() does not mix with replicate= or "
                "location caches; an aggregated table keeps its static placement (one technique "
                "per table)"
            )
        return cls(placement or Relocate(), replicate, sampling, cache or Cache(), aggregate)


_OLD = ("location_caches", "frequencies", "syncs_per_sec", "threshold", "cache_rows", "buffer_rows")


def _from_old(name, placement, replicate, cache, aggregate, old: dict):
    """Turn the keywords of earlier releases into option objects, warning once per call."""
    unknown = sorted(set(old) - set(_OLD))
    if unknown:
        raise ConfigError(f"table {name!r}: unknown option(s) {unknown}; see help(pskv.Node.table)")
    raw_replicate = replicate is not None and not isinstance(replicate, Replicate)
    raw_aggregate = isinstance(aggregate, str)
    if not (old or raw_replicate or raw_aggregate):
        return placement, replicate, cache, aggregate
    words = sorted(old) + ["replicate"] * raw_replicate + ["aggregate"] * raw_aggregate
    warnings.warn(
        f"table {name!r}: keyword(s) {words} are deprecated; use placement=pskv.Relocate(...), "
        "replicate=pskv.Replicate(...), cache=pskv.Cache(...), aggregate=pskv.NodeAggregate()",
        DeprecationWarning,
        stacklevel=4,
    )
    if "location_caches" in old:
        placement = Relocate(location_caches=bool(old["location_caches"]))
    if raw_replicate:
        sync = {k: old[k] for k in ("syncs_per_sec", "threshold") if k in old}
        if isinstance(replicate, (int, np.integer)) and not isinstance(replicate, bool):
            replicate = Replicate(hottest=int(replicate), frequencies=old.get("frequencies"), **sync)
        else:
            replicate = Replicate(keys=replicate, **sync)
    if "cache_rows" in old or "buffer_rows" in old:
        cache = Cache(old.get("cache_rows"), old.get("buffer_rows", 1 << 16))
    if raw_aggregate:
        if aggregate != "node":
            raise TableError(f"table {name!r}: aggregate={aggregate!r}; use pskv.NodeAggregate()")
        aggregate = NodeAggregate()
    return placement, replicate, cache, aggregate
