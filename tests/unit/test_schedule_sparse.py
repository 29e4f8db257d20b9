"""Lasso on sparse data (issue 32) without a cluster: the scheduler's dependency check from sparse
columns keeps what the dense check keeps, the CSC kernels compute what dense numpy does, a
scheduler stopped early ends at once, and --data files are refused before any node starts."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pskv import schedule
from pskv.apps import lasso_design
from pskv.apps.lasso_design import Csr
from pskv.data import DataError

pytestmark = pytest.mark.timeout(120)


def _csr(x: np.ndarray) -> Csr:
    rows, cols = np.nonzero(x)
    indptr = np.zeros(x.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=x.shape[0]), out=indptr[1:])
    return Csr(indptr, cols.astype(np.int32), x[rows, cols], x.shape, np.arange(x.shape[1], dtype=np.uint64))


def _sparse_matrix(seed: int, n: int = 300, p: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, p)) * (rng.random((n, p)) < 0.1)
    x[:, 5] = 2 * x[:, 3] + 0.1 * x[:, 7]  # correlated with 3
    x[:, 9] = 1.0  # constant: correlates with nothing
    x[:, 11] = 0.0  # empty
    x[:50, 12] = 1.0  # dense-ish and binary
    return x


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.9])
def test_sparse_check_keeps_what_the_dense_check_keeps(rho):
    x = _sparse_matrix(0)
    std = x - x.mean(axis=0)
    norms = np.linalg.norm(std, axis=0)
    std /= np.where(norms > 0, norms, 1.0)
    dense = schedule.correlation_check(lambda idx: std[:, idx], rho)
    cols = _csr(x).columns()
    sparse = schedule.sparse_correlation_check(cols.ptr, cols.rows, cols.vals, x.shape[0], rho)
    rng = np.random.default_rng(1)
    for _ in range(40):
        candidates = rng.permutation(x.shape[1])[:64]
        candidates[:3] = [3, 5, 9]  # (the correlated pair first, then the constant column)
        assert sparse(candidates).tolist() == dense(candidates).tolist()
    assert 5 not in sparse(np.array([3, 5, 9, 11])).tolist() or rho == 0.9


def test_csc_kernels_compute_what_dense_numpy_does():
    x = _sparse_matrix(2)
    csr = _csr(x)
    for lo, hi in [(0, 300), (0, 150), (150, 300), (17, 18)]:
        cols, dense = csr.columns(lo, hi), lasso_design.DenseColumns(x[lo:hi])
        assert cols.n_rows == hi - lo
        for got, want in zip(cols.sums(), dense.sums()):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        rng = np.random.default_rng(lo)
        chosen = np.sort(rng.choice(x.shape[1], 20, replace=False))
        r = rng.standard_normal(hi - lo)
        np.testing.assert_allclose(cols.dots(chosen, r), dense.dots(chosen, r), rtol=1e-12, atol=1e-12)
        delta = rng.standard_normal(20)
        a, b = r.copy(), r.copy()
        cols.axpy(chosen, delta, a)
        dense.axpy(chosen, delta, b)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(csr.to_dense(), x)


def test_keys_become_columns_in_key_order():
    for keys in (np.array([7, 3, 3, 10**6, 7], np.uint64), np.array([2**64 - 1, 5, 2**63], np.uint64)):
        distinct, cols = lasso_design._columns_of(keys)
        want, inverse = np.unique(keys, return_inverse=True)
        assert distinct.tolist() == want.tolist() and cols.tolist() == inverse.tolist()


def test_a_scheduler_stopped_before_its_last_round_ends_at_once(node):
    sched = schedule.Scheduler(node, "early", coords=50, per_round=5, policy="strads", seed=0)
    sched.start(1000)

    def work(w):
        sched.begin(w)
        for t in range(5):
            sched.take(w, t, timeout=20)
            sched.end_round(w)

    node.run(work, threads=1)
    begun = time.monotonic()
    sched.stop()
    sched.close(timeout=20)
    assert time.monotonic() - begun < 5 and sched.stats()["rounds"] < 1000


@pytest.mark.parametrize("content,name,what", [
    (None, "missing.libsvm", "no such file"),
    (b"a,b,c\n1,2,3\n", "data.csv", "is not a libsvm/svmlight file \\(b'a,b,c' is not a number"),
    (b"1.5 3:1 x:2\n", "x.libsvm", "b'x:2' is not idx:value"),
    (b"1.5 3:1 4:nope\n", "x.libsvm", "b'4:nope' is not idx:value"),
    (b"\x1f\x8b\x08\x00\x00\x00", "x.libsvm.gz", "not a libsvm/svmlight file"),
    (b"+1 3:1\n", "x.pskvsp", "named .pskvsp but does not start with"),
    (b"# only a comment\n\n", "x.libsvm", "no example line"),
])
def test_a_file_that_is_not_what_it_claims_is_refused_from_its_first_lines(tmp_path, content, name, what):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=what):
        lasso_design.check(str(path))


def test_libsvm_and_pskvsp_files_pass_the_check(tmp_path):
    (tmp_path / "a.libsvm").write_bytes(b"# header\n3.25 1:0.5 7:1\n-1e-3 2:2\n")
    lasso_design.check(str(tmp_path / "a.libsvm"))
    x, y = lasso_design.load(str(tmp_path / "a.libsvm"), 0, 0)
    assert y.tolist() == [3.25, -1e-3] and x.keys.tolist() == [1, 2, 7] and x.shape == (2, 3)
    np.testing.assert_array_equal(x.to_dense(), [[0.5, 0, 1], [0, 2, 0]])
    from pskv.data.sparse import read_libsvm

    read_libsvm(tmp_path / "a.libsvm", real_labels=True).write(tmp_path / "a.pskvsp")
    lasso_design.check(str(tmp_path / "a.pskvsp"))
    x2, y2 = lasso_design.load(str(tmp_path / "a.pskvsp"), 0, 0, dense=True)
    assert y2.tolist() == y.tolist()
    np.testing.assert_array_equal(x2, x.to_dense())
