"""Embedding: an nn.Module over a pskv table; the table's updater (on the servers) is its optimizer.

forward(ids) pulls the rows of the batch's distinct ids (or takes those `prefetch(ids)` started
pulling) and returns them gathered to ids' shape + (dim,). backward sums the gradient of each
distinct id and pushes it to the table, where pskv.SGD / Adagrad / Adam apply it; no optimizer
of the worker sees these rows, and the table is never whole in one worker. Pushes leave
asynchronously; at most `max_in_flight` are outstanding (the oldest is waited for first), and
`wait()` sends what a BSP/SSP table buffers and waits for all of them (call it before a
checkpoint; `worker.clock()` needs no wait: it sends the buffered pushes itself).

Threads and ownership: one Embedding per worker thread (it holds that thread's table handle).
"""

from __future__ import annotations

import collections

import numpy as np
import torch

from ..errors import ShapeError
from ..net.future import Future


class _Lookup(torch.autograd.Function):
    """rows[inverse]; backward pushes the summed gradient of each distinct row to the table."""

    @staticmethod
    def forward(ctx, anchor, rows, inverse, owner, keys):  # (torch's signature: ctx, not self)
        ctx.owner, ctx.keys, ctx.n = owner, keys, rows.shape[0]
        ctx.save_for_backward(inverse)
        return rows[inverse]

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        dim = grad.shape[-1]
        summed = torch.zeros(ctx.n, dim, dtype=grad.dtype)
        summed.index_add_(0, inverse.reshape(-1), grad.reshape(-1, dim))
        ctx.owner._push(ctx.keys, summed)
        return None, None, None, None, None


class Embedding(torch.nn.Module):
    """Rows of `table` (a worker's pskv Table) looked up by integer ids; see the module docstring."""

    def __init__(self, table, *, max_in_flight: int = 8) -> None:
        super().__init__()
        self.table = table
        self.num_embeddings, self.embedding_dim = table.rows, table.dim
        self._anchor = torch.zeros(0, requires_grad=True)  # makes autograd call _Lookup.backward
        self._pushes: collections.deque[Future] = collections.deque()
        self._max = max_in_flight
        self._next: tuple[torch.Tensor, np.ndarray, np.ndarray, Future] | None = None  # from prefetch():
        # (ids, keys, inverse, Future of the rows)
        self.pushed_rows = 0

    def prefetch(self, ids: torch.Tensor) -> None:
        """Start pulling the rows of the next batch's ids; forward(ids) with equal ids uses them."""
        keys, inverse = self._distinct(ids)
        self._next = (ids, keys, inverse, self.table.pull_async(keys))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ready, self._next = self._next, None
        if ready is not None and ready[0].shape == ids.shape and torch.equal(ready[0], ids):
            _, keys, inverse, fut = ready
            rows = fut.wait()
        else:
            keys, inverse = self._distinct(ids)
            rows = self.table.pull(keys)
        return _Lookup.apply(self._anchor, rows, inverse.reshape(ids.shape), self, keys)

    def sample(self, handle, k: int):
        """(ids, rows): the next k keys of a pskv sampling handle (`table.prepare_sample(n)`, NuPS's
        schemes) and their rows, (k, dim); the rows' gradient is pushed in backward as forward's is."""
        keys, rows = self.table.pull_sample(handle, k)
        keys, rows = torch.from_numpy(np.asarray(keys)), torch.from_numpy(np.asarray(rows))
        return keys, _Lookup.apply(self._anchor, rows, torch.arange(len(keys)), self, keys)  # pushes sum dups

    def wait(self, timeout: float | None = None) -> None:
        """Wait until every push of a gradient so far is acknowledged."""
        self.table.flush()  # a BSP/SSP table buffers pushes until clock(): send them now
        while self._pushes:
            self._pushes.popleft().wait(timeout)

    def _distinct(self, ids: torch.Tensor):
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            raise ShapeError(
                f"Embedding over table {self.table.name!r}: ids must be an int64 or int32 tensor, "
                f"got {getattr(ids, 'dtype', type(ids).__name__)}"
            )
        keys, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        return keys, inverse

    def _push(self, keys: torch.Tensor, grads: torch.Tensor) -> None:
        if len(self._pushes) >= self._max:
            self.table.flush()
        while len(self._pushes) >= self._max:
            self._pushes.popleft().wait()
        self._pushes.append(self.table.push(keys, grads, copy=False))  # grads: a fresh tensor, ours alone
        self.pushed_rows += len(keys)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, table={self.table.name!r}"
