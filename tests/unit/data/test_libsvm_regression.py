"""libsvm for regression (lasso, issue 32): the one-pass parser (data.libsvm) gives every number
exactly as float() does, float64 targets survive .pskvsp, and WordNet's tf-idf matches scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest

from pskv.data import DataError
from pskv.data.libsvm import scan
from pskv.data.sparse import SparseData, load, read_libsvm, write_libsvm

pytestmark = pytest.mark.timeout(120)


def test_scan_gives_each_number_as_float_does():
    """Mantissas past 2^53, exponents past 22, 17-digit reprs: all the nearest double, as strtod."""
    rng = np.random.default_rng(1)
    vals = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000), rng.random(1000),
                           rng.integers(-10**6, 10**6, 100) * 1.0, [0.0, -0.0, 1e-300, 123456789012345678901.0]])
    text = "".join(f"{float(v)!r} 1:{v:.9g} 2:{v:.6e} 3:{v:.17g} 7:{v:.3f}\n" for v in vals).encode()
    labels, indptr, keys, values = scan(text)
    assert labels.tolist() == [float(t) for t in text.split() if b":" not in t]
    assert values.tolist() == [float(t.split(b":")[1]) for t in text.split() if b":" in t]
    assert keys.tolist() == [1, 2, 3, 7] * len(vals)
    assert indptr.tolist() == list(range(0, 4 * len(vals) + 1, 4))


@pytest.mark.parametrize("text", [b"1 1:2:3 5\n", b"1 x:1\n", b"1 3:\n", b"1 :3\n", b"1 3:1e\n", b"nan 1:1\n",
                                  b"1 18446744073709551616:1\n", b"1 1:1,2\n", b"1,2,3\n"])
def test_scan_refuses_what_it_does_not_parse_exactly(text):
    assert scan(text) is None  # (read_libsvm then reads line by line and names the line)


def test_real_targets_are_float64_through_pskvsp(tmp_path):
    """Regression targets to the last bit: libsvm text (repr) -> read -> .pskvsp -> mapped."""
    y = np.array([0.1, -2.5e-17, 3.0000000000000004, 1e300])
    path = tmp_path / "r.libsvm"
    path.write_text("".join(f"{v!r} 1:0.5 {i + 2}:1\n" for i, v in enumerate(y.tolist())))
    data = read_libsvm(path, real_labels=True)
    assert data.labels.dtype == np.float64 and data.labels.tolist() == y.tolist()
    data.write(tmp_path / "r.pskvsp")
    mapped = load(tmp_path / "r.pskvsp")
    assert mapped.labels.dtype == np.float64 and mapped.labels.tolist() == y.tolist()
    assert mapped.keys.tolist() == [1, 2, 1, 3, 1, 4, 1, 5]
    write_libsvm(mapped, tmp_path / "again.libsvm", real_labels=True)
    assert read_libsvm(tmp_path / "again.libsvm", real_labels=True).labels.tolist() == y.tolist()
    with pytest.raises(DataError, match="r.libsvm:1: label '0.1' is not -1, \\+1, 0 or 1"):
        read_libsvm(path)  # (binary classification is still the default: lr's files)


def test_binary_pskvsp_keeps_float32_labels(tmp_path):
    data = SparseData(np.array([1, 0], np.float32), np.array([0, 1, 2]), np.array([3, 4], np.uint64))
    data.write(tmp_path / "b.pskvsp")
    assert load(tmp_path / "b.pskvsp").labels.dtype == np.float32


def test_glosses_tfidf_is_scikit_learns():
    """data.glosses.tfidf: TfidfVectorizer's defaults (smooth idf, l2 rows) on tokens in >= 2 documents."""
    text = pytest.importorskip("sklearn.feature_extraction.text")
    from pskv.data.glosses import tfidf

    docs = [b"a b b c".split(), b"b c d".split(), b"a e e e c".split(), b"f".split(), b"d d a".split()]
    data, vocab = tfidf(docs)
    ref = text.TfidfVectorizer(analyzer=lambda d: d, min_df=2).fit(docs)
    want = ref.transform(docs).toarray()
    assert vocab == sorted(ref.vocabulary_)  # keys 1.. alphabetical: a b c d
    got = np.zeros_like(want)
    rows = np.repeat(np.arange(data.rows), np.diff(data.indptr))
    got[rows, data.keys.astype(int) - 1] = data.values
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # (values are float32 in SparseData)
