"""One checkpoint file: an array written as .npy in chunks with its crc32 and fsynced, read back
memory-mapped or, a range of its rows, straight into memory; JSON written atomically; a directory's
fsync. (checkpoint.format: the checkpoint these files make up.) Errors are CheckpointError.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import CheckpointError

CHUNK = 64 << 20  # bytes written (and checksummed) at a time


def write_array(path: Path, array: np.ndarray, after_chunk=None) -> dict:
    """Write `array` as .npy at `path` (fsynced); returns {"crc32", "bytes"} of the whole file.
    `after_chunk()` runs after each chunk is written (a disk table drops the pages it read)."""
    array = np.ascontiguousarray(array)
    header = _npy_header(array)
    crc = zlib.crc32(header)
    with open(path, "wb") as f:
        f.write(header)
        flat = array.reshape(-1).view(np.uint8).data if array.size else memoryview(b"")  # (bytes, no copy)
        step = CHUNK if after_chunk is None else CHUNK // 16  # (4 MiB: what a disk table holds at once)
        for lo in range(0, len(flat), step):
            chunk = flat[lo : lo + step]
            crc = zlib.crc32(chunk, crc)
            f.write(chunk)
            if after_chunk is not None:
                after_chunk()
        f.flush()
        os.fsync(f.fileno())
    return {"crc32": crc, "bytes": len(header) + array.nbytes}


def _npy_header(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(array))
    return buf.getvalue()


def write_json(path: Path, payload: dict) -> None:
    """Write JSON to a temporary name, fsync it, rename it into place, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_dir(path.parent)


def sync_dir(path: Path) -> None:
    """fsync directory `path`: the names created in it (files, renames, subdirectories) survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_array(path: Path, name: str) -> np.ndarray:
    """A checkpoint file, memory-mapped read-only (verify() checked it)."""
    try:
        return np.load(Path(path) / name, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{Path(path) / name} cannot be read as .npy ({exc}); the checkpoint is damaged"
        ) from None


def read_rows(path: Path, name: str, take: slice, out: np.ndarray | None = None, after_chunk=None) -> np.ndarray:
    """Rows `take` of a 2-D .npy file, read straight into memory (faster than faulting in a memmap),
    into `out` if it fits; with `after_chunk`, 4 MiB at a time, calling it after each."""
    file = Path(path) / name
    damaged = "; the checkpoint is damaged: use an older one"
    try:
        with open(file, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            if fortran or len(shape) != 2:
                raise CheckpointError(f"{file} holds shape {shape} (fortran order {fortran}), not rows{damaged}")
            lo, hi, _ = take.indices(shape[0])
            hi = max(lo, hi)
            f.seek(lo * shape[1] * dtype.itemsize, 1)
            if out is None or out.shape != (hi - lo, shape[1]) or out.dtype != dtype:
                out = np.empty((hi - lo, shape[1]), dtype)
            flat = out.reshape(-1).view(np.uint8).data if out.size else memoryview(bytearray())
            step = len(flat) if after_chunk is None else CHUNK // 16
            for lo in range(0, len(flat), max(step, 1)):
                if f.readinto(flat[lo : lo + step]) != len(flat[lo : lo + step]):
                    raise CheckpointError(f"{file} ends early{damaged}")
                if after_chunk is not None:
                    after_chunk()
            return out
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file} cannot be read as .npy ({exc}){damaged}") from None
