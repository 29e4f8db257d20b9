"""Server-side rules for L1/L2-regularised linear models (Li et al.'s sparse logistic regression):
proximal gradient, FTRL-proximal, and the block proximal step of delayed block proximal gradient.

Each applies the summed update of each distinct key once (duplicates are summed first, as every
non-linear rule here does), in a numba kernel with the GIL released. The objective they serve is
    loss(w) + l1 * |w|_1 + l2 / 2 * |w|^2.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ..errors import ConfigError, ShapeError
from .rules import Updater, dedupe_rows, positive, updater_name


def _non_negative(owner: object, name: str, value: float) -> float:
    if not value >= 0:  # also rejects nan
        raise ConfigError(f"{updater_name(owner)}({name}={value!r}): {name} must be >= 0")
    return float(value)


@numba.njit(nogil=True, cache=True, inline="always")
def _soft(v, t):  # pragma: no cover - compiled
    """sign(v) * max(|v| - t, 0): the proximal operator of t * |.|."""
    if v > t:
        return v - t
    if v < -t:
        return v + t
    return 0.0


@numba.njit(nogil=True, cache=True)
def _prox(data, rows, summed, lr, l1, l2):  # pragma: no cover - compiled
    dim = data.shape[1]
    shrink = 1.0 + lr * l2
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(dim):
            data[r, j] = _soft(data[r, j] - lr * summed[k, j], lr * l1) / shrink


@numba.njit(nogil=True, cache=True)
def _ftrl(data, state, rows, summed, alpha, beta, l1, l2):  # pragma: no cover - compiled
    """McMahan et al. 2013, per coordinate: state = (z, n) side by side, (dim) columns each."""
    dim = data.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(dim):
            g = summed[k, j]
            n = state[r, dim + j]
            sigma = (np.sqrt(n + g * g) - np.sqrt(n)) / alpha
            z = state[r, j] + g - sigma * data[r, j]
            n += g * g
            state[r, j] = z
            state[r, dim + j] = n
            if abs(z) <= l1:
                data[r, j] = 0.0
            else:
                data[r, j] = -(z - np.sign(z) * l1) / ((beta + np.sqrt(n)) / alpha + l2)


@numba.njit(nogil=True, cache=True)
def _block_prox(data, rows, summed, eta, l1, l2, eps):  # pragma: no cover - compiled
    """Row (w, d): with the pushed (g, h), d = g + l2 w, H = h + l2 + eps, w = soft(w - eta d / H, eta l1 / H)."""
    for k in range(rows.shape[0]):
        r = rows[k]
        w = data[r, 0]
        g, h = summed[k, 0], summed[k, 1]
        d = g + l2 * w
        big = h + l2 + eps
        data[r, 0] = _soft(w - eta * d / big, eta * l1 / big)
        data[r, 1] = d


class Prox(Updater):
    """Proximal gradient: w = soft(w - lr * g, lr * l1) / (1 + lr * l2), per distinct key.

    With the summed minibatch gradient of the mean loss as g, this is proximal SGD for
    loss + l1 |w|_1 + l2/2 |w|^2; only pushed keys are touched (a lazy L1 step)."""

    name = "prox"

    def __init__(self, lr: float = 0.1, l1: float = 0.0, l2: float = 0.0) -> None:
        self.lr = positive(self, "lr", lr)
        self.l1 = _non_negative(self, "l1", l1)
        self.l2 = _non_negative(self, "l2", l2)

    def _params(self) -> dict[str, Any]:
        return {"lr": self.lr, "l1": self.l1, "l2": self.l2}

    def _apply(self, data, state, idx, upd) -> None:
        rows, summed = dedupe_rows(data, idx, upd)
        _prox(data, rows, summed, self.lr, self.l1, self.l2)


class FTRL(Updater):
    """FTRL-proximal (McMahan et al., KDD 2013): per-coordinate learning rates alpha / (beta + sqrt(n));
    weights are exactly 0 while |z| <= l1. State: z and n per value. `l1`, `l2` weigh the sum of the
    pushed gradients (pushing mean minibatch gradients, l1 = lambda * batches per pass is the
    mean-loss lambda)."""

    name = "ftrl"

    def __init__(self, alpha: float = 0.1, beta: float = 1.0, l1: float = 0.0, l2: float = 0.0) -> None:
        self.alpha = positive(self, "alpha", alpha)
        self.beta = _non_negative(self, "beta", beta)
        self.l1 = _non_negative(self, "l1", l1)
        self.l2 = _non_negative(self, "l2", l2)

    def _params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "beta": self.beta, "l1": self.l1, "l2": self.l2}

    def state_width(self, dim: int) -> int:
        return 2 * dim

    def state_layout(self, dim: int) -> dict[str, tuple[int, int]]:
        return {"z": (0, dim), "n": (dim, 2 * dim)}

    def init_state(self, state: np.ndarray) -> None:
        state.fill(0.0)

    def _apply(self, data, state, idx, upd) -> None:
        rows, summed = dedupe_rows(data, idx, upd)
        _ftrl(data, state, rows, summed, self.alpha, self.beta, self.l1, self.l2)


class BlockProx(Updater):
    """The server step of delayed block proximal gradient (Li et al., OSDI 2014): a table of rows
    (w, d) takes pushes of (g, h), a block's summed gradient and diagonal curvature (bound), and sets
    w = soft(w - eta * d / H, eta * l1 / H) with d = g + l2 w and H = h + l2 + eps (a proximal
    Newton step per coordinate). d, the smooth part's gradient, stays beside w: the KKT filter reads
    it (w = 0 and |d| < l1 means the step left w at 0). Tables of dim 2 only."""

    name = "block_prox"

    def __init__(self, l1: float = 0.0, l2: float = 0.0, eta: float = 1.0, eps: float = 1e-12) -> None:
        self.l1 = _non_negative(self, "l1", l1)
        self.l2 = _non_negative(self, "l2", l2)
        self.eta = positive(self, "eta", eta)
        self.eps = _non_negative(self, "eps", eps)

    def _params(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2, "eta": self.eta, "eps": self.eps}

    def _apply(self, data, state, idx, upd) -> None:
        if data.shape[1] != 2:
            raise ShapeError(f"BlockProx needs a table of dim 2 (rows are (w, h)), not dim {data.shape[1]}")
        rows, summed = dedupe_rows(data, idx, upd)
        _block_prox(data, rows, summed, self.eta, self.l1, self.l2, self.eps)
