"""Tests for pskv.updaters: every rule against a plain float64 numpy reference, configs, errors, Custom."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pskv
from pskv import errors, updaters
from pskv.updaters import SGD, Adagrad, Adam, Add, Assign, Custom

pytestmark = pytest.mark.timeout(120)

N_ROWS, DIM = 20, 4


# ---- reference: sequential per distinct key, float64 ------------------------------------------------------------


def ref_row(u, w, s, g):
    """Apply rule `u` to one row w (dim,) with state s (width,) and summed update g, all float64, in place."""
    if isinstance(u, Add):
        w += g
    elif isinstance(u, Assign):
        w[:] = g
    elif isinstance(u, SGD):
        w -= u.lr * g
    elif isinstance(u, Adagrad):
        s += g * g
        w -= u.lr * g / (np.sqrt(s) + u.eps)
    elif isinstance(u, Adam):
        d = len(w)
        s[2 * d] += 1
        t = s[2 * d]
        s[:d] = u.beta1 * s[:d] + (1 - u.beta1) * g
        s[d : 2 * d] = u.beta2 * s[d : 2 * d] + (1 - u.beta2) * g * g
        mhat = s[:d] / (1 - u.beta1**t)
        vhat = s[d : 2 * d] / (1 - u.beta2**t)
        w -= u.lr * mhat / (np.sqrt(vhat) + u.eps)
    else:
        raise AssertionError(u)


def ref_apply(u, data, state, idx, upd):
    """Reference apply on float64 copies: sum duplicates, then one rule step per distinct row."""
    upd = upd.astype(np.float64)
    for r in np.unique(idx):
        g = upd[idx == r].sum(axis=0)
        ref_row(u, data[r], state[r], g)


def fresh(u, dtype, seed=0):
    """A (N_ROWS, DIM) table of `dtype` and its initialised state, plus float64 reference copies."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((N_ROWS, DIM)).astype(dtype)  # (N_ROWS, DIM) dtype
    state = np.empty((N_ROWS, u.state_width(DIM)), dtype)  # (N_ROWS, width) dtype
    u.init_state(state)
    return data, state, data.astype(np.float64), state.astype(np.float64)


RULES = [Add(), Assign(), SGD(lr=0.1), Adagrad(lr=0.1, initial_accumulator=0.1), Adam(lr=0.05)]
DTYPES = [(np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64), (np.float64, np.float32)]
KEYS = {
    "unique": lambda rng: rng.permutation(N_ROWS)[:12],
    "duplicates": lambda rng: rng.integers(0, 6, size=60),
    "mixed": lambda rng: np.concatenate([rng.integers(0, N_ROWS, size=15), [3, 3, 3]]),
}


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


# ---- every rule against the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("u", RULES, ids=repr)
@pytest.mark.parametrize("dtypes", DTYPES, ids=lambda d: f"{np.dtype(d[0])}<-{np.dtype(d[1])}")
@pytest.mark.parametrize("keys", list(KEYS))
def test_rule_matches_reference_over_consecutive_applies(u, dtypes, keys):
    """Each rule, for each dtype pair and key pattern, tracks the float64 reference over 4 applies."""
    data_dtype, upd_dtype = dtypes
    data, state, ref_data, ref_state = fresh(u, data_dtype)
    rng = np.random.default_rng(1)
    for _ in range(4):
        idx = KEYS[keys](rng).astype(np.int64)  # (n,) int64
        upd = rng.standard_normal((len(idx), DIM)).astype(upd_dtype)  # (n, DIM) upd_dtype
        u.apply(data, state if state.shape[1] else None, idx, upd)
        ref_apply(u, ref_data, ref_state, idx, upd)
        np.testing.assert_allclose(data, ref_data, **tol(data_dtype))
        np.testing.assert_allclose(state, ref_state, **tol(data_dtype))
    assert data.dtype == data_dtype and state.dtype == data_dtype


def test_adam_step_count_is_per_row():
    """A row touched in two applies has t=2, however many duplicates each apply had; untouched rows keep t=0."""
    u = Adam()
    data, state, _, _ = fresh(u, np.float32)
    ones = np.ones((4, DIM), np.float32)
    u.apply(data, state, np.array([1, 1, 1, 2], np.int64), ones)
    u.apply(data, state, np.array([1, 5, 5, 5], np.int64), ones)
    t = state[:, 2 * DIM]  # (N_ROWS,) float32
    assert t[1] == 2 and t[2] == 1 and t[5] == 1
    assert t[[0, 3, 4, 6]].tolist() == [0, 0, 0, 0]


def test_adagrad_initial_accumulator_fills_state():
    """init_state fills the accumulator with initial_accumulator."""
    u = Adagrad(initial_accumulator=0.25)
    state = np.empty((3, u.state_width(5)), np.float32)
    u.init_state(state)
    assert state.shape == (3, 5) and (state == 0.25).all()


def test_state_widths():
    """Stateless rules keep no state; Adagrad keeps dim columns and Adam 2*dim+1."""
    assert [u.state_width(8) for u in RULES] == [0, 0, 0, 8, 17]


def test_assign_sums_duplicates_and_leaves_other_rows():
    """Assign writes the sum of duplicate update rows; rows not in idx are untouched."""
    data = np.full((4, 2), 7.0, np.float32)
    Assign().apply(data, None, np.array([2, 0, 2], np.int64), np.array([[1, 2], [3, 4], [10, 20]], np.float32))
    np.testing.assert_array_equal(data, [[3, 4], [7, 7], [11, 22], [7, 7]])


def test_apply_empty_keys_is_a_no_op():
    """No keys, no change, for every rule."""
    for u in RULES:
        data, state, ref_data, _ = fresh(u, np.float32)
        u.apply(data, state if state.shape[1] else None, np.empty(0, np.int64), np.empty((0, DIM), np.float32))
        np.testing.assert_array_equal(data, ref_data.astype(np.float32))


def test_apply_accepts_non_contiguous_updates():
    """A strided or Fortran-ordered update array gives the same result as a contiguous one."""
    idx = np.array([0, 2, 2], np.int64)
    upd = np.asfortranarray(np.arange(3 * DIM, dtype=np.float64).reshape(3, DIM))  # (3, DIM) float64, F order
    for u in (Add(), Adam()):
        a, sa, _, _ = fresh(u, np.float32)
        b, sb, _, _ = fresh(u, np.float32)
        u.apply(a, sa if sa.shape[1] else None, idx, upd)
        u.apply(b, sb if sb.shape[1] else None, idx, np.ascontiguousarray(upd))
        np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(0, N_ROWS - 1), min_size=0, max_size=80),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_add_equals_add_at_for_integer_updates(keys, seed, dtype):
    """Add with duplicate keys equals np.add.at exactly when every value is a small integer."""
    rng = np.random.default_rng(seed)
    idx = np.array(keys, np.int64)  # (n,) int64
    upd = rng.integers(-100, 100, size=(len(idx), DIM)).astype(dtype)  # (n, DIM), integer-valued
    data = rng.integers(-1000, 1000, size=(N_ROWS, DIM)).astype(dtype)  # (N_ROWS, DIM)
    expected = data.copy()
    np.add.at(expected, idx, upd)
    Add().apply(data, None, idx, upd)
    np.testing.assert_array_equal(data, expected)


# ---- Custom -----------------------------------------------------------------------------------------------------


def clipped_sgd(rows, updates, state):
    """SGD with updates clipped to [-1, 1]; state[:, 0] counts the applies that touched each row."""
    rows -= 0.1 * np.clip(updates, -1.0, 1.0)
    state[:, 0] += 1


def halve_and_add(rows, updates, state):
    return rows * 0.5 + updates


def test_custom_clipped_sgd_with_counter():
    """Custom gets summed updates per distinct row and its state; both are scattered back."""
    u = Custom(clipped_sgd, state_width=1, init=0.0)
    data, state, ref_data, _ = fresh(u, np.float32)
    rng = np.random.default_rng(2)
    counts = np.zeros(N_ROWS)
    for _ in range(3):
        idx = rng.integers(0, 8, size=30)  # (30,) int64, many duplicates
        upd = rng.standard_normal((30, DIM)) * 0.5  # (30, DIM) float64
        u.apply(data, state, idx, upd)
        for r in np.unique(idx):
            ref_data[r] -= 0.1 * np.clip(upd[idx == r].sum(axis=0), -1.0, 1.0)
        counts[np.unique(idx)] += 1
    np.testing.assert_allclose(data, ref_data, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state[:, 0], counts)


def test_custom_returning_new_rows_is_used():
    """A Custom fn may return new rows instead of changing them in place; state is None with width 0."""
    seen = []

    def fn(rows, updates, state):
        seen.append(state)
        return halve_and_add(rows, updates, state)

    data = np.ones((5, 2), np.float64)
    Custom(fn).apply(data, None, np.array([4, 1, 4], np.int64), np.full((3, 2), 2.0))
    np.testing.assert_array_equal(data, [[1, 1], [2.5, 2.5], [1, 1], [1, 1], [4.5, 4.5]])
    assert seen == [None]


def test_custom_wrong_shape_raises_shape_error_and_leaves_rows():
    """A Custom fn returning the wrong shape raises ShapeError (a TableError) and changes nothing."""
    u = Custom(lambda rows, updates, state: rows[:, :1], name="bad")
    data = np.ones((5, 3), np.float32)
    with pytest.raises(errors.ShapeError, match="'bad' returned rows of shape"):
        u.apply(data, None, np.array([0, 1], np.int64), np.ones((2, 3), np.float32))
    assert isinstance(errors.ShapeError("x"), errors.TableError)
    assert (data == 1).all()


def test_custom_rejects_bad_arguments():
    """Custom needs a callable fn and a non-negative int state_width."""
    with pytest.raises(TypeError, match="callable"):
        Custom("sgd")
    with pytest.raises(ValueError, match="state_width"):
        Custom(clipped_sgd, state_width=-1)


def test_custom_config_names_the_function_and_cannot_be_rebuilt():
    """Custom config is JSON with the fn's module:qualname; from_config refuses it."""
    u = Custom(clipped_sgd, state_width=1, name="clip")
    cfg = json.loads(json.dumps(u.config()))
    assert cfg["custom"] == f"{__name__}:clipped_sgd" and cfg["name"] == "clip" and u.name == "clip"
    assert u == Custom(clipped_sgd, state_width=1, name="clip")
    assert u != Custom(clipped_sgd, state_width=2, name="clip")
    assert Custom(halve_and_add).name == "halve_and_add"
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        updaters.from_config(cfg)


# ---- get, config, repr, validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("u", RULES + [SGD(lr=0.3), Adagrad(eps=1e-6), Adam(beta1=0.5, beta2=0.9)], ids=repr)
def test_config_round_trips_through_json(u):
    """from_config(config()) rebuilds an equal updater of the same type, after JSON."""
    back = updaters.from_config(json.loads(json.dumps(u.config())))
    assert type(back) is type(u) and back == u and back.config() == u.config() and hash(back) == hash(u)


@pytest.mark.parametrize("name", ["add", "assign", "sgd", "adagrad", "adam"])
def test_get_by_name_is_case_insensitive_with_defaults(name):
    """get('SGD') is SGD() with default params; its name is the lower-case rule name."""
    u = updaters.get(name.upper())
    assert u.name == name and u == type(u)() and updaters.get(name) == u


def test_get_passes_instances_and_rejects_others():
    """An Updater is returned as is; unknown names list the valid ones; other types are TypeError."""
    u = SGD(lr=0.5)
    assert updaters.get(u) is u
    with pytest.raises(ValueError, match="add, assign, sgd, adagrad, adam"):
        updaters.get("momentum")
    with pytest.raises(TypeError):
        updaters.get(3)
    with pytest.raises(ValueError, match="momentum"):
        updaters.from_config({"name": "momentum"})
    with pytest.raises(ValueError, match="does not fit SGD"):
        updaters.from_config({"name": "sgd", "beta": 1})


def test_config_equality():
    """Same rule and params compare equal; different params or rules do not."""
    assert SGD(0.1) == SGD(0.1) and SGD(0.1).config() == SGD(0.1).config()
    assert SGD(0.1) != SGD(0.2) and SGD(0.1).config() != SGD(0.2).config()
    assert Add() != Assign() and Adam() != Adam(eps=1e-7) and Adam() == Adam()


def test_repr():
    assert repr(SGD(lr=0.05)) == "SGD(lr=0.05)"
    assert repr(Add()) == "Add()"
    assert repr(Adagrad(lr=0.1)) == "Adagrad(lr=0.1, eps=1e-10, initial_accumulator=0.0)"


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SGD(lr=0), "lr=0"),
        (lambda: SGD(lr=-0.1), "lr=-0.1"),
        (lambda: SGD(lr=float("nan")), "lr=nan"),
        (lambda: Adagrad(eps=0), "eps=0"),
        (lambda: Adagrad(initial_accumulator=-1), "initial_accumulator"),
        (lambda: Adam(beta1=1.0), "beta1=1.0"),
        (lambda: Adam(beta2=-0.1), "beta2=-0.1"),
        (lambda: Adam(eps=-1e-8), "eps"),
        (lambda: Adam(lr=0), "lr=0"),
    ],
)
def test_bad_params_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make, message", [
    (lambda: Adagrad(lr=-1), "Adagrad(lr=-1): lr must be > 0"),
    (lambda: SGD(momentum=1.5), "SGD(momentum=1.5): momentum must be in [0, 1)"),
    (lambda: Adam(beta2=1), "Adam(beta2=1): beta2 must be in [0, 1)"),
    (lambda: updaters.Prox(l1=-1), "Prox(l1=-1): l1 must be >= 0"),
    (lambda: updaters.FTRL(alpha=0), "FTRL(alpha=0): alpha must be > 0"),
])
def test_bad_params_name_the_updater(make, message):
    """A config error names the updater and the argument, as the user wrote them (issue 33)."""
    with pytest.raises(pskv.ConfigError) as info:
        make()
    assert str(info.value) == message


def test_apply_rejects_mismatched_arrays():
    """Wrong update shape or missing state is ShapeError; non-float values are DTypeError."""
    data = np.zeros((4, 3), np.float32)
    idx = np.array([0, 1], np.int64)
    with pytest.raises(errors.ShapeError, match=r"expected \(2, 3\)"):
        Add().apply(data, None, idx, np.ones((2, 2), np.float32))
    with pytest.raises(errors.ShapeError, match=r"needs \(4, 7\) float32"):
        Adam().apply(data, None, idx, np.ones((2, 3), np.float32))
    with pytest.raises(errors.DTypeError, match="int64"):
        Add().apply(data, None, idx, np.ones((2, 3), np.int64))


def test_int32_keys_match_int64_keys():
    """Keys of another integer dtype are widened to int64 before the composite sort key is built."""
    idx = np.array([7, 3, 7, 19, 3, 3], np.int64)
    upd = np.random.default_rng(3).standard_normal((6, DIM))  # (6, DIM) float64
    a, sa, _, _ = fresh(Adam(), np.float32)
    b, sb, _, _ = fresh(Adam(), np.float32)
    Adam().apply(a, sa, idx, upd)
    Adam().apply(b, sb, idx.astype(np.int32), upd)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sa, sb)


def test_stable_order_matches_stable_argsort_on_both_paths():
    """The composite-key sort and its overflow fallback both give np.argsort(kind='stable')."""
    idx = np.random.default_rng(4).integers(0, 50, size=500)  # (500,) int64, many duplicates
    expected = np.argsort(idx, kind="stable")
    np.testing.assert_array_equal(updaters.stable_order(idx, 50), expected)
    np.testing.assert_array_equal(updaters.stable_order(idx, 2**62), expected)
