"""data/images.py: idx files (MNIST layout), written here small, and their errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from pskv.data import DataError
from pskv.data.images import load_idx_set, read_idx


def _idx(array: np.ndarray) -> bytes:
    head = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    return head + array.astype(np.uint8).tobytes()


def _write_set(directory, n_train=6, n_test=4, gz=True):
    rng = np.random.default_rng(0)
    parts = {"train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
             "train-labels-idx1-ubyte": rng.integers(0, 10, n_train),
             "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
             "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test)}
    for name, array in parts.items():
        data = _idx(array)
        (directory / (name + ".gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)
    return parts


@pytest.mark.parametrize("gz", [True, False])
def test_a_written_set_reads_back_exactly(tmp_path, gz):
    parts = _write_set(tmp_path, gz=gz)
    got = load_idx_set(tmp_path)
    for array, want in zip(got, parts.values()):
        assert array.dtype == np.uint8 and np.array_equal(array, want)


def test_malformed_files_say_which_and_what(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01" + bytes(8))
    with pytest.raises(DataError, match="is not an idx file of uint8"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(_idx(np.zeros((3, 2)))[:-1])
    with pytest.raises(DataError, match=r"shape \(3, 2\) needs 6 bytes of data, the file has 5"):
        read_idx(tmp_path / "short")
    _write_set(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.zeros(3))))
    with pytest.raises(DataError, match=r"t10k images \(4, 28, 28\) and labels \(3,\) do not match"):
        load_idx_set(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DataError, match="has no train-images-idx3-ubyte"):
        load_idx_set(tmp_path)


def test_the_fashion_mnist_entry_is_pinned_to_debians_package():
    from pskv.data import DATASETS

    d = DATASETS["fashion-mnist"]
    assert d.package.startswith("deb:dataset-fashion-mnist=") and len(d.members) == 4
    assert d.files() == [f"{s}.gz" for s in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")]
