"""A model's trainable parameters as key ranges of one table's rows, for DataParallel (torch.parallel):
the layout (each tensor's rows), the buffers' rows, the gradient buckets, the modes; and
`load_weights`, a DataParallel table's rows back into a model without a cluster.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from ..errors import ConfigError, DTypeError, PskvError, ShapeError
from ..options import BSP, NodeAggregate, as_consistency

ROW = 256  # floats per row: few keys per layer, little padding
BUCKET = 4 << 20  # bytes of gradients per push: few messages, some overlap with backprop in big models
BUFFER_ROW = 64  # buffer values per row of the buffers table (+ 1 column: the step they are of)


def layout(model: torch.nn.Module, row: int):
    """(params, [(first row, end row)], rows, name suffix): the key range of every trainable tensor."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ConfigError(f"DataParallel: {type(model).__name__} has no trainable parameters")
    for p in params:
        if p.device.type != "cpu":
            raise DTypeError(
                f"DataParallel: a parameter of shape {tuple(p.shape)} is on {p.device}; pskv trains CPU "
                "models only (GPU tensors are not supported): call model.cpu() first"
            )
        if p.dtype != torch.float32:
            raise DTypeError(
                f"DataParallel: a parameter of shape {tuple(p.shape)} is {p.dtype}; pskv.torch trains "
                "float32 parameters: call model.float() first"
            )
    ranges, first = [], 0
    for p in params:
        n = math.ceil(p.numel() / row)
        ranges.append((first, first + n))
        first += n
    shapes = repr([tuple(p.shape) for p in params]).encode()
    return params, ranges, first, hashlib.sha1(shapes).hexdigest()[:8]


def buffers(model: torch.nn.Module) -> tuple[list[torch.Tensor], int, str]:
    """(the model's buffers, rows of the buffers table, name suffix): their values packed in order,
    BUFFER_ROW per row. No buffers: ([], 0, "")."""
    named = list(model.named_buffers())
    for name, b in named:
        if b.device.type != "cpu":
            raise DTypeError(
                f"DataParallel: buffer {name!r} is on {b.device}; pskv trains CPU models only: call model.cpu() first"
            )
    total = sum(b.numel() for _, b in named)
    if not total:
        return [], 0, ""
    layout = repr([(name, tuple(b.shape), str(b.dtype)) for name, b in named]).encode()
    return [b for _, b in named], math.ceil(total / BUFFER_ROW), hashlib.sha1(layout).hexdigest()[:8]


def buckets(params, ranges, row: int, limit: int) -> list[tuple[list[int], int, int]]:
    """Parameters in backward order (the last first) grouped into runs of about `limit` bytes: each
    bucket is pushed as one message (per owner) once all its gradients are ready (as DDP's buckets)."""
    out: list[tuple[list[int], int, int]] = []
    members: list[int] = []
    for i in reversed(range(len(params))):
        members.append(i)
        a, b = ranges[i][0], ranges[members[0]][1]
        if (b - a) * row * 4 >= limit or i == 0:
            out.append((members, a, b))
            members = []
    return out


def mode_of(mode):
    """(consistency, aggregate, clocked) of a mode: "sync", "async", "ssp:S", or a pskv consistency."""
    if mode == "sync":
        return BSP(), NodeAggregate(), False
    try:
        consistency = as_consistency(mode)
    except PskvError:
        consistency = None
    if consistency is None or consistency.staleness == 0:
        raise ConfigError(
            f"DataParallel mode={mode!r}: use 'sync' (aggregated BSP rounds), 'async', or pskv.SSP(s) "
            "/ 'ssp:S' with S >= 1"
        ) from None
    return consistency, None, consistency.synchronous


def load_weights(model: torch.nn.Module, rows: np.ndarray, row: int = ROW) -> None:
    """Copy a DataParallel table's rows (a checkpoint's `.values`, (rows, row)) into `model`'s
    trainable parameters, in place: for an evaluator, without a cluster. Raises ShapeError if the
    rows do not fit the model's layout."""
    params, ranges, total, _ = layout(model, row)
    if rows.shape != (total, row):
        raise ShapeError(
            f"load_weights: rows of shape {rows.shape} do not fit {type(model).__name__}, whose "
            f"parameters take ({total}, {row}); is it the model the run trained?"
        )
    flat = np.ascontiguousarray(rows, np.float32).reshape(-1)
    with torch.no_grad():
        for p, (a, _) in zip(params, ranges, strict=True):
            p.copy_(torch.from_numpy(flat[a * row : a * row + p.numel()]).view_as(p))
