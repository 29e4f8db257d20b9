"""Node programs for the two-level aggregation tests: `python aggregation_scenarios.py NAME [ARGS]`.

Each scenario runs on every node of a cluster started by `pskv.launch`, asserts exact values
itself and exits non-zero when an assertion fails. Every thread of every node pushes the same
keys in a step (a round per key), with small integer values, so float32 sums are exact and each
node can compute the whole cluster's expected rows locally.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

import pskv

ROWS, DIM, STEPS = 40, 3, 12
MODELS = {"bsp": pskv.BSP, "async": pskv.Async, "ssp": lambda: pskv.SSP(staleness=1)}


def _keys(step: int) -> np.ndarray:
    """The keys every thread pushes at `step`: the same for all, different per step (per-key rounds differ)."""
    return np.sort(np.random.default_rng(step).choice(ROWS, 12, replace=False))


def _grads(rank: int, thread: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([rank, thread, step])
    return rng.integers(-3, 4, (12, DIM)).astype(np.float32)  # (12, DIM) small integers


def _node_sums(rank: int, threads: int) -> np.ndarray:
    """(STEPS + 1, ROWS, DIM) float64: node `rank`'s cumulative level-1 sums after each step (index 0: none)."""
    out = np.zeros((STEPS + 1, ROWS, DIM))
    for step in range(STEPS):
        out[step + 1] = out[step]
        for t in range(threads):
            out[step + 1, _keys(step)] += _grads(rank, t, step)
    return out


def rounds(node: pskv.Node, threads: int, model: str) -> None:
    """Round sums with the `add` updater: exact under level-2 BSP, consistent prefixes under Async."""
    node.table("g", rows=ROWS, dim=DIM, aggregate=pskv.NodeAggregate(), consistency=MODELS[model]())
    sums = [_node_sums(r, threads) for r in range(node.num_nodes)]
    total = sum(sums)  # (STEPS + 1, ROWS, DIM)

    def train(w: pskv.Worker) -> None:
        g = w.table("g")
        assert np.array_equal(g.pull(np.arange(ROWS)), np.zeros((ROWS, DIM))), "plain read before any round"
        w.barrier()  # no thread of any node pushes before every thread has read
        for step in range(STEPS):
            keys = _keys(step)
            g.push(keys, _grads(w.rank, w.thread, step))
            order = np.random.default_rng([w.thread, step]).permutation(np.r_[keys, keys[:3]])  # shuffled, dups
            got = g.pull(order, timeout=30)
            if model != "async":
                assert np.array_equal(got, total[step + 1, order]), f"step {step}: not the sum of all nodes"
                continue
            mine = sums[w.rank][step + 1, order]
            other = got - mine  # what the other nodes' rounds added, per row: one of their prefixes
            for i, k in enumerate(order):
                assert any(np.array_equal(other[i], sum(s[j, k] for r, s in enumerate(sums) if r != w.rank))
                           for j in range(STEPS + 1)), f"step {step} key {k}: not own sums plus a prefix"
        w.barrier()
        assert np.array_equal(g.pull(np.arange(ROWS)), total[STEPS]), "final rows differ from the total"

    node.run(train, threads=threads)
    st = node.stats()["tables"]["g"]
    assert st["aggregated_rounds"] == STEPS * 12, st  # a round per key per step, whatever the threads
    assert node.num_nodes == 1 or 0 < st["aggregated_messages"] <= STEPS * 12, st
    print(f"rounds ok node={node.rank} model={model} {node.catalog.get('g').aggregator!r}")


def sgd(node: pskv.Node, threads: int, model: str) -> None:
    """pskv.SGD on the owner: after each round the pulled weights equal a numpy reference (BSP)."""
    lr = 0.25
    node.table("w", rows=ROWS, dim=DIM, aggregate=pskv.NodeAggregate(), updater=pskv.SGD(lr=lr), init=pskv.Constant(1.0),
               consistency=MODELS[model]())
    sums = [_node_sums(r, threads) for r in range(node.num_nodes)]
    ref = np.ones((STEPS + 1, ROWS, DIM), np.float32)  # (STEPS + 1, ROWS, DIM) weights after each step
    for step in range(STEPS):
        grad = sum(s[step + 1] - s[step] for s in sums).astype(np.float32)
        ref[step + 1] = ref[step] - np.float32(lr) * grad

    def train(w: pskv.Worker) -> None:
        t = w.table("w")
        for step in range(STEPS):
            keys = _keys(step)
            t.push(keys, _grads(w.rank, w.thread, step))
            got = t.pull(keys, timeout=30)
            if model == "bsp":
                np.testing.assert_allclose(got, ref[step + 1, keys], rtol=1e-6, err_msg=f"step {step}")
        w.barrier()
        np.testing.assert_allclose(t.pull(np.arange(ROWS)), ref[STEPS], rtol=1e-5, atol=1e-5)

    node.run(train, threads=threads)
    if node.config.backups:  # our copy of the other range equals its head's rows, bit for bit
        copies = node.server.backups.copies.copies(node.catalog.get("w").spec.table_id)
        assert copies, "no backup copy here"
        for copy in copies:
            keys = np.arange(copy.start, copy.stop)
            assert np.array_equal(copy.read(keys)[0], node.worker().table("w").pull(keys)), "backup differs from head"
    print(f"sgd ok node={node.rank} model={model}")


def callbacks(node: pskv.Node, threads: int) -> None:
    """pull_async(callback=): runs once, after the values are written, before wait() returns."""
    node.table("c", rows=ROWS, dim=DIM, aggregate=pskv.NodeAggregate(), consistency=pskv.BSP())
    total = sum(_node_sums(r, threads) for r in range(node.num_nodes))

    def train(w: pskv.Worker) -> None:
        c = w.table("c")
        for step in range(STEPS):
            keys = _keys(step)
            c.push(keys, _grads(w.rank, w.thread, step))
            seen = []
            out = np.full((len(keys), DIM), np.nan, np.float32)
            fut = c.pull_async(keys, out=out, callback=lambda values: seen.append((values is out, values.copy())))
            result = fut.wait(30)
            assert len(seen) == 1, f"callback ran {len(seen)} times"
            assert seen[0][0] and np.array_equal(seen[0][1], total[step + 1, keys]), "callback saw other values"
            assert result is out and np.array_equal(out, total[step + 1, keys])
            assert len(seen) == 1

    node.run(train, threads=threads)
    print(f"callbacks ok node={node.rank}")


def misuse(node: pskv.Node, threads: int) -> None:
    """Two pushes of a key in one round, or a second outstanding pull, raise AggregationError; rounds go on."""
    node.table("e", rows=ROWS, dim=1, aggregate=pskv.NodeAggregate(), consistency=pskv.BSP())
    first_pull = threading.Barrier(threads)

    def train(w: pskv.Worker) -> None:
        e = w.table("e")

        def start_round() -> pskv.Future:
            e.push([1, 2], [[1.0], [1.0]])
            try:
                e.push([2, 5], [[1.0], [1.0]])
                raise AssertionError("a second push of key 2 in one round was accepted")
            except pskv.AggregationError:
                pass
            return e.pull_async([1, 2])

        if w.thread == 0:  # alone in the round: its pull stays outstanding until the others push
            fut = start_round()
            try:
                e.pull_async([2])
                raise AssertionError("a second outstanding pull of key 2 was accepted")
            except pskv.AggregationError:
                pass
        first_pull.wait(30)
        if w.thread != 0:
            fut = start_round()
        got = fut.wait(30)
        assert np.array_equal(got[:, 0], [threads * w.num_nodes] * 2), got  # the refused calls changed nothing
        assert e.pull([5])[0, 0] == 0.0  # key 5 was never pushed: a plain read

    node.run(train, threads=threads)
    print(f"misuse ok node={node.rank}")


def main() -> None:
    name, args = sys.argv[1], sys.argv[2:]
    node = pskv.init()
    globals()[name](node, node.config.threads, *args)
    node.shutdown()


if __name__ == "__main__":
    main()
