"""Sparse examples for linear models: a binary format that workers memory-map, and libsvm text.

The binary format (one file, `.pskvsp`) keeps a CSR matrix in the spirit of Li et al.'s parameter
server: row offsets, column ids (uint64 feature keys: hashed features or libsvm's indices) and
values, plus a label per row:

    bytes 0..8     b"PSKVSP01"
    bytes 8..16    little-endian uint64: length L of the JSON header that follows
    JSON           {"rows", "nnz", "binary", "offsets": {name: byte offset}, "labels", ...user fields}
    arrays         labels float32 (rows,) (float64 where "labels" is "float64": regression targets),
                   indptr int64 (rows + 1,), keys uint64 (nnz,),
                   values float32 (nnz,) (absent when "binary": every value is 1), each at a
                   64-byte aligned offset

`SparseData.open(path)` maps the arrays without reading them; `shard(rank, n)` is a contiguous
block of rows whose pages are read only when touched, so each worker reads its own part of
the file. `read_libsvm` parses libsvm/svmlight text (`label idx:value ...`, `#` comments) and
raises DataError naming the file and line of anything malformed; `convert` writes the binary
format from it (`pskv data convert FILE.libsvm OUT`). Nothing is half-written: files are written
to a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from .fetch import DataError

MAGIC = b"PSKVSP01"
_ALIGN = 64


class SparseData:
    """Rows of sparse examples: `labels` (n,) float32 in {0, 1} (or float64 regression targets), CSR
    `indptr` (n + 1,) int64 into `keys` (nnz,) uint64 and `values` (nnz,) float32 (None: all ones).
    Arrays may be memory maps."""

    def __init__(self, labels, indptr, keys, values=None, meta: dict | None = None, path: Path | None = None):
        self.labels, self.indptr, self.keys, self.values = labels, indptr, keys, values
        self.meta = dict(meta or {})
        self.path = path

    @property
    def rows(self) -> int:
        return len(self.labels)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0])

    @classmethod
    def open(cls, path) -> SparseData:
        """Memory-map a .pskvsp file (nothing is read until used). Raises DataError."""
        path = Path(path)
        try:
            with open(path, "rb") as f:
                head = f.read(16)
                if len(head) < 16 or head[:8] != MAGIC:
                    raise DataError(
                        f"{path} is not a pskv sparse file (no {MAGIC!r} at its start); write one "
                        "with `pskv data convert FILE.libsvm OUT`"
                    )
                size = int.from_bytes(head[8:16], "little")
                if size > 1 << 24:
                    raise DataError(f"{path} is not a pskv sparse file (a header of {size} bytes); convert it again")
                meta = json.loads(f.read(size))
            rows, nnz, at = int(meta["rows"]), int(meta["nnz"]), meta["offsets"]

            def mm(name: str, dtype, n: int) -> np.ndarray:
                return np.memmap(path, dtype, "r", int(at[name]), (n,)) if n else np.empty(0, dtype)

            labels = mm("labels", np.float64 if meta.get("labels") == "float64" else np.float32, rows)
            indptr = mm("indptr", np.int64, rows + 1)
            keys = mm("keys", np.uint64, nnz)
            values = None if meta.get("binary") else mm("values", np.float32, nnz)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{path} cannot be read as a pskv sparse file ({exc}); convert it again") from None
        if len(indptr) and (indptr[0] != 0 or indptr[-1] != nnz):
            raise DataError(
                f"{path}: row offsets do not cover its {nnz} entries; the file is damaged, convert it again"
            )
        return cls(labels, indptr, keys, values, meta, path)

    def shard(self, rank: int, n: int) -> SparseData:
        """Rows [rank * rows // n, (rank + 1) * rows // n): views, offsets rebased to 0."""
        lo, hi = rank * self.rows // n, (rank + 1) * self.rows // n
        return self.slice(lo, hi)

    def slice(self, lo: int, hi: int) -> SparseData:
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        return SparseData(
            self.labels[lo:hi],
            np.asarray(self.indptr[lo : hi + 1]) - a,
            self.keys[a:b],
            None if self.values is None else self.values[a:b],
            self.meta,
            self.path,
        )

    def distinct_keys(self) -> np.ndarray:
        return np.unique(np.asarray(self.keys))

    def write(self, path) -> Path:
        """Write the binary format to `path` (atomically). Returns the path."""
        path = Path(path)
        binary = self.values is None or bool((np.asarray(self.values) == 1).all())
        wide = np.asarray(self.labels).dtype == np.float64  # real-valued targets (read_libsvm's real_labels)
        arrays = [
            ("labels", np.ascontiguousarray(self.labels, np.float64 if wide else np.float32)),
            ("indptr", np.ascontiguousarray(np.asarray(self.indptr) - self.indptr[0], np.int64)),
            ("keys", np.ascontiguousarray(self.keys, np.uint64)),
        ]
        if not binary:
            arrays.append(("values", np.ascontiguousarray(self.values, np.float32)))
        meta = {
            **self.meta,
            "rows": self.rows,
            "nnz": self.nnz,
            "binary": binary,
            "offsets": {},
            "labels": "float64" if wide else "float32",
        }
        for _ in range(2):  # offsets depend on the header's length: settle them (twice is enough)
            header = json.dumps(meta, sort_keys=True).encode()
            at = _aligned(16 + len(header) + 32)  # (room for the offsets' digits to grow)
            for name, arr in arrays:
                meta["offsets"][name] = at
                at = _aligned(at + arr.nbytes)
        header = json.dumps(meta, sort_keys=True).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + len(header).to_bytes(8, "little") + header)
                for name, arr in arrays:
                    f.write(b"\0" * (meta["offsets"][name] - f.tell()))
                    f.write(arr.data.cast("B"))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def __repr__(self) -> str:
        return f"<SparseData rows={self.rows} nnz={self.nnz} binary={self.values is None} path={self.path}>"


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def read_libsvm(path, *, progress=None, real_labels: bool = False) -> SparseData:
    """Parse a libsvm/svmlight text file: `label idx:value idx:value ...` per line; labels -1/+1 or
    0/1 (become 0/1; any finite number with `real_labels`, for regression: kept as float64), any
    non-negative integer idx (the feature key), `#` starts a comment, blank lines are skipped. Raises
    DataError with the file and line of the first malformed entry. `progress(bytes)` is called as the
    file is read. The whole file is parsed in one pass (data.libsvm, numba); a file it refuses is
    read again line by line, which finds the first bad entry for the message."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    if progress is not None:
        progress(len(text))
    parsed = _parse_fast(text, real_labels)
    if parsed is None:
        parsed = _parse_lines(text, path, real_labels)
    labels, indptr, keys, values = parsed
    if not len(labels):
        raise DataError(f"{path} holds no examples; expected lines like `+1 3:1 17:0.5`")
    return SparseData(labels, indptr, keys, values, {"source": str(path)})


def _parse_fast(text: bytes, real_labels: bool):
    """(labels, indptr, keys, values) of libsvm `text` by data.libsvm's one pass, or None where
    anything is off (the caller then parses line by line for the message)."""
    from .libsvm import scan  # (numba: compiled on first use, cached)

    parsed = scan(text)
    if parsed is None:
        return None
    y, indptr, keys, values = parsed
    if not real_labels:
        if not np.isin(y, (-1.0, 0.0, 1.0)).all():
            return None
        y = (y == 1.0).astype(np.float32)
    return y, indptr, keys, values.astype(np.float32)


def _parse_lines(text: bytes, path: Path, real_labels: bool):
    labels, indptr, keys, values = [], [0], [], []
    for number, raw in enumerate(text.split(b"\n"), 1):
        line = raw.split(b"#", 1)[0].strip()
        if not line:
            continue
        label, *pairs = line.split()
        labels.append(_real(label, path, number) if real_labels else _label(label, path, number))
        for pair in pairs:
            idx, sep, val = pair.partition(b":")
            try:
                k, v = int(idx), float(val)
            except ValueError:
                k, v = -1, float("nan")  # (refused below)
            if not sep or k < 0 or k >= 1 << 64 or not np.isfinite(v):
                raise DataError(
                    f"{path}:{number}: {pair.decode(errors='replace')!r} is not idx:value with a "
                    "non-negative integer idx and a finite value; is this a libsvm/svmlight file?"
                )
            keys.append(k)
            values.append(v)
        indptr.append(len(keys))
    return (
        np.array(labels, np.float64 if real_labels else np.float32),
        np.array(indptr, np.int64),
        np.array(keys, np.uint64),
        np.array(values, np.float32),
    )


def _label(token: bytes, path: Path, number: int) -> float:
    try:
        y = float(token)
    except ValueError:
        y = None
    if y not in (-1.0, 0.0, 1.0):
        raise DataError(
            f"{path}:{number}: label {token.decode(errors='replace')!r} is not -1, +1, 0 or 1 (binary classification)"
        )
    return 1.0 if y == 1.0 else 0.0


def _real(token: bytes, path: Path, number: int) -> float:
    try:
        y = float(token)
    except ValueError:
        y = float("nan")
    if not np.isfinite(y):
        raise DataError(f"{path}:{number}: label {token.decode(errors='replace')!r} is not a finite number")
    return y


def write_libsvm(data: SparseData, path, *, real_labels: bool = False) -> Path:
    """Write `data` as libsvm text (labels +1/-1; with `real_labels` each label as it is, to the
    last bit of a float64), atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    indptr, keys = np.asarray(data.indptr), np.asarray(data.keys)
    values = None if data.values is None else np.asarray(data.values)
    try:
        with open(tmp, "w") as f:
            for i in range(data.rows):
                a, b = indptr[i], indptr[i + 1]
                vals = ["1"] * (b - a) if values is None else [f"{v:.9g}" for v in values[a:b].tolist()]
                label = repr(float(data.labels[i])) if real_labels else "+1" if data.labels[i] > 0.5 else "-1"
                f.write(label + "".join(f" {k}:{v}" for k, v in zip(keys[a:b].tolist(), vals, strict=True)) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load(path, *, cache_dir: Path | None = None, real_labels: bool = False) -> SparseData:
    """A data file as SparseData: a .pskvsp file is mapped; libsvm text is parsed (and, with
    `cache_dir`, converted once to `cache_dir/NAME.pskvsp`, reused while newer than the text).
    `real_labels`: regression targets (see read_libsvm)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist; give a libsvm file or a .pskvsp file (pskv data convert)")
    with open(path, "rb") as f:
        if f.read(8) == MAGIC:
            return SparseData.open(path)
    if cache_dir is None:
        return read_libsvm(path, real_labels=real_labels)
    st = path.stat()  # the cached copy is named after the file's full path, size and time: another
    # train.libsvm elsewhere, or this one rewritten, is converted again, never read from a stale copy
    named = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}{real_labels * ' real'}"
    tag = hashlib.sha1(named.encode()).hexdigest()[:16]
    cached = Path(cache_dir) / f"{path.name}.{tag}.pskvsp"
    if not cached.is_file():
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        read_libsvm(path, real_labels=real_labels).write(cached)
    return SparseData.open(cached)


def convert(source, out, *, quiet: bool = False, real_labels: bool = False) -> SparseData:
    """`pskv data convert`: libsvm text `source` -> binary `out`, with a progress bar on stderr.
    `real_labels`: regression targets, kept as float64 (see read_libsvm)."""
    from tqdm import tqdm

    source = Path(source)
    size = source.stat().st_size if source.is_file() else None
    with tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {source.name}", disable=quiet, leave=False) as bar:
        data = read_libsvm(source, progress=bar.update, real_labels=real_labels)
    data.write(out)
    return SparseData.open(out)
