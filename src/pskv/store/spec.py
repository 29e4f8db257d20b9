"""What a table is, without I/O: `TableSpec`, initialisers, and the checks of the public API's input.

A table is `rows x dim` values with one updater. Keys are int64 row ids in [0, rows); which node
holds which keys is placement's business (`pskv.placement`). A sparse table (`key_space="uint64"`)
has no row count: its keys are any uint64 ids (hashed features), and inside pskv they travel as
the int64 with the same bits (store.sparse).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import TYPE_CHECKING

import numpy as np

from .. import kernels
from ..errors import ConfigError, ConfigTypeError, DTypeError, KeyOutOfRange, ShapeError, TableError
from ..tensors import is_tensor, to_numpy

if TYPE_CHECKING:
    from ..updaters import Updater


# ---- initialisers ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Init:
    """How a table's rows start. A row's value depends only on (seed, table, row)."""

    def fill(self, out: np.ndarray, first_row: int, table: str) -> None:
        kind, a, b, seed = self._params()
        seed = (seed * 0x9E3779B1 + zlib.crc32(table.encode())) % (1 << 63)
        kernels.init_rows(out, first_row, seed, kind, float(a), float(b))

    def config(self) -> dict:
        return {"init": type(self).__name__, **dataclasses.asdict(self)}

    def _params(self) -> tuple[int, float, float, int]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Zeros(Init):
    def _params(self):
        return 0, 0.0, 0.0, 0


@dataclasses.dataclass(frozen=True)
class Constant(Init):
    value: float = 0.0

    def _params(self):
        return 0, self.value, 0.0, 0


@dataclasses.dataclass(frozen=True)
class Normal(Init):
    std: float = 1.0
    seed: int = 0
    mean: float = 0.0

    def _params(self):
        if self.std < 0:
            raise ConfigError(f"Normal(std={self.std}): std must be >= 0")
        return 1, self.mean, self.std, self.seed


@dataclasses.dataclass(frozen=True)
class Uniform(Init):
    low: float = 0.0
    high: float = 1.0
    seed: int = 0

    def _params(self):
        if not self.high >= self.low:
            raise ConfigError(f"Uniform(low={self.low}, high={self.high}): need low <= high")
        return 2, self.low, self.high, self.seed


def as_init(init) -> Init:
    if isinstance(init, Init):
        return init
    if isinstance(init, (int, float)) and not isinstance(init, bool):
        return Zeros() if init == 0 else Constant(float(init))
    raise ConfigTypeError(
        f"init={init!r}: use a number, pskv.Zeros(), pskv.Constant(c), pskv.Normal(std, seed) "
        "or pskv.Uniform(low, high, seed)"
    )


# ---- spec --------------------------------------------------------------------------------------
KEY_SPACES = ("dense", "uint64")
SPARSE_ROWS = 1 << 64  # the `rows` of a sparse table: its key space
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True)
class TableSpec:
    name: str
    rows: int
    dim: int
    dtype: np.dtype
    updater: Updater
    init: Init
    table_id: int = 0
    key_space: str = "dense"  # "dense": rows [0, rows); "uint64": any uint64 id, rows == SPARSE_ROWS

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TableError(f"table name {self.name!r} must be a non-empty string")
        if self.key_space not in KEY_SPACES:
            raise ConfigError(
                f"table {self.name!r}: key_space={self.key_space!r}; use 'dense' (rows 0..rows-1) "
                "or 'uint64' (any uint64 id, rows=None)"
            )
        if self.sparse and self.rows != SPARSE_ROWS:
            raise ShapeError(f"table {self.name!r}: a key_space='uint64' table has no row count; pass rows=None")
        if int(self.rows) < 1 or int(self.dim) < 1:
            raise ShapeError(f"table {self.name!r}: rows={self.rows}, dim={self.dim}; both must be >= 1")
        if np.dtype(self.dtype) not in _DTYPES:
            raise DTypeError(f"table {self.name!r}: dtype {self.dtype} is not supported; use float32 or float64")

    @property
    def sparse(self) -> bool:
        return self.key_space == "uint64"

    def config(self) -> dict:
        """What must agree on every node (compared by the coordinator)."""
        out = {
            "name": self.name,
            "rows": None if self.sparse else int(self.rows),
            "dim": int(self.dim),
            "dtype": str(np.dtype(self.dtype)),
            "updater": self.updater.config(),
            "init": self.init.config(),
        }
        if self.sparse:
            out["key_space"] = self.key_space
        return out

    def describe(self) -> str:
        rows = "uint64 keys" if self.sparse else self.rows
        return f"({rows}, {self.dim}) {np.dtype(self.dtype)} updater={self.updater!r}"


# ---- input checks (the public API calls these before anything is sent) --------------------------
def check_keys(spec: TableSpec, keys, op: str) -> np.ndarray:
    """Keys as a 1-D integer array within [0, rows); raises a TableError subclass otherwise.
    A CPU torch tensor is viewed, not copied (pskv.tensors)."""
    arr = to_numpy(keys, f"{op} on table {spec.name!r}: keys") if is_tensor(keys) else np.asarray(keys)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ShapeError(f"{op} on table {spec.name!r}: keys have shape {arr.shape}; pass a 1-D array of row ids")
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(0, np.int64)
        raise DTypeError(f"{op} on table {spec.name!r}: keys have dtype {arr.dtype}; keys are integer row ids")
    if spec.sparse:
        return _sparse_keys(spec, arr, op)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= spec.rows:
        raise KeyOutOfRange(
            f"{op} on table {spec.name!r}: key {int(arr.max())} is outside [0, {spec.rows}); "
            "keys are row indices, so map ids to rows before calling"
        )
    if arr.dtype != np.int64:
        arr = arr.astype(np.int64)
    arr = np.ascontiguousarray(arr)
    if arr.size:
        lo, hi = kernels.key_range(arr)
        if lo < 0 or hi >= spec.rows:
            bad = lo if lo < 0 else hi
            raise KeyOutOfRange(
                f"{op} on table {spec.name!r}: key {bad} is outside [0, {spec.rows}); "
                "keys are row indices, so map ids to rows before calling"
            )
    return arr


def _sparse_keys(spec: TableSpec, arr: np.ndarray, op: str) -> np.ndarray:
    """Keys of a sparse table: any uint64 (signed input must be >= 0), as the int64 with the same bits."""
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise KeyOutOfRange(
            f"{op} on table {spec.name!r}: key {int(arr.min())} is negative; the keys of a "
            "key_space='uint64' table are uint64 ids (pass them as np.uint64)"
        )
    if arr.dtype != np.uint64:
        arr = arr.astype(np.uint64)
    return np.ascontiguousarray(arr).view(np.int64)


def check_values(spec: TableSpec, values, n: int, op: str) -> np.ndarray:
    """Values as a C-contiguous (n, dim) array of the table's dtype; safe casts only, and DTypeError for
    values a narrowing cast would overflow (float64 values beyond float32's range). A CPU torch
    tensor is viewed, not copied (pskv.tensors)."""
    arr = to_numpy(values, f"{op} on table {spec.name!r}: values") if is_tensor(values) else np.asarray(values)
    if arr.ndim == 1 and spec.dim == 1 and arr.shape[0] == n:
        arr = arr.reshape(n, 1)
    if arr.shape != (n, spec.dim):
        raise ShapeError(
            f"{op} on table {spec.name!r}: values have shape {arr.shape}, expected ({n}, {spec.dim}) for that many keys"
        )
    if arr.dtype != spec.dtype:
        if not np.can_cast(arr.dtype, spec.dtype, casting="same_kind"):
            raise DTypeError(
                f"{op} on table {spec.name!r}: values of dtype {arr.dtype} cannot be cast safely to "
                f"the table's {np.dtype(spec.dtype)}; convert them first"
            )
        wide = _may_overflow(arr.dtype, np.dtype(spec.dtype))
        arr = _narrowed(spec, arr, op) if wide else arr.astype(spec.dtype)
    return np.ascontiguousarray(arr)


def _may_overflow(src: np.dtype, dst: np.dtype) -> bool:
    """Whether some finite value of `src` lies outside the range of `dst` (float64 -> float32; an
    integer table's narrower integers): only such casts are checked, value by value."""
    wide = np.finfo(src).max if src.kind == "f" else np.iinfo(src).max if src.kind in "iu" else 0
    low = np.iinfo(src).min if src.kind in "iu" else 0
    if dst.kind == "f":
        return wide > np.finfo(dst).max
    if dst.kind in "iu" and src.kind in "iu":
        return wide > np.iinfo(dst).max or low < np.iinfo(dst).min
    return False


def _narrowed(spec: TableSpec, arr: np.ndarray, op: str) -> np.ndarray:
    """`arr` cast to the table's dtype, or DTypeError if a value does not fit it: a finite value that
    would become inf (silently, in numpy), or an integer that would wrap around. (inf and nan stay
    what they are: the caller's own.) One pass over the cast values on top of the cast."""
    dst = np.dtype(spec.dtype)
    biggest: object  # what the message names: formatted floats, or integers
    limit: object
    if dst.kind == "f":
        with np.errstate(over="ignore"):  # (numpy warns, or raises under -W error; we say what happened)
            out = arr.astype(dst)
        inf = np.isinf(out)
        if not inf.any() or not (inf & np.isfinite(arr)).any():
            return out
        biggest, limit = (
            np.format_float_scientific(x, precision=5, trim="-")  # (exact for long double too)
            for x in (np.abs(arr[np.isfinite(arr)]).max(), np.finfo(dst).max)
        )
        what = "overflow to inf; scale them or declare the table dtype='float64'"
    else:
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        if np.iinfo(dst).min <= lo and hi <= np.iinfo(dst).max:
            return arr.astype(dst)
        biggest, limit, what = max(abs(lo), abs(hi)), np.iinfo(dst).max, "wrap around"
    raise DTypeError(
        f"{op} on table {spec.name!r}: values of dtype {arr.dtype} do not fit the table's {dst}: the "
        f"largest magnitude is {biggest}, above {dst}'s largest {limit} (the cast would {what})"
    )
