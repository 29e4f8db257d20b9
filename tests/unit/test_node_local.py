"""A private 1-node cluster in this process: bad input raises the right PskvError, good input gives exact values."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pskv
from pskv import updaters

pytestmark = pytest.mark.timeout(60)

ROWS, DIM = 100, 4




@pytest.fixture
def table(node):
    """Table 't' (100 x 4 float32, add, zeros) on the node."""
    return node.table("t", rows=ROWS, dim=DIM)


def rows(keys, dim=DIM, scale=1.0) -> np.ndarray:
    """Distinct recognisable values per key: row k is k*10 + [0, 1, ..., dim-1], times scale."""
    keys = np.asarray(keys)
    return (keys[:, None] * 10.0 + np.arange(dim)[None, :]) * scale  # (n, dim) float64


# ---- bad input ------------------------------------------------------------------------------------


def test_table_unknown_name_raises_unknowntable(node, table):
    """A handle on an undeclared table is UnknownTable naming it and the declared ones."""
    worker = node.worker()
    try:
        with pytest.raises(pskv.UnknownTable, match=r"no table 'nope' on node 0; declared tables: \['t'\]"):
            worker.table("nope")
    finally:
        worker.close()


def test_table_unknown_name_is_keyerror(node):
    """UnknownTable is a KeyError too, but its message is the sentence, not a quoted repr."""
    worker = node.worker()
    try:
        with pytest.raises(KeyError) as info:
            worker.table("nope")
        assert str(info.value).startswith("no table 'nope'")
    finally:
        worker.close()


@pytest.mark.parametrize("op", ["pull", "push", "set"])
@pytest.mark.parametrize("bad", [-1, ROWS, ROWS + 5, -(2**40)])
def test_table_key_out_of_range_raises(table, op, bad):
    """A key < 0 or >= rows is KeyOutOfRange naming the op, the table, the key and the range."""
    keys = [3, bad, 7]
    args = (keys,) if op == "pull" else (keys, np.ones((3, DIM)))
    with pytest.raises(pskv.KeyOutOfRange, match=rf"{op} on table 't': key {bad} is outside \[0, {ROWS}\)"):
        getattr(table, op)(*args)


def test_table_rejected_push_changes_nothing(table):
    """A push with one bad key is rejected whole: the valid rows in it are not updated."""
    table.set([1, 2], rows([1, 2])).wait(5)
    with pytest.raises(pskv.KeyOutOfRange):
        table.push([1, 2, ROWS], np.ones((3, DIM)))
    assert np.array_equal(table.pull([1, 2]), rows([1, 2]))


@pytest.mark.parametrize("op", ["push", "set"])
@pytest.mark.parametrize("shape", [(3, DIM + 1), (2, DIM), (3,), (3, DIM, 1), (DIM, 3)])
def test_table_values_wrong_shape_raises(table, op, shape):
    """Values not shaped (len(keys), dim) are a ShapeError naming the table, both shapes."""
    with pytest.raises(pskv.ShapeError, match=rf"{op} on table 't': values have shape .*, expected \(3, {DIM}\)"):
        getattr(table, op)([1, 2, 3], np.ones(shape))


@pytest.mark.parametrize("op", ["push", "set"])
@pytest.mark.parametrize("values", [np.ones((2, DIM), np.complex64), np.full((2, DIM), "x"),
                                    np.full((2, DIM), None, dtype=object)], ids=["complex", "str", "object"])
def test_table_values_uncastable_dtype_raises(table, op, values):
    """Complex, string or object values are a DTypeError naming the table and both dtypes."""
    with pytest.raises(pskv.DTypeError, match=rf"{op} on table 't': values of dtype .* cannot be cast safely to "
                                              r"the table's float32"):
        getattr(table, op)([1, 2], values)


@pytest.mark.parametrize("keys", [[1.0, 2.0], np.array([[1, 2]]), ["a"]], ids=["float", "2d", "str"])
def test_table_bad_keys_raise(table, keys):
    """Float or string keys are a DTypeError, 2-D keys a ShapeError; both name the table."""
    with pytest.raises((pskv.DTypeError, pskv.ShapeError), match="pull on table 't': keys have"):
        table.pull(keys)


def test_table_pull_out_wrong_shape_raises(table):
    """An `out` array of the wrong shape is a ShapeError naming the table and both shapes."""
    with pytest.raises(pskv.ShapeError, match=rf"pull on table 't': out has shape \(3, 5\), expected \(2, {DIM}\)"):
        table.pull([1, 2], out=np.empty((3, 5), np.float32))


@pytest.mark.parametrize("out", [np.empty((2, DIM), np.float64), np.empty((2, DIM), np.int32)],
                         ids=["float64", "int32"])
def test_table_pull_out_wrong_dtype_raises(table, out):
    """An `out` array of another dtype is a DTypeError naming the table and the dtype."""
    with pytest.raises(pskv.DTypeError, match=rf"pull on table 't': out has dtype {out.dtype}, the table float32"):
        table.pull([1, 2], out=out)


def test_table_pull_out_readonly_raises(table):
    """A read-only `out` array is rejected before anything is written."""
    out = np.zeros((2, DIM), np.float32)
    out.flags.writeable = False
    with pytest.raises(pskv.ShapeError, match="writeable"):
        table.pull([1, 2], out=out)


def test_node_table_declared_twice_raises_tableerror(node, table):
    """Declaring a table name a second time is a TableError naming it; the first stays usable."""
    with pytest.raises(pskv.TableError, match="table 't' is already declared on node 0"):
        node.table("t", rows=ROWS, dim=DIM)
    table.push([0], np.ones((1, DIM))).wait(5)
    assert table.pull([0]).tolist() == [[1.0] * DIM]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rows=0), pskv.ShapeError, "table 'bad': rows=0, dim=4"),
    (dict(dim=0), pskv.ShapeError, "table 'bad': rows=10, dim=0"),
    (dict(dtype="int64"), pskv.DTypeError, "table 'bad': dtype int64 is not supported"),
])
def test_node_table_bad_declaration_raises(node, kwargs, error, match):
    """A table with no rows, no columns or an integer dtype is rejected, naming the table."""
    args = dict(rows=10, dim=4) | kwargs
    with pytest.raises(error, match=match):
        node.table("bad", **args)


def test_node_table_unknown_updater_raises_valueerror(node):
    """An unknown updater name is a ValueError that lists the valid names; the table is not declared."""
    with pytest.raises(ValueError, match="unknown updater 'rmsprop'; valid names are add, assign, sgd, adagrad, adam"):
        node.table("t", rows=10, dim=2, updater="rmsprop")
    node.table("t", rows=10, dim=2)  # the name is still free


@pytest.mark.parametrize("call", ["pull", "push", "set", "table", "run", "worker", "worker.table", "barrier"])
def test_node_calls_after_shutdown_raise_closederror(node, table, call):
    """After shutdown every API call raises ClosedError saying the node was shut down."""
    worker = node.worker()  # made before the shutdown
    node.shutdown()
    calls = {
        "pull": lambda: table.pull([1]),
        "push": lambda: table.push([1], np.ones((1, DIM))),
        "set": lambda: table.set([1], np.ones((1, DIM))),
        "table": lambda: node.table("u", rows=5),
        "run": lambda: node.run(lambda w: None),
        "worker": node.worker,
        "worker.table": lambda: worker.table("t"),
        "barrier": lambda: worker.barrier(timeout=5),
    }
    with pytest.raises(pskv.ClosedError, match="node 0 was shut down"):
        calls[call]()
    assert isinstance(pskv.ClosedError("x"), RuntimeError)


def test_node_shutdown_is_idempotent(node):
    """A second shutdown does nothing; repr says closed."""
    node.shutdown()
    node.shutdown()
    assert repr(node) == "<Node 0/1 closed tables=0>"


# ---- exact values ---------------------------------------------------------------------------------


def test_table_initial_values_from_init(node):
    """A fresh table holds its init: a constant, or the same Normal draw on every pull."""
    c = node.table("c", rows=10, dim=3, init=2.5)
    assert (c.pull(np.arange(10)) == 2.5).all()
    n = node.table("n", rows=10, dim=3, init=pskv.Normal(std=0.1, seed=1))
    first = n.pull(np.arange(10))
    assert first.std() > 0 and np.array_equal(first, n.pull(np.arange(10)))


def test_table_push_adds(table):
    """Two waited pushes add to the initial zeros; a pull sees both."""
    keys = [5, 1, 9]
    table.push(keys, rows(keys)).wait(5)
    table.push(keys, rows(keys)).wait(5)
    assert np.array_equal(table.pull(keys), 2 * rows(keys))
    assert (table.pull([0, 2]) == 0).all()


def test_table_set_overwrites(table):
    """set replaces the rows, whatever was pushed before."""
    table.push([3, 4], np.ones((2, DIM))).wait(5)
    table.set([3, 4], rows([3, 4])).wait(5)
    assert np.array_equal(table.pull([3, 4]), rows([3, 4]))


def test_table_set_duplicate_keys_last_wins(table):
    """For duplicate keys in one set, the last value given wins."""
    vals = np.array([[1.0] * DIM, [2.0] * DIM, [3.0] * DIM, [4.0] * DIM])
    table.set([7, 8, 7, 7], vals).wait(5)
    assert table.pull([7, 8]).tolist() == [[4.0] * DIM, [2.0] * DIM]


def test_table_pull_duplicates_returns_row_per_key(table):
    """A pull with repeated keys returns one row per requested key, in request order."""
    table.set([1, 2], rows([1, 2])).wait(5)
    keys = [2, 1, 2, 2, 1]
    assert np.array_equal(table.pull(keys), rows(keys))


def test_table_push_duplicate_keys_sum(table):
    """Duplicate keys in one push add up: row k gets the sum of its update rows."""
    keys = np.array([4, 4, 6, 4, 6])
    vals = np.arange(5 * DIM, dtype=np.float64).reshape(5, DIM)
    table.push(keys, vals).wait(5)
    got = table.pull([4, 6])
    assert np.array_equal(got[0], vals[[0, 1, 3]].sum(axis=0))
    assert np.array_equal(got[1], vals[[2, 4]].sum(axis=0))


def test_table_empty_keys(table):
    """Empty keys: pull gives a (0, dim) array, push and set complete at once and change nothing."""
    assert table.pull([]).shape == (0, DIM)
    assert table.push([], np.empty((0, DIM))).wait(5) is None
    assert table.set(np.array([], np.int64), np.empty((0, DIM))).wait(5) is None
    assert (table.pull(np.arange(ROWS)) == 0).all()


def test_table_random_order_keys(table):
    """Keys in random order (all rows, shuffled) set and pull back exactly, in the caller's order."""
    rng = np.random.default_rng(0)
    keys = rng.permutation(ROWS)
    table.set(keys, rows(keys)).wait(5)
    order = rng.permutation(ROWS)
    assert np.array_equal(table.pull(order), rows(order))
    assert np.array_equal(table.pull(np.arange(ROWS)), rows(np.arange(ROWS)))


def test_table_pull_into_out(table):
    """pull(out=) writes into the given array and returns it."""
    table.set([1, 2], rows([1, 2])).wait(5)
    out = np.full((2, DIM), -1.0, np.float32)
    got = table.pull([2, 1], out=out)
    assert got is out and np.array_equal(out, rows([2, 1]))


def test_table_push_float64_into_float32(table):
    """float64 values push into a float32 table, rounded to float32."""
    vals = np.full((1, DIM), 0.1, np.float64)
    table.push([0], vals).wait(5)
    got = table.pull([0])
    assert got.dtype == np.float32 and (got == np.float32(0.1)).all()


def test_table_float64_table_keeps_precision(node):
    """A float64 table stores float64 values exactly and accepts float32 and int values."""
    t = node.table("d", rows=10, dim=2, dtype="float64")
    t.set([1], np.array([[0.1, 1e-300]])).wait(5)
    t.push([2], np.array([[1, 2]], np.int32)).wait(5)
    got = t.pull([1, 2])
    assert got.dtype == np.float64 and got.tolist() == [[0.1, 1e-300], [1.0, 2.0]]


def test_table_dim1_flat_values(node):
    """For a dim-1 table, (n,) values work for push and set; pull gives (n, 1)."""
    t = node.table("scalar", rows=10, dim=1)
    t.set([1, 2], np.array([1.5, 2.5])).wait(5)
    t.push([2, 2], [1.0, 1.0]).wait(5)
    assert t.pull([1, 2]).tolist() == [[1.5], [4.5]]


def _reference(updater, w, state, keys, g):
    """One push of `g` (n, dim) at `keys` through `updater`, on float64 numpy arrays w and state, in place."""
    for k in np.unique(keys):
        gk = g[keys == k].sum(axis=0)
        if updater.name == "add":
            w[k] += gk
        elif updater.name == "assign":
            w[k] = gk
        elif updater.name == "sgd":
            w[k] -= updater.lr * gk
        elif updater.name == "adagrad":
            state[k] += gk * gk
            w[k] -= updater.lr * gk / (np.sqrt(state[k]) + updater.eps)
        elif updater.name == "adam":
            d = w.shape[1]
            state[k, 2 * d] += 1
            t = state[k, 2 * d]
            state[k, :d] = updater.beta1 * state[k, :d] + (1 - updater.beta1) * gk
            state[k, d:2 * d] = updater.beta2 * state[k, d:2 * d] + (1 - updater.beta2) * gk * gk
            mhat = state[k, :d] / (1 - updater.beta1 ** t)
            vhat = state[k, d:2 * d] / (1 - updater.beta2 ** t)
            w[k] -= updater.lr * mhat / (np.sqrt(vhat) + updater.eps)


@pytest.mark.parametrize("updater", ["add", "assign", pskv.SGD(lr=0.1), pskv.Adagrad(lr=0.5, initial_accumulator=0.1),
                                     pskv.Adam(lr=0.05)], ids=["add", "assign", "sgd", "adagrad", "adam"])
def test_table_updater_matches_numpy_reference(node, updater):
    """Five pushes (random keys with duplicates) through each updater equal a float64 numpy reference."""
    u = updaters.get(updater)
    t = node.table("w", rows=20, dim=3, updater=updater, init=pskv.Uniform(-1, 1, seed=3))
    w = t.pull(np.arange(20)).astype(np.float64)  # (20, 3) the initial rows
    state = np.full((20, u.state_width(3) or 1), getattr(u, "initial_accumulator", 0.0))
    rng = np.random.default_rng(1)
    for _ in range(5):
        keys = rng.integers(0, 20, size=15)
        g = rng.standard_normal((15, 3))
        t.push(keys, g).wait(5)
        _reference(u, w, state, keys, g)
    np.testing.assert_allclose(t.pull(np.arange(20)), w, rtol=2e-5, atol=2e-6)


def test_table_updater_name_case_insensitive(node):
    """Built-in updater names are case-insensitive."""
    t = node.table("s", rows=5, dim=1, updater="SGD")
    t.push([0], [1.0]).wait(5)
    assert t.pull([0]).item() == pytest.approx(-0.01)


# ---- run, workers, lifecycle, stats ---------------------------------------------------------------


def test_node_run_threads_push_concurrently(node, table):
    """Four worker threads pushing the same keys concurrently lose no update."""
    keys = np.arange(ROWS).repeat(2)  # every key twice per push

    def train(w: pskv.Worker):
        t = w.table("t")
        for _ in range(50):
            t.push(keys, np.ones((len(keys), DIM)))
        w.wait_all(10)

    node.run(train, threads=4)
    assert (table.pull(np.arange(ROWS)) == 4 * 50 * 2).all()


def test_node_run_gives_each_worker_its_thread(node):
    """node.run(fn, threads=3) calls fn once per thread with workers 0..2 of this node."""
    seen = []
    node.run(lambda w: seen.append((w.rank, w.num_nodes, w.thread)), threads=3)
    assert sorted(seen) == [(0, 1, 0), (0, 1, 1), (0, 1, 2)]


def test_node_run_reraises_worker_exception(node):
    """An exception in one worker thread is re-raised by node.run; the node is then failed, and shuts down."""
    def train(w: pskv.Worker):
        if w.thread == 1:
            raise ValueError("boom in worker 1")

    with pytest.raises(ValueError, match="boom in worker 1"):
        node.run(train, threads=2)
    assert repr(node) == "<Node 0/1 failed tables=0>"
    with pytest.raises(pskv.PskvError):
        node.table("t", rows=5)
    node.shutdown(timeout=5)
    assert repr(node) == "<Node 0/1 closed tables=0>"


def test_node_worker_barrier_one_node(node, table):
    """Two workers' barriers complete together, and a push before the barrier is visible after it."""
    workers = [node.worker(), node.worker()]
    results = []

    def body(w):
        t = w.table("t")
        t.push([w.thread], np.ones((1, DIM)))
        w.barrier(timeout=10)
        results.append(t.pull([0, 1]).sum())

    threads = [threading.Thread(target=body, args=(w,), name=f"test-worker-{w.thread}") for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    for w in workers:
        w.close()
    assert results == [2 * DIM, 2 * DIM]


def test_node_context_manager_closes():
    """`with pskv.init() as node:` shuts the node down at the end of the block."""
    with pskv.init() as node:
        t = node.table("t", rows=5, dim=2)
        t.push([1], np.ones((1, 2))).wait(5)
        assert repr(node) == "<Node 0/1 up tables=1>"
    assert repr(node) == "<Node 0/1 closed tables=1>"
    with pytest.raises(pskv.ClosedError):
        t.pull([1])


def test_node_context_manager_exception_propagates_and_closes():
    """An exception inside `with pskv.init()` propagates unchanged and the node is closed."""
    with pytest.raises(KeyError, match="inside"):
        with pskv.init() as node:
            raise KeyError("inside")
    assert repr(node).startswith("<Node 0/1 closed")


def test_node_rank_and_num_nodes():
    """A private cluster is node 0 of 1, with its keyword overrides applied."""
    with pskv.init(threads=3) as node:
        assert (node.rank, node.num_nodes, node.config.threads) == (0, 1, 3)


def test_node_stats_counts_local_keys(node, table):
    """stats() counts calls and local keys per table; a 1-node cluster sends no key to another node."""
    table.pull([1, 2, 3, 4, 5])
    table.push([1, 2, 3], np.ones((3, DIM))).wait(5)
    table.pull([9])
    stats = node.stats()
    assert stats["rank"] == 0
    assert stats["tables"] == {"t": {"pulls": 2, "pushes": 1, "local_keys": 9, "remote_keys": 0, "localizes": 0,
                                     "forwards": 0, "relocated_in": 0, "replica_syncs": 0}}
    assert stats["requests_served"] == 0 and stats["request_errors"] == 0 and stats["dropped"] == 0


def test_table_repr_names_table_and_shape(table):
    """A Table handle's repr names the table, its shape, dtype and updater."""
    assert repr(table) == "<Table 't' (100, 4) float32 updater=Add() on node 0>"
