"""Taking a checkpoint (every node calls `node.checkpoint`) and restoring tables from one.

A checkpoint is a consistent cut: every push any worker issued before its node entered the call
is in it, none issued after. Each node, in `Checkpointer.take`:

    1. closes its write gate (a push, set or localize from now on waits in Table until the gate
       opens; one already past the gate is sent first),
       sends its BSP/SSP push buffers and replica changes, and waits until every request it
       sent before is answered (RequestTracker ids below the mark; a localize is answered when
       its rows landed: no row is in TRANSFER, in neither node's file);
    2. barrier: every node's earlier writes are applied everywhere, every gate is closed;
       aggregated tables hold their rounds (client.aggregate: whole rounds, those applied before);
    3. writes the rows (and updater state) it owns, table by table, as .npy files, fsynced,
       and a part file listing them with their checksums and the epochs it saw;
    4. barrier: every shard is on disk; the gate opens (writes go on);
    5. the lowest live node decides: manifest.json (renamed into place last; refused when a dense
       table's files miss a row: CheckpointError) and removal of old checkpoints (`keep`), or
       DECISION "retry" (the membership changed) or "failed"; barrier: every node reads the
       decision, so all return, take it again or raise alike.

A node killed in the middle leaves no manifest: the checkpoint is incomplete, never read, and the
previous one is whole. Without backups the others then stop with NodeFailure; with backups they
go on, see the new membership epoch and take the checkpoint again (a new step). Restoring
(`Restorer`): when a table a checkpoint holds is declared, its
spec must match (else TableMismatch naming the checkpoint) and each node loads the rows of its key
range from every node's files (re-sharded onto the new key ranges; relocated rows come home).

Threads and ownership: `take` runs in the calling thread (the main thread, or one worker thread
per node); it must not run while other threads of the node are in a barrier (both use the
coordinator's barriers, whose generations must match on every node). `Gate` is shared with every
Table of the node: `wait()` in any thread, `close()`/`open()` by `take`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import _hooks
from ..catalog import Catalog, TableState
from ..errors import CheckpointError
from ..net.requests import RequestTracker
from ..store.sparse import SparseShard
from . import format as fmt

log = logging.getLogger(__name__)
_ATTEMPTS = 3  # tries of a checkpoint whose membership changed meanwhile (backups)
DECISION = "decision.json"  # an incomplete checkpoint's outcome: {"decision": "retry" | "failed", "reason"}


class Gate:
    """Holds a node's writes while it takes a checkpoint: `close()` returns once no write is between
    its check and its send, and every later write waits in `enter()` until `open()`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()  # guards _closed and _active
        self._closed = False
        self._active = 0  # writes between enter() and leave()

    def enter(self, check: Callable[[], None]) -> None:
        """Before a push or set (which then calls `leave()`): waits while the gate is closed;
        `check()` (the node's health) raises meanwhile if the node failed."""
        with self._cond:
            while self._closed:
                self._cond.wait(0.05)
                check()
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if not self._active:
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            while self._active:
                self._cond.wait()

    def open(self) -> None:
        with self._cond:
            self._closed = False
            self._cond.notify_all()


class Checkpointer:
    def __init__(
        self,
        rank: int,
        catalog: Catalog,
        tracker: RequestTracker,
        check: Callable[[], None],
        *,
        members: Callable[[], list[int]],
        barrier: Callable[[], None],
        flush_replicas: Callable[[], None],
        clock: Callable[[], int],
        epoch: Callable[[], int],
    ) -> None:
        self.rank = rank
        self._catalog = catalog
        self._tracker = tracker  # this node's requests in flight
        self._check = check  # raises the node's failure
        self._members = members  # the live ranks
        self._barrier = barrier  # the coordinator's barrier over every live node
        self._flush_replicas = flush_replicas
        self._clock = clock  # the global clock (BSP/SSP)
        self._epoch = epoch  # the membership epoch
        self.gate = Gate()
        self._failure: str | None = None  # the decider's own failure when it could not write DECISION

    def take(
        self, directory, keep: int | None = None, extra: dict | None = None, timeout: float = 600.0
    ) -> fmt.CheckpointInfo:
        directory = Path(directory)
        if keep is not None and int(keep) < 1:
            raise CheckpointError(f"keep={keep!r}: keep at least the newest checkpoint (keep >= 1), or None for all")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"node {self.rank} cannot create checkpoint directory {directory}: {exc}; give a "
                "directory every node can write (a shared file system for nodes on several "
                "hosts)"
            ) from None
        for _ in range(_ATTEMPTS):
            info = self._attempt(directory, keep, extra, timeout)
            if info is not None:
                return info
            log.warning("node %d: the membership changed during checkpoint; taking it again", self.rank)
        raise CheckpointError(
            f"node {self.rank}: the membership changed during each of {_ATTEMPTS} attempts to "
            f"checkpoint into {directory}; nodes keep dying: look at the failures first"
        )

    def _attempt(
        self, directory: Path, keep: int | None, extra: dict | None, timeout: float
    ) -> fmt.CheckpointInfo | None:
        """One try; None if a node died meanwhile (backups: the others go on, the files may lack its rows).

        Whether the try is complete, to be taken again or failed is one decision for every node: the
        lowest live node makes it after barrier 2 and writes it down (manifest.json, or DECISION),
        and every node reads it after barrier 3. Each node deciding on its own from the epoch it saw
        split the cluster: one went on to the next try's barrier 1 while another waited in barrier 3."""
        epoch = self._epoch()
        self.gate.close()
        try:
            self._catalog.flush_buffers()
            self._flush_replicas()
            self._drain(timeout)
            step = max((s for s, _, _ in fmt.steps(directory)), default=0) + 1  # before anyone makes the next
            self._barrier()  # 1: every earlier write is applied everywhere; every gate is closed
            self._catalog.hold_rounds()  # aggregated tables: no round is applied while the files are written
            path = fmt.step_dir(directory, step)
            path.mkdir(exist_ok=True)
            _hooks.reach("checkpoint.writing", node=self.rank, step=step, path=path)
            self._write_shards(path, epoch)
            self._barrier()  # 2: every shard is on disk (a death before it is known to all now)
        finally:
            self._catalog.release_rounds()
            self.gate.open()
        decider = min(self._members())
        if self.rank == decider:
            self._decide(path, step, extra, keep, epoch)
        self._barrier()  # 3: the decision is on disk
        return self._outcome(path, epoch, decider)

    def _decide(self, path: Path, step: int, extra: dict | None, keep: int | None, epoch: int) -> None:
        """The lowest live node, after barrier 2: write the manifest (and prune), or DECISION saying
        "retry" (the membership changed since some node started) or "failed" (with the reason). Never
        raises: every node must reach barrier 3 and learn the same outcome."""
        try:
            epochs = {epoch, self._epoch()}
            if len(epochs) == 1:  # (else a node may have died before it wrote its part)
                parts = self._parts(path)
                epochs |= {e for p in parts for e in p.get("epochs", ())}
            if len(epochs) > 1:
                fmt.write_json(path / DECISION, {"decision": "retry", "epochs": sorted(epochs)})
                return
            manifest = self._manifest(path, step, extra, parts)
            fmt.write_json(path / fmt.MANIFEST, manifest)
            for p in parts:
                (path / f"node-{p['rank']}.json").unlink(missing_ok=True)
            if keep is not None:
                fmt.prune(path.parent, int(keep))
        except Exception as exc:  # noqa: BLE001 - every node raises it after barrier 3
            reason = str(exc) if isinstance(exc, CheckpointError) else f"node {self.rank}: {exc!r}"
            log.error("checkpoint %s failed: %s", path, reason)
            try:
                fmt.write_json(path / DECISION, {"decision": "failed", "reason": reason})
            except OSError:
                pass  # the others find neither file and say so; this node raises below
            if not (path / fmt.MANIFEST).is_file():
                self._failure = reason

    def _outcome(self, path: Path, epoch: int, decider: int) -> fmt.CheckpointInfo | None:
        """After barrier 3, every node alike: the checkpoint (complete), None (take it again), or CheckpointError."""
        failure, self._failure = self._failure, None
        if (path / fmt.MANIFEST).is_file():
            manifest = fmt.read_manifest(path)
            log.info("node %d: checkpoint %s complete", self.rank, path)
            return fmt.info(path, manifest)
        try:
            decision = json.loads((path / DECISION).read_text())
        except (OSError, ValueError):
            decision = None
        if decision is not None and decision.get("decision") == "retry":
            return None
        if decision is not None:
            raise CheckpointError(
                f"checkpoint {path} was not completed: {decision.get('reason')}; older checkpoints were kept"
            )
        if failure is not None:
            raise CheckpointError(f"checkpoint {path} was not completed: {failure}; older checkpoints were kept")
        if self._epoch() != epoch:
            return None  # the decider died before it decided (barrier 3 waited until its death was known)
        raise CheckpointError(
            f"node {self.rank} finds neither {fmt.MANIFEST} nor {DECISION} in {path} that node "
            f"{decider} wrote; the checkpoint directory must be on a file system every node shares"
        )

    def _drain(self, timeout: float) -> None:
        """Wait until every request this node sent so far is answered (the cut)."""
        if not self._tracker.drain(self._check, timeout):
            raise CheckpointError(
                f"node {self.rank}: requests sent before the checkpoint were not answered "
                f"within {timeout:g} s; the checkpoint was not taken"
            )

    def _write_shards(self, path: Path, epoch: int) -> dict:
        """This node's files of every table, and its part file (node-R.json) naming them."""
        files: dict[str, dict] = {}
        tables: dict[str, dict] = {}
        first = self.rank == min(self._members())
        for state in self._catalog.tables():
            shard, tid = state.shard, state.spec.table_id
            if isinstance(shard, SparseShard):  # its written keys (uint64, sorted), rows and state
                keys, rows, st = shard.snapshot()
            else:
                keys = np.flatnonzero(shard.slot >= 0).astype(np.int64)
                rows, st = _rows(state, keys)
            names = {
                "keys": f"t{tid}.node{self.rank}.keys.npy",
                "rows": f"t{tid}.node{self.rank}.rows.npy",
                "state": f"t{tid}.node{self.rank}.state.npy" if st is not None else None,
            }
            entry = {**names, "count": len(keys)}
            try:
                disk = getattr(shard, "disk", None)  # a disk table streams, never all of it in memory
                for name, array in (("keys", keys), ("rows", rows), ("state", st)):
                    file = names[name]
                    if file is not None and array is not None:
                        files[file] = fmt.write_array(path / file, array, None if disk is None else disk.trim)
                replicas = shard.replicas
                if replicas is not None and first:  # every node's replicas are equal after the flush
                    m = len(replicas.keys)
                    rep_names = {
                        "keys": f"t{tid}.replicas.keys.npy",
                        "rows": f"t{tid}.replicas.rows.npy",
                        "state": f"t{tid}.replicas.state.npy" if replicas.state is not None else None,
                    }
                    for name, array in (
                        ("keys", replicas.keys),
                        ("rows", replicas.data[:m]),
                        ("state", None if replicas.state is None else replicas.state[:m]),
                    ):
                        file = rep_names[name]
                        if file is not None and array is not None:
                            files[file] = fmt.write_array(path / file, array)
                    tables.setdefault(state.spec.name, {})["replicas"] = {**rep_names, "count": m}
            except OSError as exc:
                raise CheckpointError(
                    f"node {self.rank} cannot write its shard of table {state.spec.name!r} to "
                    f"{path}: {exc}; free space or fix permissions, then checkpoint again"
                ) from None
            tables.setdefault(state.spec.name, {})["file"] = entry
        part = {
            "rank": self.rank,
            "files": files,
            "tables": tables,
            "nodes": sorted(self._members()),
            "epochs": [epoch, self._epoch()],
        }  # at the start and now: the decider compares every node's
        fmt.write_json(path / f"node-{self.rank}.json", part)
        return part

    def _parts(self, path: Path) -> list[dict]:
        """Every live node's part file (the decider, after barrier 2)."""
        parts = []
        for rank in sorted(self._members()):
            file = path / f"node-{rank}.json"
            try:
                parts.append(json.loads(file.read_text()))
            except (OSError, ValueError) as exc:
                raise CheckpointError(
                    f"node {self.rank} cannot read {file} that node {rank} wrote ({exc}); the "
                    "checkpoint directory must be on a file system every node shares"
                ) from None
        return parts

    def _manifest(self, path: Path, step: int, extra: dict | None, parts: list[dict]) -> dict:
        """Merge every node's part into the manifest (the lowest live node, after barrier 2)."""
        members = [p["rank"] for p in parts]
        files = {name: meta for p in parts for name, meta in p["files"].items()}
        tables = {}
        for state in self._catalog.tables():
            spec = state.spec
            entry = {
                **spec.config(),
                "consistency": state.consistency.spec,
                "table_id": spec.table_id,
                "state_width": spec.updater.state_width(spec.dim),
                "state_layout": {k: list(v) for k, v in spec.updater.state_layout(spec.dim).items()},
                "ranges": None if spec.sparse else state.ranges.bounds.tolist(),
                "files": [p["tables"][spec.name]["file"] for p in parts if spec.name in p["tables"]],
            }
            replicas = next(
                (
                    p["tables"][spec.name].get("replicas")
                    for p in parts
                    if p["tables"].get(spec.name, {}).get("replicas")
                ),
                None,
            )
            if replicas:
                entry["replicas"] = replicas
            problem = None if spec.sparse else fmt.coverage(path, spec.name, entry)
            if problem:  # never a complete checkpoint (and no pruning of older ones) that lacks rows
                raise CheckpointError(
                    f"{problem}; rows moved during the checkpoint, which holds writes and "
                    "moves back: a bug, please report it with the nodes' logs"
                )
            tables[spec.name] = entry
        return {
            "format": fmt.FORMAT,
            "version": fmt.VERSION,
            "pskv": fmt.pskv_version(),
            "created": time.time(),
            "step": step,
            "nodes": len(members),
            "members": members,
            "epoch": self._epoch(),
            "clock": self._clock(),
            "tables": tables,
            "files": files,
            "extra": extra or {},
        }


def _rows(state: TableState, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows and state of `keys` owned by this node: views of the shard's arrays when nothing ever
    moved (the gate holds writes), else copies."""
    shard = state.shard
    if shard.static and len(keys) == shard.stop - shard.start:
        n = len(keys)
        return shard.data[:n], None if shard.state is None else shard.state[:n]
    return shard.read(keys)
