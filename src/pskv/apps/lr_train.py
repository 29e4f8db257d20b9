"""lr's training algorithms on the weight tables (apps/lr.py: the app, its flags, data and reports).

`Sgd`: prox / ftrl, minibatches, one push_pull per batch. `Dbpg`: delayed block proximal gradient,
one feature block per round, ordered by worker clocks (lr.py's module docstring says how). Both
keep this worker's copy of its features' weights and answer `weights_of` for the evaluation.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

import pskv

from .. import filters as pskv_filters
from ..data.sparse import SparseData
from . import common
from .lr_model import KeySpace, Local, add_margins, batch_gradient, block_gradient, loss_sum

W, G = "lr-w", "lr-grad"  # the weight table, and dbpg's table of summed (gradient, curvature bound)


@dataclasses.dataclass
class State:
    s: common.Session
    train: SparseData
    test: SparseData
    rows: int  # training examples in all
    space: KeySpace  # the weight tables' keys (lr_model.Dense or Hashed)
    names: dict | None = None  # key -> feature name (census)
    evaluation: tuple = (0, 0)  # bytes and messages this node sent for test evaluation and metrics (thread 0)


class Sgd:
    """prox / ftrl: minibatches, one push_pull per batch; the batch's fresh weights come back in it."""

    def __init__(self, w: pskv.Worker, st: State, local: Local) -> None:
        self.w, self.st, self.local = w, st, local
        self.table = w.table(W)
        self.ids = st.space.ids(local.keys)[0]  # (m,) the table keys of local.keys (every one has one)
        self.weights = self.table.pull(self.ids)[:, 0].astype(np.float64)  # (m,) this worker's copy
        m = len(local.keys)
        self.g, self.mark, self.touched = np.zeros(m), np.zeros(m, np.int64), np.empty(m, np.int64)
        self.stamp = 0
        self.rng = np.random.default_rng([st.s.args.seed, st.s.index(w)])
        kkt_exact = st.s.args.algo == "prox"  # (for ftrl a skipped gradient changes z: the filter is off)
        self.chain = pskv_filters.Chain(st.s.args.filters, l1=st.s.args.l1 if kkt_exact else 0.0)

    def epoch(self, epoch: int, progress) -> float:
        loc, batch = self.local, self.st.s.args.batch
        order = self.rng.permutation(loc.rows)
        total, pending = 0.0, None
        for start in range(0, loc.rows, batch):
            rows = order[start : start + batch]
            self.stamp += 1
            n, loss = batch_gradient(
                rows,
                loc.indptr,
                loc.col,
                loc.values,
                loc.has_values,
                loc.labels,
                self.weights,
                loc.bias,
                self.g,
                self.mark,
                self.stamp,
                self.touched,
            )
            total += loss
            cols = self.touched[:n].copy()
            grads = self.g[cols] / len(rows)
            self.g[cols] = 0.0
            cols, grads = self.chain.select(loc.keys, cols, grads, self.weights)
            if pending is not None:
                self._land(*pending)
            if len(cols):
                pending = (
                    cols,
                    self.table.push_pull(self.ids[cols], grads[:, None].astype(np.float32), filters=self.chain.wire),
                )
            else:
                pending = None
            progress.update(len(rows))
        if pending is not None:
            self._land(*pending)
        return total

    def _land(self, cols: np.ndarray, fut) -> None:
        self.weights[cols] = fut.wait()[:, 0]

    def weights_of(self, keys: np.ndarray) -> np.ndarray:
        return weights(self.st.space, self.table, keys)


def weights(space: KeySpace, table: pskv.Table, keys: np.ndarray) -> np.ndarray:
    """The weights of feature keys `keys` (0 for those that have no row: not in the training data)."""
    ids, found = space.ids(keys)
    if found is None:
        return table.pull(ids)[:, 0]
    out = np.zeros(len(keys), table.dtype)
    out[found] = table.pull(ids[found])[:, 0]
    return out


class Dbpg:
    """Delayed block proximal gradient: per round one block, two worker clocks (see the module doc)."""

    def __init__(self, w: pskv.Worker, st: State, local: Local) -> None:
        self.w, self.st, self.local = w, st, local
        args = st.s.args
        self.blocks, self.delay = args.blocks, args.delay
        self.block_of = local.block_of(self.blocks)
        self.cols = [np.flatnonzero(self.block_of == b) for b in range(self.blocks)]
        self.parts = local.split(self.block_of, self.blocks)  # each block's nonzeros alone
        self.table, self.grad_t = w.table(W), w.table(G)
        self.ids = st.space.ids(local.keys)[0]  # (m,) the table keys of local.keys
        node = st.s.node
        lo, hi = st.space.local(self.grad_t, node.rank, node.num_nodes)  # the server steps' keys per block
        self.steps = [(max(lo, a), min(hi, z)) for a, z in (st.space.block(self.blocks, b) for b in range(self.blocks))]
        m = len(local.keys)
        self.g, self.h, self.delta = np.zeros(m), np.zeros(m), np.zeros(m)  # (zero again after each round's block)
        self.weights = np.zeros(len(local.keys))  # (m,) this worker's copy of its features' weights
        self.last_d = np.full(len(local.keys), np.inf)  # the server's last gradient per feature (KKT filter)
        self.m = np.zeros(local.rows)  # margins of the weights, all 0 at first
        self.round = 0
        self.pending: deque = deque()  # rounds whose weights are not pulled yet: (round, block)
        self.chain = pskv_filters.Chain(args.filters, l1=args.l1)
        self.scale = 1.0 / st.rows

    def epoch(self, epoch: int, progress) -> float:
        loc = self.local
        for b in range(self.blocks):
            t = self.round
            while self.pending and self.pending[0][0] < t - self.delay:
                self._land(*self.pending.popleft())
            g, h, block = self.g, self.h, self.cols[b]
            indptr, col, values = self.parts[b]
            block_gradient(
                indptr,
                col,
                values,
                loc.has_values,
                loc.labels,
                self.m,
                loc.bias,
                self.block_of[loc.bias] == b,
                g,
                h,
                self.scale,
            )  # (into block b's columns only)
            refresh = epoch % 5 == 1  # the first pass, and every 5th, sends every gradient (fresh KKT data)
            cols, gb = self.chain.select(loc.keys, block, g[block], self.weights, self.last_d, kkt=not refresh)
            gh = np.empty((len(cols), 2), np.float32)
            gh[:, 0], gh[:, 1] = gb, h[cols]
            g[block], h[block] = 0.0, 0.0
            push = self.grad_t.push(self.ids[cols], gh, filters=self.chain.wire)
            push.wait()  # (applied before the clock: a clock waits for a sparse table's pushes, not for an
            # asynchronous dense one's; a co-located owner's rows, in shared memory, are added to in the call)
            self.w.clock()
            self.w.wait_clock(2 * t + 1)  # every worker's sums of round t are in
            if self.w.thread == 0:
                self._server_step(b)
            self.w.clock()
            self.pending.append((t, b, cols))  # (a key filtered out here is filtered on every worker: same
            # weights and server gradients; its weight stays 0, so only the keys sent are pulled)
            self.round += 1
            progress.update(loc.rows // self.blocks + (b < loc.rows % self.blocks))
        while self.pending:
            self._land(*self.pending.popleft())
        return float(loss_sum(self.m, loc.labels))

    def _server_step(self, b: int) -> None:
        """This node's keys of block b: the summed (g, h) become a BlockProx step, then start again at 0."""
        lo, hi = self.steps[b]
        if lo >= hi:
            return
        keys, gh = self.grad_t.pull_range(lo, hi)
        if len(keys):
            self.table.push(keys, gh).wait()
            self.grad_t.set(keys, np.zeros_like(gh)).wait()

    def _land(self, t: int, b: int, cols: np.ndarray) -> None:
        """Round t's new weights of the columns it pushed: pulled, and the margins moved by the change."""
        self.w.wait_clock(2 * t + 2)
        if not len(cols):
            return
        rows = self.table.pull(self.ids[cols], filters=self.chain.wire)
        change = rows[:, 0] - self.weights[cols]
        self.weights[cols] = rows[:, 0]
        self.last_d[cols] = rows[:, 1]
        if change.any():
            self.delta[cols] = change  # (zero elsewhere: add_margins reads block b's columns only)
            indptr, col, values = self.parts[b]
            add_margins(indptr, col, values, self.local.has_values, self.delta, self.local.bias, self.m)
            self.delta[cols] = 0.0

    def weights_of(self, keys: np.ndarray) -> np.ndarray:
        return weights(self.st.space, self.table, keys)
