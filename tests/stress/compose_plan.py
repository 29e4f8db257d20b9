"""The composition stress's plan and oracle, shared by the harness (test_compose.py) and the nodes
(compose_node.py): what a seed draws, and the exact state that a sequential replay of each worker's
pushes gives.

A plan: 2 or 3 nodes x 1 or 2 worker threads, backups or not, and 2 to 4 tables of different kinds
at once (dense; dense with Relocate(lease=0) and localizes; dense with replicated hot keys; sparse
uint64 keys, asynchronous or SSP(1); dense SSP(1) with a row cache; dense on disk with a small page budget,
localized too), each with the add updater and small integer values, so
that every sum is exact in float32 whatever the order. Each worker thread (global id `gid`) runs a
seeded sequence of steps; a step pushes to one or two tables, and every push also adds [1, 1] to the
worker's own counter row `gid` of that table. So a table's counter rows say how many of each
worker's pushes a state holds, and the rest of the table must equal the replay of exactly those
pushes. A checkpoint is a consistent cut when, for every worker, its counts in all tables are those
of one prefix of its pushes.

Then the last checkpoint is restored onto another node count (1 to 3) with other options (hot keys
added, changed or dropped; relocation dropped), checked against the checkpoint's own content, and
trained on (more known pushes), checked again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

ROWS, DIM = 512, 2
COUNTERS = 16  # rows [0, COUNTERS): one counter row per worker (gid); data keys are above
SPARSE_POOL = 300  # the sparse table's data keys: this many uint64 ids spread over the whole space
KINDS = ("dense", "reloc", "hot", "sparse", "ssp", "disk", "sparse_ssp")


def sparse_ids() -> np.ndarray:
    """(SPARSE_POOL,) uint64 data keys of the sparse table, spread over every node's range."""
    x = np.arange(1, SPARSE_POOL + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # wraps: spread out
    return np.unique(x | np.uint64(1 << 20))  # never a counter key


@dataclass
class Plan:
    seed: int
    nodes: int
    threads: int
    backups: int
    tables: list[str]
    steps: int
    checkpoints: int
    hot: list[int]  # the hot table's replicated keys at the start
    restore_nodes: int
    restore_hot: list[int] | None  # the hot table's keys on restore (None: not replicated then)
    restore_extra_hot: list[int] | None  # the dense table replicated on restore (None: as before)
    steps_after: int
    gids: list[int] = field(default_factory=list)
    event: str | None = None  # during training: "join" (a node joins and pushes too; with or without backups),
    #   "leave" (victim leaves after its pushes), "kill" (victim SIGKILLed; backups), "stop" (victim SIGSTOPped
    #   past failure_timeout; backups)
    victim: int = -1

    @property
    def pushers(self) -> list[int]:
        """The workers whose pushes the tables hold: a killed or stopped victim pushes nothing (it pulls and
        localizes), a joiner (rank `nodes`) pushes too."""
        gids = [g for g in self.gids if not (self.event in ("kill", "stop") and g // self.threads == self.victim)]
        if self.event == "join":
            gids += [self.nodes * self.threads + t for t in range(self.threads)]
        return gids

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.nodes} nodes x {self.threads} threads, backups {self.backups}, tables "
                f"{self.tables}, {self.steps} steps, {self.checkpoints} checkpoints; restore on "
                f"{self.restore_nodes} nodes, hot {self.hot} -> {self.restore_hot}, dense hot {self.restore_extra_hot}; "
                f"event {self.event} (node {self.victim})")


def plan(seed: int) -> Plan:
    rng = random.Random(seed)
    nodes, threads = rng.choice([2, 3]), rng.choice([1, 2])
    backups = 1 if nodes == 3 and rng.random() < 0.4 else 0
    kinds = [k for k in KINDS if not (backups and k == "disk")]  # disk tables with backups: refused (ConfigError)
    tables = sorted(rng.sample(kinds, rng.randint(2, min(4, len(kinds)))))
    hot = sorted(rng.sample(range(COUNTERS + 1, ROWS), 6) + rng.sample(range(COUNTERS), 2))
    change = rng.choice(["same", "other", "drop"])
    restore_hot = hot if change == "same" else None if change == "drop" else sorted(
        rng.sample(hot, 3) + rng.sample(range(COUNTERS, ROWS), 4))
    extra = sorted(rng.sample(range(ROWS), 5)) if rng.random() < 0.5 else None
    p = Plan(seed, nodes, threads, backups, tables, rng.randint(60, 120), rng.randint(2, 4), hot,
             rng.choice([1, 2, 3]), restore_hot, extra, 20, [r * threads + t for r in range(nodes)
                                                             for t in range(threads)])
    events = random.Random(seed * 7919 + 1)  # (its own draws: the tables of a seed stay as they were)
    p.event = events.choice([None, "kill", "stop", "join"] if backups else [None, "join", "leave"])
    p.victim = events.randrange(nodes) if p.event else -1
    sparse = [t for t in p.tables if t.startswith("sparse")]
    if backups and p.event == "join" and sparse:  # a joiner's sparse table with backups: refused (ConfigError)
        if len(p.tables) - len(sparse) >= 2:
            p.tables = [t for t in p.tables if t not in sparse]
        else:
            p.event, p.victim = None, -1
    if p.event in ("join", "leave"):
        p.checkpoints = 0  # (a checkpoint is collective: a joiner would have to know how many are left)
    return p


def steps(p: Plan, gid: int, count: int | None = None, salt: int = 0) -> list[list[tuple]]:
    """Worker gid's steps: each a list of ops ("push", table, keys, values) / ("loc", table, keys) /
    ("pull", table, keys). Keys are int64 row ids, or uint64 ids for the sparse table."""
    rng = np.random.default_rng([p.seed, gid, salt])
    pool = sparse_ids()
    out = []
    for _ in range(p.steps if count is None else count):
        ops = []
        for name in rng.choice(p.tables, size=int(rng.integers(1, 3)), replace=False):
            k = int(rng.integers(1, 9))
            if name.startswith("sparse"):
                keys = np.concatenate([[np.uint64(gid)], rng.choice(pool, k)]).astype(np.uint64)
            else:
                keys = np.concatenate([[gid], rng.integers(COUNTERS, ROWS, k)]).astype(np.int64)
            values = rng.integers(-3, 4, (k + 1, DIM)).astype(np.float32)
            values[0] = 1.0  # the counter row
            ops.append(("push", str(name), keys, values))
        for name in ("reloc", "disk"):
            if name in p.tables and rng.random() < 0.3:
                ops.append(("loc", name, rng.integers(0, ROWS, 12).astype(np.int64)))
        if rng.random() < 0.2:
            name = str(rng.choice(p.tables))
            keys = rng.choice(pool, 4) if name.startswith("sparse") else rng.integers(0, ROWS, 6).astype(np.int64)
            ops.append(("pull", name, keys))
        out.append(ops)
    return out


def pushes(seq: list[list[tuple]]) -> list[str]:
    """The tables of a worker's pushes, in the order it issued them."""
    return [op[1] for ops in seq for op in ops if op[0] == "push"]


def replay(seqs: dict[int, list[list[tuple]]], table: str, counts: dict[int, int], base=None):
    """The state of `table` after the first counts[gid] pushes of each worker to it, on top of `base`
    (a dense (ROWS, DIM) array, or a sparse {key: row} dict); returns the same kind."""
    sparse = table.startswith("sparse")
    state = dict(base or {}) if sparse else (np.zeros((ROWS, DIM), np.float64) if base is None
                                              else base.astype(np.float64))
    for gid, seq in seqs.items():
        left = counts.get(gid, 0)
        for ops in seq:
            for op in ops:
                if left and op[0] == "push" and op[1] == table:
                    left -= 1
                    if sparse:
                        for key, row in zip(op[2].tolist(), op[3]):
                            state[key] = state.get(key, np.zeros(DIM)) + row
                    else:
                        np.add.at(state, op[2], op[3])
        assert left == 0, f"worker {gid} has fewer pushes to {table!r} than {counts.get(gid)}"
    return state


def cut_of(seqs: dict[int, list[list[tuple]]], tables: dict[str, object]) -> dict[int, dict[str, int]]:
    """For a state (table name -> dense array, or sparse {key: row}), each worker's counts of pushes per
    table, read from its counter rows. Raises AssertionError unless they are those of one prefix of
    the worker's pushes (a consistent cut: every push it issued before the cut, none after)."""
    cut = {}
    for gid, seq in seqs.items():
        counts = {}
        for name, state in tables.items():
            row = state.get(gid, np.zeros(DIM)) if name.startswith("sparse") else state[gid]
            assert row[0] == int(row[0]) and row[0] == row[1], f"table {name!r}: counter of worker {gid} is {row}"
            counts[name] = int(row[0])
        order = pushes(seq)
        prefix = sum(counts.values())
        head = {name: order[:prefix].count(name) for name in tables}
        assert prefix <= len(order) and head == counts, (
            f"worker {gid}: counts {counts} are no prefix of its pushes (the first {prefix} hold {head}): "
            "not a consistent cut")
        cut[gid] = counts
    return cut


def as_sparse(keys: np.ndarray, values: np.ndarray) -> dict:
    return {int(k): np.asarray(v, np.float64) for k, v in zip(keys.tolist(), values)}
