"""DataParallel: a torch.nn.Module trained data-parallel through one pskv table (mshadow-ps style).

Layout (torch/layout.py). Every trainable parameter tensor is a key range of one table of `row`-wide
rows (its numel rounded up to whole rows). The parameters' data and gradients become views into two flat
buffers shaped like those rows, so a layer's rows go out and come in without a copy: a push
sends the gradient's memory, a pull writes straight into the parameter's memory.

A step:
  1. backward: parameters are grouped in buckets of about `bucket_bytes` in backward order (as
     DDP's); once a bucket's last gradient is accumulated (post-accumulate-grad hooks), its rows
     are scaled by 1 / workers and pushed in one request, while backprop goes on below;
  2. `step()`: pushes the buckets still open (zeros for parameters that got no gradient: rounds
     stay aligned), then pulls every row in one request straight into the parameters, and zeroes
     the gradients. One push and one pull per step for a model under `bucket_bytes` (LeNet-5:
     62k floats): measured on one message per tensor, per-message costs dominated.

Modes: "sync": a table with pskv.NodeAggregate() under BSP: each round sums the node's workers'
gradients, then the nodes' sums, and the servers' updater runs once (mshadow-ps; the weights
follow single-process SGD on the global batch up to float rounding); a pull completes when the
round is applied. "async": every push is applied when it arrives; pulls read the newest rows.
pskv.SSP(s) (or "ssp:S"): as async, but `step()` ends the worker's clock, and its pulls wait
until no worker is more than s clocks behind. The servers run `updater` (pskv.SGD with momentum,
nesterov, weight_decay; pskv.Adam ...); `lr` means what it means for one process on the global
batch, because gradients are averaged over the workers.

Buffers (BatchNorm's running statistics, any `model.buffers()`): as DDP's broadcast_buffers=True,
every worker gets the first worker's buffers at every step (`step()`, after the weights; and at
the start), so after a step they are equal on every worker: in "sync" mode exactly (a worker
waits until the first worker's buffers of this step are there), in "async"/SSP the newest that
are. They travel through a third table, `NAME/DIGEST/buffers`, float64 rows (exact for float32
and for integer counters below 2^53), each row's last column the step it was written at.
`broadcast_buffers=False` keeps every worker's own buffers (they then differ between workers).

`backward()` twice without `step()` warns (UserWarning): each bucket is pushed once per step, at
the first backward that completes it, so the later gradients are not pushed.

Threads and ownership: one DataParallel per worker thread; it owns that thread's Worker handle
and the two flat buffers. `DataParallel(model, node)` declares the tables (a collective: every
node calls it) and makes a worker of its own, which takes part in the node's barriers: call
`dp.barrier()`, or any barrier of another worker from the thread that made the DataParallel
(e.g. `node.worker().barrier()`), which counts the DataParallel's worker as arrived (that thread
cannot be in two barriers at once: membership.barrier). With threads, call
`DataParallel.declare(node, model, ...)` once per node, then `DataParallel(model, worker, ...)`
in each thread of node.run().
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import ConfigError, UnknownTable, WaitTimeout
from ..node import Node
from ..options import Async
from ..updaters import SGD, Updater
from .layout import BUCKET, BUFFER_ROW, ROW, buckets, buffers, layout, mode_of

if TYPE_CHECKING:
    from ..client.table import Table

_BUFFER_WAIT = 600.0  # seconds a worker waits for the first worker's buffers of a step (sync), by default


class DataParallel(torch.nn.Module):
    """Train `model` data-parallel through pskv; see the module docstring. `where`: the Node (one
    worker per node) or this thread's Worker (after `declare`)."""

    def __init__(
        self,
        model: torch.nn.Module,
        where,
        *,
        mode="sync",
        updater: Updater | None = None,
        name: str = "model",
        row: int = ROW,
        bucket_bytes: int = BUCKET,
        torch_threads: int | None = 1,
        broadcast_buffers: bool = True,
    ) -> None:
        super().__init__()
        if torch_threads is not None:  # one compute thread per worker process: two per process on a loaded
            torch.set_num_threads(torch_threads)  # 2-core machine were measured 10-20x slower per epoch
        self.module = model
        self.mode = mode
        params, ranges, rows, digest = layout(model, row)
        self._params, self._ranges = params, ranges
        self.row = row  # floats per table row (a checkpoint's rows reshape to the parameters with it)
        self._clocked = mode_of(mode)[2]
        self._tname = f"{name}/{digest}"
        self._own_worker = isinstance(where, Node)
        if self._own_worker:
            DataParallel.declare(where, model, mode=mode, updater=updater, name=name, row=row)
            where = where.worker()
        self.worker = where
        try:
            self.table = where.table(self._tname)
            counter = where.table(self._tname + "/workers")
        except UnknownTable:
            raise ConfigError(
                f"DataParallel over worker {where!r}: table {self._tname!r} is not declared; call "
                "DataParallel.declare(node, model, ...) in the node's main thread first, with the "
                "same model layout on every node"
            ) from None
        self._flat_buffers(rows)
        self._buckets = buckets(params, ranges, row, bucket_bytes)  # [(param indices, first row, end row)]
        self._bucket_of = {i: k for k, (members, _, _) in enumerate(self._buckets) for i in members}
        self._all = np.arange(rows, dtype=np.int64)
        self._waiting = [len(members) for members, _, _ in self._buckets]  # params of each bucket not ready yet
        self._scale = 1.0
        self._fired = [0] * len(params)  # per parameter: backward passes that reached it since the last step
        self._warned = False  # this step's backward-twice warning was given
        self._sync = mode == "sync"
        self._btable: Table | None = None  # the buffers table (None: no buffers, or broadcast_buffers=False)
        self._buffer_list, brows, bdigest = buffers(model)
        if broadcast_buffers and brows:
            self._buffers_table(model, brows, bdigest)
        self._steps = 0
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(params)]
        self._start(counter)
        if self._own_worker:  # only this thread uses it: its barriers stand for it (membership.barrier)
            self.worker.bind_thread()

    def _flat_buffers(self, rows: int) -> None:
        """The flat buffers of weights and gradients: the parameters' data and grads become views into them."""
        row = self.row
        self._w = torch.zeros(rows * row)  # (rows * row,) float32
        self._g = torch.zeros(rows * row)
        for p, (a, _) in zip(self._params, self._ranges, strict=True):
            view = self._w[a * row : a * row + p.numel()].view_as(p)
            view.copy_(p.data)
            p.data = view
            p.grad = self._g[a * row : a * row + p.numel()].view_as(p)

    def _buffers_table(self, model: torch.nn.Module, brows: int, bdigest: str) -> None:
        """The table the first worker's buffers travel through, and the staging rows for them."""
        try:
            self._btable = self.worker.table(f"{self._tname}/buffers/{bdigest}")
        except UnknownTable:
            raise ConfigError(
                f"DataParallel over worker {self.worker!r}: the buffers table of {type(model).__name__} "
                "is not declared; declare with DataParallel.declare(node, model, ...) for this "
                "model (same buffers on every node)"
            ) from None
        self._bkeys = np.arange(brows, dtype=np.int64)
        self._bflat = np.zeros((brows, BUFFER_ROW + 1))  # (brows, BUFFER_ROW + 1) float64, staging

    @staticmethod
    def declare(
        node: Node,
        model: torch.nn.Module,
        *,
        mode="sync",
        updater: Updater | None = None,
        name: str = "model",
        row: int = ROW,
    ) -> None:
        """Declare the tables of `model` on `node` (a collective: every node, same model layout)."""
        _, _, rows, digest = layout(model, row)
        consistency, aggregate, _ = mode_of(mode)
        tname = f"{name}/{digest}"
        node.table(tname, rows, row, updater=updater or SGD(lr=0.01), consistency=consistency, aggregate=aggregate)
        node.table(tname + "/workers", 1, 1)
        _, brows, bdigest = buffers(model)
        if brows:  # declared either way: broadcast_buffers is each DataParallel's own choice
            node.table(f"{tname}/buffers/{bdigest}", brows, BUFFER_ROW + 1, "float64", consistency=Async())

    def _start(self, counter) -> None:
        """Count the workers (every one pushes a 1) and give every one the first worker's weights."""
        w = self.worker
        counter.push([0], np.ones((1, 1), np.float32)).wait()
        w.barrier()
        workers = int(counter.pull([0])[0, 0])
        self._scale = 1.0 / workers
        self.workers = workers
        first = self._first = self._publish()
        if first and self._btable is not None:
            self._send_buffers().wait()
        w.barrier()
        if not first:
            self.table.pull(self._all, out=self._rows(self._w, 0, len(self._all)))
            if self._btable is not None:
                self._take_buffers(0, None)
        w.barrier()

    def _publish(self) -> bool:
        """On the first worker (lowest live node, thread 0): set the table's rows to this model's
        weights; returns whether this is that worker."""
        w = self.worker
        if w.rank != min(w.members) or w.thread > 0:
            return False
        self.table.set(self._all, self._rows(self._w, 0, len(self._all))).wait()
        return True

    def _send_buffers(self):
        """The first worker: its buffers, stamped with this step, into the buffers table (a Future)."""
        flat, at = self._bflat, 0
        values = flat[:, :BUFFER_ROW].reshape(-1)  # (brows * BUFFER_ROW,) float64 view
        for b in self._buffer_list:
            values[at : at + b.numel()] = b.detach().reshape(-1).to(torch.float64).numpy()
            at += b.numel()
        flat[:, BUFFER_ROW] = self._steps
        assert self._btable is not None  # (the caller checks)
        return self._btable.set(self._bkeys, flat)

    def _take_buffers(self, step: int | None, timeout: float | None) -> None:
        """Another worker: the first worker's buffers into the model's; with `step`, wait until every
        row holds that step's (or a later one's) values."""
        deadline = time.monotonic() + (timeout or _BUFFER_WAIT)
        pause = 0.0005
        assert self._btable is not None  # (the caller checks)
        while True:
            rows = self._btable.pull(self._bkeys, timeout=timeout)  # (brows, BUFFER_ROW + 1) float64
            if step is None or rows[:, BUFFER_ROW].min() >= step:
                break
            if time.monotonic() > deadline:
                raise WaitTimeout(
                    f"DataParallel step {step}: the first worker's buffers of this step did not come "
                    f"within {timeout or _BUFFER_WAIT:g} s (rows hold step "
                    f"{rows[:, BUFFER_ROW].min():g}); is the first worker still running?"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        values, at = rows[:, :BUFFER_ROW].reshape(-1), 0
        with torch.no_grad():
            for b in self._buffer_list:
                b.copy_(torch.from_numpy(values[at : at + b.numel()]).view_as(b))
                at += b.numel()

    def barrier(self, timeout: float | None = None) -> None:
        """This DataParallel's worker's barrier (`worker.barrier()`): blocks until every open worker
        of every node arrived. With `DataParallel(model, node)`, a barrier of another worker that
        the same thread enters (`node.worker().barrier()`) works too: it stands for this one."""
        self.worker.barrier(timeout)

    def _rows(self, flat: torch.Tensor, a: int, b: int) -> np.ndarray:
        """Rows a..b of a flat buffer as a (b - a, row) numpy view."""
        return flat[a * self.row : b * self.row].numpy().reshape(b - a, self.row)

    def _hook(self, i: int):
        p, a = self._params[i], self._ranges[i][0]

        def ready(param: torch.Tensor) -> None:
            self._fired[i] += 1
            if self._fired[i] == 2 and not self._warned:
                self._warned = True
                warnings.warn(
                    "DataParallel: backward() ran again before dp.step(); each bucket of gradients is "
                    "pushed once per step, when the first backward() completes it, so this backward()'s "
                    "gradients are not pushed (and may mix into a push still in flight): call dp.step() "
                    "after every backward(), or sum the losses of several batches before one backward()",
                    UserWarning,
                    stacklevel=2,
                )
            view = self._g[a * self.row : a * self.row + p.numel()]
            if param.grad is None or param.grad.data_ptr() != view.data_ptr():  # zero_grad(set_to_none) ran
                if param.grad is not None:
                    view.copy_(param.grad.reshape(-1))
                else:
                    view.zero_()
                param.grad = view.view_as(param)
            k = self._bucket_of[i]
            self._waiting[k] -= 1
            if self._waiting[k] == 0:  # the bucket's last gradient: its rows leave while backprop goes on
                self._push(k)

        return ready

    def _push(self, k: int) -> None:
        _, a, b = self._buckets[k]
        rows = self._g[a * self.row : b * self.row]
        rows.mul_(self._scale)  # the mean over every worker's batch
        self.table.push(self._all[a:b], rows.numpy().reshape(b - a, self.row), copy=False)
        self._waiting[k] = -1

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def step(self, timeout: float | None = None) -> None:
        """Complete this step's pushes, bring the fresh weights into the model's parameters (the
        first layers first) and zero the gradients."""
        for k, waiting in enumerate(self._waiting):
            if waiting >= 0:  # some parameter got no gradient: zeros for it keep the rounds aligned
                self._push(k)
        if self._clocked:
            self.worker.wait_all(timeout)
            self.worker.clock()
        # async: the pull follows this thread's pushes on each owner's connection, so it sees them
        # without waiting for their acknowledgements first (one round trip per step, not two)
        self.table.pull(self._all, out=self._rows(self._w, 0, len(self._all)), timeout=timeout)
        self.worker.wait_all(timeout)  # (sync: the pushes completed at once; the pull waited for the round)
        self._g.zero_()
        self._waiting = [len(members) for members, _, _ in self._buckets]
        self._fired = [0] * len(self._params)
        self._warned = False
        self._steps += 1
        if self._btable is not None:  # after the round: the first worker's next set comes after our read
            if self._first:
                self._send_buffers()
            else:
                self._take_buffers(self._steps if self._sync else None, timeout)

    def state_dict(self, *args, **kwargs):
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load into the model and, from the first worker, into the table (before training starts)."""
        result = self.module.load_state_dict(state_dict, strict=strict, assign=assign)
        self._publish()
        return result

    def close(self) -> None:
        """Remove the hooks (the parameters stay views of the weights buffer) and close an own worker."""
        for h in self._hooks:
            h.remove()
        if self._own_worker:
            self.worker.close()
