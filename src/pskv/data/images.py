"""Image data sets in the idx format (MNIST, Fashion-MNIST), read with numpy alone.

    train_x, train_y, test_x, test_y = load_idx_set(fetch("fashion-mnist"))

An idx file: a 4-byte magic (0, 0, type 0x08 = uint8, number of dimensions), one big-endian
uint32 per dimension, then the data; gzipped or not. Malformed files raise DataError naming the
file and what was expected; nothing is half-loaded.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from .fetch import DataError

_SPLITS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(path: Path) -> np.ndarray:
    """The uint8 array of idx file `path` (.gz read transparently). Raises DataError."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"cannot read {path}: {exc}; fetch the data set again (`pskv data fetch`)") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path} is not an idx file of uint8 (magic {raw[:4].hex()!r}, expected 000008NN)")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: header ends early: {ndim} dimensions need {4 + 4 * ndim} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    size, start = int(np.prod(shape)), 4 + 4 * ndim
    if len(raw) - start != size:
        raise DataError(
            f"{path}: shape {shape} needs {size} bytes of data, the file has {len(raw) - start}; "
            "it is truncated or not what its name says"
        )
    return np.frombuffer(raw, np.uint8, size, start).reshape(shape)


def load_idx_set(directory: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images (n, 28, 28) uint8, train labels (n,) uint8, test images, test labels) of an
    MNIST-layout directory (the four files, .gz or not). Raises DataError."""
    directory = Path(directory)
    arrays = []
    for name in _SPLITS:
        path = next((p for p in (directory / f"{name}.gz", directory / name) if p.exists()), None)
        if path is None:
            raise DataError(
                f"{directory} has no {name}[.gz]; an MNIST-layout directory holds "
                f"{', '.join(_SPLITS)} (e.g. `pskv data fetch fashion-mnist`)"
            )
        arrays.append(read_idx(path))
    for images, labels, split in ((arrays[0], arrays[1], "train"), (arrays[2], arrays[3], "t10k")):
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(f"{directory}: {split} images {images.shape} and labels {labels.shape} do not match")
    return arrays[0], arrays[1], arrays[2], arrays[3]
