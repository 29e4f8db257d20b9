"""Restoring tables from a checkpoint (`pskv.init(restore=PATH)`).

When a table the checkpoint holds is declared, its spec must match (else TableMismatch naming the
checkpoint) and each node loads the rows of its key range from every node's files (re-sharded onto
the new key ranges; relocated rows come home), then the saved replicas' rows (a key replicated when
saved but not now comes home with its replica's value). The keys replicated now, whichever they
were then, get their saved values: the saved replica's if it was replicated then, else the saved
home row's, with the updater state that goes with it.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import CheckpointError, TableMismatch
from ..store.replicas import Replicas
from ..store.shard import Shard
from ..store.sparse import SparseShard
from . import format as fmt

log = logging.getLogger(__name__)


class Restorer:
    """Tables of the checkpoint a cluster starts from (`pskv.init(restore=PATH)`)."""

    def __init__(self, path, rank: int) -> None:
        self.path = fmt.resolve(path)
        self.manifest = fmt.read_manifest(self.path)
        fmt.verify(self.path, self.manifest)  # on every node: a damaged file stops all of them, before any table
        self.rank = rank
        log.info("node %d restores from checkpoint %s (step %d)", rank, self.path, self.manifest["step"])

    @property
    def extra(self) -> dict:
        return self.manifest.get("extra", {})

    def match(self, config: dict) -> tuple[dict | None, TableMismatch | None]:
        """(the checkpoint's entry of a table being declared with `config` (TableSpec.config()), or
        None if it has no such table; the TableMismatch to raise if the specs differ, else None)."""
        entry = self.manifest["tables"].get(config["name"])
        if entry is None:
            return None, None
        saved = {k: entry[k] for k in ("rows", "dim", "dtype", "updater")}
        wanted = {k: config[k] for k in ("rows", "dim", "dtype", "updater")}
        if saved != wanted:
            diff = ", ".join(f"{k} {saved[k]!r} there but {wanted[k]!r} here" for k in saved if saved[k] != wanted[k])
            return None, TableMismatch(
                f"table {config['name']!r} differs from checkpoint {self.path}: {diff}; declare "
                "it as it was saved (or restore without it: pskv.load_checkpoint reads any "
                "table)"
            )
        return entry, None

    def load(self, entry: dict, shard: Shard | SparseShard) -> int:
        """Put the saved rows and state of `shard`'s key range into it (this node's shard, or a copy
        it holds as a backup); returns the rows loaded."""
        if isinstance(shard, SparseShard):
            return self._load_sparse(entry, shard)
        wanted = np.arange(shard.start, shard.stop, dtype=np.int64)
        seen = np.zeros(len(wanted), bool)

        def into(keys: np.ndarray):  # a run of the shard's own keys: read straight into its rows
            if not shard.static or not len(keys) or keys[-1] - keys[0] + 1 != len(keys):
                return None, None
            rows = shard.data[keys[0] - shard.start : keys[-1] + 1 - shard.start]
            return rows, None if shard.state is None else shard.state[
                keys[0] - shard.start : keys[-1] + 1 - shard.start
            ]

        disk = getattr(shard, "disk", None)  # a disk table: read in chunks, its pages dropped after each
        for keys, rows, st in fmt.table_parts(
            self.path, entry, (shard.start, shard.stop), into, None if disk is None else disk.trim
        ):  # replicas last
            if (
                len(keys)
                and np.shares_memory(rows, shard.data)
                and ((st is None and shard.state is None) or (st is not None and np.shares_memory(st, shard.state)))
            ):
                seen[keys - shard.start] = True  # read in place
                continue
            state = st
            if (st is None) != (shard.state is None):
                if st is not None or not seen[keys - shard.start].all():
                    raise CheckpointError(
                        f"checkpoint {self.path}: the updater state of table {entry['name']!r} "
                        "does not fit its updater; the checkpoint is damaged: use an older one"
                    )
                state = shard.read(keys)[1]  # replicas saved without state: the home rows' stays
            shard.overwrite(keys, rows, state)
            seen[keys - shard.start] = True
        if not seen.all():
            raise CheckpointError(
                f"checkpoint {self.path}: table {entry['name']!r} lacks {int((~seen).sum())} rows "
                f"of node {self.rank}'s key range; the checkpoint is damaged: use an older one"
            )
        if shard.replicas is not None:
            self._load_replicas(entry, shard.replicas)
        return len(wanted)

    def _load_sparse(self, entry: dict, shard) -> int:
        """A sparse table: the saved keys of this node's range of the uint64 space (any node's file may
        hold some: the cluster may have had another size), with their rows and state."""
        loaded = 0
        for saved, rows, st in fmt.table_parts(self.path, entry):
            keys = np.asarray(saved).view(np.uint64)
            mine = np.zeros(len(keys), bool)
            for lo, hi in shard.intervals:  # its range, and with backups those it heads now (server.sparse_copies)
                mine |= (keys >= np.uint64(lo)) & (keys < np.uint64(hi)) if hi < 1 << 64 else keys >= np.uint64(lo)
            if mine.any():
                shard.restore(keys[mine], rows[mine], None if st is None else st[mine])
                loaded += int(mine.sum())
        return loaded

    def _load_replicas(self, entry: dict, replicas: Replicas) -> None:
        """Every key replicated now gets its saved value and state: its replica's if it was replicated
        when saved, else its home row's, from whichever node's file holds it (the replicas' files
        come last and win; a few rows each, read from the memory-mapped files)."""
        keys = replicas.keys  # (m,) sorted
        m, spec = len(keys), replicas.spec
        rows = np.empty((m, spec.dim), spec.dtype)
        state = None if replicas.state is None else np.empty((m, replicas.state.shape[1]), replicas.state.dtype)
        found, stated = np.zeros(m, bool), np.zeros(m, bool)
        for part in list(entry["files"]) + ([entry["replicas"]] if entry.get("replicas") else []):
            saved = np.asarray(fmt.open_array(self.path, part["keys"]))  # sorted, as written
            if not len(saved) or not m:
                continue
            at = np.minimum(np.searchsorted(saved, keys), len(saved) - 1)
            hit = saved[at] == keys
            if not hit.any():
                continue
            rows[hit] = fmt.open_array(self.path, part["rows"])[at[hit]]
            found |= hit
            if state is not None and part.get("state"):
                state[hit] = fmt.open_array(self.path, part["state"])[at[hit]]
                stated |= hit
        name = entry["name"]
        if not found.all():
            raise CheckpointError(
                f"checkpoint {self.path}: table {name!r} lacks the rows of replicated keys "
                f"{keys[~found][:5].tolist()}; the checkpoint is damaged: use an older one"
            )
        if state is not None and not stated.all():
            raise CheckpointError(
                f"checkpoint {self.path}: table {name!r} lacks the updater state of replicated "
                f"keys {keys[~stated][:5].tolist()} (pskv.Replicate); the checkpoint is damaged: "
                "use an older one"
            )
        replicas.restore(rows, state, self.rank)
