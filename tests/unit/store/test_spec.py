"""store/spec.py: TableSpec validation, deterministic initialisers, check_keys / check_values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pskv import updaters
from pskv.errors import DTypeError, KeyOutOfRange, ShapeError, TableError
from pskv.store.spec import (Constant, Normal, TableSpec, Uniform, Zeros, as_init, check_keys,
                        check_values)

pytestmark = pytest.mark.timeout(60)


def spec(name="emb", rows=100, dim=4, dtype=np.float32, init=None) -> TableSpec:
    return TableSpec(name, rows, dim, np.dtype(dtype), updaters.Add(), init or Zeros())


def filled(init, rows, dim=3, first=0, table="emb", dtype=np.float64) -> np.ndarray:
    out = np.empty((rows, dim), dtype)  # (rows, dim) the initial values of rows first..first+rows
    init.fill(out, first, table)
    return out


# ---- TableSpec ------------------------------------------------------------------------------------


def test_tablespec_valid_config_and_describe():
    """A valid spec describes itself and gives a JSON-able config of everything nodes must agree on."""
    s = spec(rows=1000, dim=8, init=Normal(std=0.1, seed=3))
    assert s.config() == {"name": "emb", "rows": 1000, "dim": 8, "dtype": "float32", "updater": {"name": "add"},
                          "init": {"init": "Normal", "std": 0.1, "seed": 3, "mean": 0.0}}
    assert s.describe() == "(1000, 8) float32 updater=Add()"


@pytest.mark.parametrize("name", ["", None, 3])
def test_tablespec_bad_name_raises(name):
    """A table name must be a non-empty string."""
    with pytest.raises(TableError, match="must be a non-empty string"):
        spec(name=name)


@pytest.mark.parametrize("rows, dim", [(0, 4), (-1, 4), (10, 0), (10, -3)])
def test_tablespec_bad_shape_raises(rows, dim):
    """rows and dim must both be >= 1; the error names the table and both numbers."""
    with pytest.raises(ShapeError, match=f"table 'emb': rows={rows}, dim={dim}; both must be >= 1"):
        spec(rows=rows, dim=dim)


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.complex64, np.bool_])
def test_tablespec_bad_dtype_raises(dtype):
    """Only float32 and float64 tables exist."""
    with pytest.raises(DTypeError, match=f"table 'emb': dtype {np.dtype(dtype)} is not supported"):
        spec(dtype=dtype)


def test_tablespec_configs_differ_when_declarations_differ():
    """config() differs whenever rows, dim, dtype, updater or init differ (what the coordinator compares)."""
    base = spec().config()
    others = [spec(rows=101), spec(dim=5), spec(dtype=np.float64), spec(init=Constant(1.0)),
              TableSpec("emb", 100, 4, np.dtype(np.float32), updaters.SGD(lr=0.1), Zeros())]
    assert all(o.config() != base for o in others)
    assert spec().config() == base


# ---- initialisers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("init", [Normal(std=0.5, seed=1), Uniform(-1, 1, seed=2), Constant(3.5), Zeros()],
                         ids=repr)
def test_init_same_values_whole_or_in_shards(init):
    """Rows [0,100) filled at once equal rows [0,37) and [37,100) filled separately (any node split)."""
    whole = filled(init, 100)
    parts = np.concatenate([filled(init, 37), filled(init, 63, first=37)])
    assert np.array_equal(whole, parts)


def test_init_depends_on_seed_and_table():
    """Another seed or another table name gives other values; the same (seed, table, row) the same values."""
    a = filled(Normal(seed=1), 50)
    assert np.array_equal(a, filled(Normal(seed=1), 50))
    assert not np.array_equal(a, filled(Normal(seed=2), 50))
    assert not np.array_equal(a, filled(Normal(seed=1), 50, table="other"))


def test_init_float32_equals_float64_rounded():
    """A float32 table gets the float64 values rounded: the dtype does not change the draw."""
    init = Uniform(0, 1, seed=5)
    assert np.array_equal(filled(init, 20, dtype=np.float32), filled(init, 20).astype(np.float32))


def test_init_normal_mean_and_std():
    """Normal(mean=2, std=0.5) over 100k values has a sample mean and std close to 2 and 0.5."""
    v = filled(Normal(std=0.5, mean=2.0, seed=11), 25_000, dim=4).ravel()
    assert abs(v.mean() - 2.0) < 0.01  # 5 standard errors
    assert abs(v.std() - 0.5) < 0.01
    assert np.isfinite(v).all()


def test_init_uniform_in_range():
    """Uniform(low, high) values lie in [low, high) and spread over the whole interval."""
    v = filled(Uniform(-3.0, 5.0, seed=4), 25_000, dim=4).ravel()
    assert v.min() >= -3.0 and v.max() < 5.0
    assert v.min() < -2.99 and v.max() > 4.99
    assert abs(v.mean() - 1.0) < 0.05


def test_init_constant_and_zeros():
    """Constant(c) fills every value with c; Zeros() with 0."""
    assert (filled(Constant(-2.5), 10) == -2.5).all()
    assert (filled(Zeros(), 10) == 0).all()


@pytest.mark.parametrize("bad, match", [(Normal(std=-1.0), "std must be >= 0"),
                                        (Uniform(2.0, 1.0), "need low <= high")])
def test_init_bad_parameters_raise(bad, match):
    """A negative std or low > high is a ValueError when the rows are filled."""
    with pytest.raises(ValueError, match=match):
        filled(bad, 3)


def test_as_init_numbers_and_initialisers():
    """0 means Zeros, another number Constant, an initialiser is kept; anything else is a TypeError."""
    assert as_init(0) == Zeros() and as_init(0.0) == Zeros()
    assert as_init(2) == Constant(2.0)
    n = Normal(std=0.1)
    assert as_init(n) is n
    for bad in [True, "0", None, [0.0]]:
        with pytest.raises(TypeError, match="use a number"):
            as_init(bad)


# ---- check_keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [[0, 5, 99], np.array([3, 3, 1], np.int32), np.array([7], np.uint8), 42,
                                  np.arange(100)[::-7]])
def test_check_keys_valid_gives_contiguous_int64(keys):
    """Integer keys of any int dtype, a scalar, or a strided view become a C-contiguous 1-D int64 array."""
    arr = check_keys(spec(), keys, "pull")
    assert arr.dtype == np.int64 and arr.ndim == 1 and arr.flags.c_contiguous
    assert arr.tolist() == np.atleast_1d(np.asarray(keys)).astype(np.int64).tolist()


@pytest.mark.parametrize("bad", [100, 101, 10**12, -1, -(10**12)])
def test_check_keys_out_of_range_names_key_and_range(bad):
    """A key outside [0, rows) is a KeyOutOfRange naming the op, the table, the key and the range."""
    with pytest.raises(KeyOutOfRange, match=rf"push on table 'emb': key {bad} is outside \[0, 100\)"):
        check_keys(spec(), [1, bad, 2], "push")


def test_check_keys_out_of_range_is_indexerror():
    """KeyOutOfRange is also an IndexError, so generic handlers catch it."""
    with pytest.raises(IndexError):
        check_keys(spec(), [100], "pull")


def test_check_keys_huge_unsigned_key_named_as_given():
    """A uint64 key >= 2**63 is reported with its own value, not its int64 wrap-around."""
    with pytest.raises(KeyOutOfRange, match=str(2**63 + 5)):
        check_keys(spec(), np.array([2**63 + 5], np.uint64), "pull")


@pytest.mark.parametrize("keys", [[1.0, 2.0], np.array([1.5]), np.array([True, False]), ["1", "2"],
                                  np.array([1 + 0j])])
def test_check_keys_non_integer_raises_dtypeerror(keys):
    """Float, bool, string or complex keys are a DTypeError naming the table and the dtype."""
    with pytest.raises(DTypeError, match="pull on table 'emb': keys have dtype .*; keys are integer row ids"):
        check_keys(spec(), keys, "pull")


@pytest.mark.parametrize("keys", [np.zeros((2, 2), np.int64), [[1], [2]], np.zeros((1, 1, 1), np.int64)])
def test_check_keys_not_1d_raises_shapeerror(keys):
    """2-D (or deeper) keys are a ShapeError naming the shape."""
    with pytest.raises(ShapeError, match=r"pull on table 'emb': keys have shape \("):
        check_keys(spec(), keys, "pull")


@pytest.mark.parametrize("keys", [[], np.array([], np.float64), np.array([], np.int32)])
def test_check_keys_empty_is_valid(keys):
    """Empty keys of any dtype are an empty int64 array."""
    arr = check_keys(spec(), keys, "pull")
    assert arr.shape == (0,) and arr.dtype == np.int64


# ---- check_values ---------------------------------------------------------------------------------


def test_check_values_float64_into_float32_accepted():
    """float64 values for a float32 table are cast (same kind) to a C-contiguous float32 array."""
    vals = np.arange(8, dtype=np.float64).reshape(2, 4)
    arr = check_values(spec(), vals, 2, "push")
    assert arr.dtype == np.float32 and arr.flags.c_contiguous and arr.tolist() == vals.tolist()


@pytest.mark.parametrize("vals", [np.ones((3, 4), np.int64), np.ones((3, 4), np.float16), [[1, 2, 3, 4]] * 3,
                                  np.ones((3, 8), np.float32)[:, ::2]])
def test_check_values_castable_or_strided_accepted(vals):
    """Integer, float16, list or strided values become a C-contiguous (n, dim) table-dtype array."""
    arr = check_values(spec(), vals, 3, "push")
    assert arr.shape == (3, 4) and arr.dtype == np.float32 and arr.flags.c_contiguous


def test_check_values_dim1_flat_accepted():
    """For a dim-1 table, values of shape (n,) are taken as (n, 1)."""
    arr = check_values(spec(dim=1), np.array([1.0, 2.0, 3.0]), 3, "set")
    assert arr.shape == (3, 1) and arr.ravel().tolist() == [1, 2, 3]


def test_check_values_flat_for_wider_table_raises():
    """For a dim-4 table, (n,) values are a ShapeError (no guessing)."""
    with pytest.raises(ShapeError, match=r"push on table 'emb': values have shape \(4,\), expected \(4, 4\)"):
        check_values(spec(), np.ones(4), 4, "push")


@pytest.mark.parametrize("shape", [(3, 3), (2, 4), (4, 4), (3, 4, 1), ()])
def test_check_values_wrong_shape_raises(shape):
    """Values not shaped (n, dim) are a ShapeError naming the got and expected shapes."""
    with pytest.raises(ShapeError, match=r"values have shape .*, expected \(3, 4\)"):
        check_values(spec(), np.ones(shape), 3, "push")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, object, "U3"])
def test_check_values_uncastable_dtype_raises(dtype):
    """Complex, object or string values are a DTypeError naming the dtype and the table's dtype."""
    vals = np.ones((3, 4), dtype=dtype) if dtype != "U3" else np.full((3, 4), "abc")
    with pytest.raises(DTypeError, match="push on table 'emb': values of dtype .* cannot be cast safely to the "
                                         "table's float32"):
        check_values(spec(), vals, 3, "push")


@pytest.mark.parametrize("op", ["push", "set", "push_pull"])
def test_check_values_float64_beyond_float32_range_raises(op):
    """A finite float64 value that float32 cannot hold (it would become inf) is a DTypeError naming
    the op, the table, both dtypes and the largest magnitude, not a silent inf in the table."""
    vals = np.ones((2, 4))
    vals[1, 2] = -1e300
    with pytest.raises(DTypeError, match=rf"{op} on table 'emb': values of dtype float64 do not fit the table's "
                                         r"float32: the largest magnitude is 1e\+300, above float32's largest "
                                         r"3\.40282e\+38 \(the cast would overflow to inf"):
        check_values(spec(), vals, 2, op)


def test_check_values_narrowing_keeps_the_caller_inf_and_nan_and_the_float32_maximum():
    """inf and nan given by the caller stay what they are; float32's own largest value still fits."""
    big = float(np.finfo(np.float32).max)
    vals = np.array([[np.inf, -np.inf, np.nan, big], [-big, 0.0, 1.5, -2.0]])
    arr = check_values(spec(), vals, 2, "push")
    assert arr.dtype == np.float32
    assert arr[0, :2].tolist() == [np.inf, -np.inf] and np.isnan(arr[0, 2])
    assert arr[0, 3] == np.float32(big) and arr[1].tolist() == [-big, 0.0, 1.5, -2.0]


def test_check_values_longdouble_beyond_float64_range_raises():
    """A float64 table refuses long double values beyond its range too (where long double is wider)."""
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 here")
    vals = np.full((1, 4), np.longdouble("1e400"))
    with pytest.raises(DTypeError, match=r"set on table 'emb': values of dtype float128 do not fit the table's "
                                         r"float64: the largest magnitude is 1e\+400, above float64's largest "
                                         r"1\.79769e\+308"):
        check_values(spec(dtype=np.float64), vals, 1, "set")
