"""CPU torch tensors in and out of table calls: views on the same memory, no copies, and no
import of torch unless the caller passed a tensor (then it is loaded already).

A table call accepts a tensor wherever it takes an array (keys, values, `out=`); `to_numpy` gives
the numpy view that the data path uses, and a pull given tensors returns one (`from_numpy`: the
result's own memory). GPU tensors are refused with a DTypeError: pskv moves host memory only.
"""

from __future__ import annotations

import sys

import numpy as np

from .errors import DTypeError


def is_tensor(x) -> bool:
    """x is a torch.Tensor (or a subclass: nn.Parameter), told without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "device") and hasattr(x, "detach")


def to_numpy(x, what: str) -> np.ndarray:
    """The numpy view of CPU tensor `x` (no copy; autograd's graph is not touched). Raises
    DTypeError for a tensor on another device or of a dtype numpy lacks (bfloat16)."""
    if x.device.type != "cpu":
        raise DTypeError(
            f"{what} is a tensor on {x.device}; pskv tables take CPU tensors only (GPU tensors are "
            "not supported): pass t.cpu() and copy the result back to the device"
        )
    try:
        return x.detach().numpy()
    except (TypeError, RuntimeError) as exc:
        raise DTypeError(
            f"{what} is a {x.dtype} tensor that numpy cannot view ({exc}); convert it, e.g. t.float()"
        ) from None


def from_numpy(arr: np.ndarray):
    """A tensor on `arr`'s memory (torch is loaded: the caller passed a tensor)."""
    return sys.modules["torch"].from_numpy(arr)
