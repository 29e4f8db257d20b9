"""The checkpoint format: a directory per checkpoint, plain .npy files and one manifest.json.

    DIR/checkpoint-000003/manifest.json            written last (renamed into place): the checkpoint is complete
    DIR/checkpoint-000003/TABLE.nodeR.keys.npy     (n,) int64: the keys node R owned
    DIR/checkpoint-000003/TABLE.nodeR.rows.npy     (n, dim) the rows of those keys
    DIR/checkpoint-000003/TABLE.nodeR.state.npy    (n, width) their updater state (Adagrad, Adam), if any
    DIR/checkpoint-000003/TABLE.replicas.*.npy     replicated hot keys (pskv.Replicate): keys, rows, state

manifest.json (format "pskv-checkpoint", version 1) holds the pskv version, creation time, node
count, membership epoch and global clock, every table's spec (rows, dim, dtype, updater kind and
hyperparameters, init, consistency), its key ranges when saved, the files of each node (which keys
each node owned), a crc32 and size per file, and `extra` (what an app saved with it: its epoch,
its RNG state). A checkpoint without manifest.json is incomplete: it is never read, and `keep=`
removes it once a newer one is complete.

Everything here is plain files and numpy (checkpoint/npy.py writes and reads each file): `load(path)`
needs no cluster. Errors are
CheckpointError naming the file and what to do.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
import zlib
from pathlib import Path

import numpy as np

from ..errors import CheckpointError
from .npy import CHUNK, open_array, read_rows, sync_dir, write_array, write_json

__all__ = [  # (and npy.py's writers and readers, which were this module's)
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "CheckpointInfo",
    "CheckpointTable",
    "coverage",
    "describe",
    "info",
    "load",
    "open_array",
    "prune",
    "pskv_version",
    "read_manifest",
    "resolve",
    "step_dir",
    "steps",
    "sync_dir",
    "table_parts",
    "verify",
    "write_array",
    "write_json",
]

FORMAT, VERSION = "pskv-checkpoint", 1
MANIFEST = "manifest.json"
_NAME = re.compile(r"^checkpoint-(\d{6,})$")


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its directory, step number, tables and the global clock it recorded."""

    path: Path
    step: int
    tables: list[str]
    clock: int
    created: float


@dataclasses.dataclass
class CheckpointTable:
    """One table of a checkpoint, read whole into memory (`load`)."""

    spec: dict  # name, rows, dim, dtype, updater (kind and hyperparameters), init, consistency
    values: np.ndarray  # (rows, dim); a sparse table's: the rows of `keys`
    state: dict[str, np.ndarray]  # updater state by name (e.g. "accumulator"), each (rows, k)
    keys: np.ndarray | None = None  # a sparse table (key_space "uint64"): its written keys, uint64, sorted


def pskv_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pskv")
    except PackageNotFoundError:  # run from a source tree
        return "unknown"


# ---- names ------------------------------------------------------------------------------------------------------
def step_dir(directory: Path, step: int) -> Path:
    return Path(directory) / f"checkpoint-{step:06d}"


def steps(directory: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every checkpoint directory under `directory`, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child, (child / MANIFEST).is_file()))
    return sorted(found)


def resolve(path) -> Path:
    """A checkpoint's own directory: `path` itself if it holds a manifest, else the newest complete
    checkpoint under it. Raises CheckpointError."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if not path.exists():
        raise CheckpointError(
            f"checkpoint {path} does not exist; give a checkpoint's directory or the directory "
            "node.checkpoint() wrote into"
        )
    complete = [p for _, p, done in steps(path) if done]
    if not complete:
        incomplete = [p.name for _, p, done in steps(path) if not done]
        hint = f" (incomplete, no {MANIFEST}: {', '.join(incomplete)})" if incomplete else ""
        raise CheckpointError(
            f"{path} is not a checkpoint and holds no complete checkpoint{hint}; "
            "give a directory node.checkpoint() wrote into"
        )
    return complete[-1]


# ---- writing: whole checkpoints --------------------------------------------------------------------------------
def prune(directory: Path, keep: int) -> list[Path]:
    """Remove all but the `keep` newest complete checkpoints (and incomplete ones older than the
    newest complete one); returns what was removed.

    The newest complete checkpoint's directory and `directory` itself are fsynced first: its
    manifest's rename is durable in its own directory (write_json), but the directory's name in
    `directory` is not until `directory` is synced, and a crash after the removal of the older
    ones must not leave no checkpoint at all."""
    found = steps(directory)
    complete = [(s, p) for s, p, done in found if done]
    if not complete:
        return []
    newest, newest_path = complete[-1]
    doomed = [p for s, p in complete[:-keep]] if keep > 0 else []
    doomed += [p for s, p, done in found if not done and s < newest]
    if doomed:
        sync_dir(newest_path)
        sync_dir(Path(directory))
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


# ---- reading --------------------------------------------------------------------------------------------------
def read_manifest(path: Path) -> dict:
    """The manifest of checkpoint directory `path` (resolved), checked for format and version."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing: {path} is not a complete checkpoint") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file} cannot be read ({exc}); the checkpoint is damaged: use an older one") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{file} is not a pskv checkpoint manifest (format {manifest.get('format')!r} if a dict)")
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{file} has checkpoint format version {manifest.get('version')!r} (pskv "
            f"{manifest.get('pskv', '?')}); this pskv reads version {VERSION}: use the pskv "
            "version that wrote it, or export it with that version's pskv.load_checkpoint"
        )
    return manifest


def verify(path: Path, manifest: dict) -> None:
    """Check that every file of the checkpoint exists with its size and crc32. Raises CheckpointError."""
    for name, meta in sorted(manifest["files"].items()):
        file = Path(path) / name
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            raise CheckpointError(
                f"{file} is missing from checkpoint {path}; the checkpoint is damaged: use an "
                "older one (pskv checkpoint list DIR)"
            ) from None
        if size != meta["bytes"]:
            raise CheckpointError(
                f"{file} has {size} bytes, the manifest says {meta['bytes']} (truncated?); the "
                "checkpoint is damaged: use an older one (pskv checkpoint list DIR)"
            )
        crc = 0
        with open(file, "rb") as f:
            while chunk := f.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
        if crc != meta["crc32"]:
            raise CheckpointError(
                f"{file} fails its checksum (crc32 {crc:#010x}, manifest {meta['crc32']:#010x}); the "
                "checkpoint is damaged: use an older one (pskv checkpoint list DIR)"
            )


def coverage(path: Path, name: str, entry: dict, window: int = 1 << 22) -> str | None:
    """What keeps a dense table's node files in checkpoint directory `path` (its manifest entry
    `entry`) from holding every row of [0, rows) exactly once, or None. A row in several files is
    allowed only with equal rows and state there (a backup reader's copy of the head's). Reads the
    sorted key files `window` keys at a time (memory-mapped)."""
    rows = int(entry["rows"])
    files = list(entry["files"])
    keys = [open_array(path, f["keys"]) for f in files]
    missing = differ = 0
    for lo in range(0, rows, window):
        hi = min(rows, lo + window)
        count = np.zeros(hi - lo, np.int64)  # (w,) files holding each key of the window
        for k in keys:
            a, b = np.searchsorted(k, (lo, hi))
            count += np.bincount(np.asarray(k[a:b]) - lo, minlength=hi - lo)
        missing += int((count == 0).sum())
        several = np.flatnonzero(count > 1) + lo
        if len(several):
            differ += _copies_differ(path, files, keys, several)
    problems = [f"{missing} of {rows} rows are in no node's file"] if missing else []
    problems += [f"{differ} rows differ between the node files holding them"] if differ else []
    return f"table {name!r}: {' and '.join(problems)}" if problems else None


def _copies_differ(path: Path, files: list[dict], keys: list[np.ndarray], several: np.ndarray) -> int:
    """How many of `several` (keys in more than one file) have rows or state that differ between files."""
    first: np.ndarray | None = None  # (m, bytes) each key's row and state, as the first file holding it has them
    seen = np.zeros(len(several), bool)
    bad = np.zeros(len(several), bool)
    for f, k in zip(files, keys, strict=True):
        pos = np.minimum(np.searchsorted(k, several), max(len(k) - 1, 0))
        has = np.flatnonzero((np.asarray(k[pos]) == several) if len(k) else np.zeros(len(several), bool))
        if not len(has):
            continue
        parts = [open_array(path, f["rows"])[pos[has]]]
        if f.get("state"):
            parts.append(open_array(path, f["state"])[pos[has]])
        raw = np.concatenate([np.ascontiguousarray(a).view(np.uint8).reshape(len(has), -1) for a in parts], axis=1)
        if first is None:
            first = np.zeros((len(several), raw.shape[1]), np.uint8)
        again = seen[has]
        bad[has[again]] |= (first[has[again]] != raw[again]).any(axis=1)
        first[has[~again]] = raw[~again]
        seen[has] = True
    return int(bad.sum())


def table_parts(path: Path, entry: dict, key_range: tuple[int, int] | None = None, into=None, after_chunk=None):
    """(keys, rows, state or None) of each file set of one table: every node's, then the replicated
    hot keys' (apply them in this order: a replica row wins over the manager's unused home row);
    only the rows of keys in [lo, hi) with `key_range`. Each file's keys are sorted (as written),
    so a range is one contiguous slice of the memory-mapped files. `into(keys)`: (rows, state)
    arrays to read a part's rows into (e.g. the shard's own memory), or None to allocate.
    `after_chunk()` runs after each 4 MiB read into them (a disk table drops the pages written)."""
    parts = list(entry["files"]) + ([entry["replicas"]] if entry.get("replicas") else [])
    for part in parts:
        keys = np.asarray(open_array(path, part["keys"]))
        take = slice(None)
        if key_range is not None:
            if len(keys) > 1 and not (np.diff(keys) > 0).all():
                raise CheckpointError(f"{Path(path) / part['keys']} is not sorted; the checkpoint is damaged")
            take = slice(*np.searchsorted(keys, key_range))
        dest_rows, dest_state = into(keys[take]) if into is not None else (None, None)
        rows = read_rows(path, part["rows"], take, dest_rows, after_chunk)
        state = read_rows(path, part["state"], take, dest_state, after_chunk) if part.get("state") else None
        yield keys[take], rows, state


def load(path) -> dict[str, CheckpointTable]:
    """Every table of a checkpoint (`path`: its directory, or the directory holding checkpoints: the
    newest complete one), checked against the manifest, whole in memory. No cluster needed."""
    path = resolve(path)
    manifest = read_manifest(path)
    verify(path, manifest)
    tables = {}
    for name, entry in manifest["tables"].items():
        if entry.get("key_space") == "uint64":
            tables[name] = _load_sparse(path, entry)
            continue
        values = np.zeros((entry["rows"], entry["dim"]), entry["dtype"])
        width = int(entry.get("state_width") or 0)
        state = np.zeros((entry["rows"], width), entry["dtype"]) if width else None
        seen = np.zeros(entry["rows"], bool)
        for keys, rows, st in table_parts(path, entry):
            values[keys] = rows
            seen[keys] = True
            if st is not None and state is not None:
                state[keys] = st
        if not seen.all():
            raise CheckpointError(
                f"checkpoint {path}: table {name!r} has {int((~seen).sum())} of {entry['rows']} rows "
                "in no file; the checkpoint is damaged: use an older one"
            )
        layout = entry.get("state_layout") or ({"state": [0, width]} if width else {})
        full_state = {n: state[:, a:b] for n, (a, b) in layout.items()} if state is not None else {}
        spec = {k: entry[k] for k in ("name", "rows", "dim", "dtype", "updater", "init", "consistency") if k in entry}
        tables[name] = CheckpointTable(spec, values, full_state)
    return tables


def _load_sparse(path: Path, entry: dict) -> CheckpointTable:
    """A sparse table: every node's written keys (disjoint), merged in key order."""
    parts = list(table_parts(path, entry))
    keys = np.concatenate([np.asarray(k).view(np.uint64) for k, _, _ in parts]) if parts else np.empty(0, np.uint64)
    order = np.argsort(keys, kind="stable")
    values = np.concatenate([r for _, r, _ in parts])[order] if parts else np.empty((0, entry["dim"]), entry["dtype"])
    width = int(entry.get("state_width") or 0)
    state = {}
    if width and parts and all(s is not None for _, _, s in parts):
        full = np.concatenate([s for _, _, s in parts])[order]
        layout = entry.get("state_layout") or {"state": [0, width]}
        state = {n: full[:, a:b] for n, (a, b) in layout.items()}
    spec = {
        k: entry[k]
        for k in ("name", "rows", "dim", "dtype", "updater", "init", "consistency", "key_space")
        if k in entry
    }
    return CheckpointTable(spec, values, state, keys[order])


def info(path: Path, manifest: dict) -> CheckpointInfo:
    return CheckpointInfo(
        Path(path),
        int(manifest["step"]),
        sorted(manifest["tables"]),
        int(manifest.get("clock", 0)),
        float(manifest["created"]),
    )


def describe(path) -> list[str]:
    """Lines for `pskv checkpoint inspect`: tables, sizes, clock, age; verifies every checksum."""
    path = resolve(path)
    manifest = read_manifest(path)
    verify(path, manifest)
    age = time.time() - float(manifest["created"])
    total = sum(m["bytes"] for m in manifest["files"].values())
    lines = [
        f"{path}: step {manifest['step']}, {manifest['nodes']} node(s), clock {manifest.get('clock', 0)}, "
        f"pskv {manifest.get('pskv', '?')}, {_age(age)} old, {len(manifest['files'])} files, "
        f"{total / 2**20:.1f} MiB",
        f"checksums: all {len(manifest['files'])} files match",
    ]
    for name, e in sorted(manifest["tables"].items()):
        updater = e["updater"].get("name", "?")
        rows = "uint64 keys" if e.get("key_space") == "uint64" else f"{e['rows']:,}"
        lines.append(
            f"  table {name!r}: {rows} x {e['dim']} {e['dtype']}, updater {updater}"
            f"{', with state' if e.get('state_width') else ''}, {len(e['files'])} node file(s)"
            f"{', replicated keys' if e.get('replicas') else ''}"
        )
    if manifest.get("extra"):
        lines.append(f"  extra: {json.dumps(manifest['extra'])[:200]}")
    return lines


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
