"""pskv.filters: less traffic for the same model (Li et al.'s user-defined filters), composable.

Two kinds, used together or alone:

* selection filters decide which entries of a gradient a worker sends at all; they run where the
  gradients are made, on a worker's local columns (`Chain.select`):
    - `Kkt()`: the KKT filter for L1: skip a feature whose weight is 0 and whose gradient (the
      server's last one, or this push's) lies inside [-l1, l1]: a proximal step leaves it at 0.
    - `SignificantlyModified(threshold)`: send only entries whose accumulated change reaches the
      threshold; the rest stays in a local residual and goes out once it has grown (nothing lost).
* wire filters change how a push (or pull) travels, not what it means; pass them as `filters=` to
  `table.push / push_pull / pull`, or once to `node.table(..., filters=)` for every push and pull
  of the table that gives none (net.codec decodes them at the receiver):
    - `KeyCache()`: sender and receiver remember key lists; a repeated list costs 8 bytes.
    - `Compress("zstd" | "lz4")`: keys and values compressed (pip install 'pskv[compress]').
    - `Quantize("fp16" | "bf16")`: pushed values rounded to 16 bits (float32 tables).

    chain = pskv.filters.Chain(pskv.filters.parse("kkt,sig:1e-4,keycache,zstd,fp16"), l1=1e-4)
    cols, grads = chain.select(keys, cols, grads, weights)        # which local columns to send
    table.push(keys[cols], grads, filters=chain.wire)             # how they travel

`parse` reads the command-line form (`--filters` of `pskv run lr`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ..net.codec import Codec


@dataclasses.dataclass(frozen=True)
class Kkt:
    """Skip features with weight 0 whose gradient lies in [-l1 * (1 - margin), l1 * (1 - margin)]."""

    margin: float = 0.0

    def __str__(self) -> str:
        return "kkt" if not self.margin else f"kkt:{self.margin:g}"


@dataclasses.dataclass(frozen=True)
class SignificantlyModified:
    """Send an entry only once its accumulated value reaches `threshold` in absolute value."""

    threshold: float

    def __post_init__(self) -> None:
        if not self.threshold >= 0:
            raise ConfigError(f"SignificantlyModified(threshold={self.threshold!r}): must be >= 0")

    def __str__(self) -> str:
        return f"sig:{self.threshold:g}"


@dataclasses.dataclass(frozen=True)
class KeyCache:
    def __str__(self) -> str:
        return "keycache"


@dataclasses.dataclass(frozen=True)
class Compress:
    codec: str = "zstd"

    def __str__(self) -> str:
        return self.codec


@dataclasses.dataclass(frozen=True)
class Quantize:
    dtype: str = "fp16"

    def __str__(self) -> str:
        return self.dtype


Filter = Kkt | SignificantlyModified | KeyCache | Compress | Quantize


class Filters(tuple):
    """A tuple of filters that prints as the command-line form."""

    def __str__(self) -> str:
        return ",".join(map(str, self))


def parse(text: str) -> Filters:
    """'kkt,sig:1e-4,keycache,zstd,fp16' -> the filters; raises ConfigError naming what is unknown."""
    out: list[Filter] = []
    for item in (t.strip() for t in str(text).split(",")):
        if not item:
            continue
        name, _, arg = item.partition(":")
        try:
            if name == "kkt":
                out.append(Kkt(float(arg) if arg else 0.0))
            elif name == "sig":
                out.append(SignificantlyModified(float(arg)))
            elif name == "keycache":
                out.append(KeyCache())
            elif name in ("zstd", "lz4"):
                out.append(Compress(name))
            elif name in ("fp16", "bf16"):
                out.append(Quantize(name))
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"filter {item!r}: use kkt[:MARGIN], sig:THRESHOLD, keycache, zstd, lz4, fp16 or bf16, comma-separated"
            ) from None
    return Filters(out)


def codec_of(filters) -> Codec | None:
    """The wire part of `filters` (a Codec, a Chain, filters, their `parse` form, or None) as one Codec, or None."""
    if filters is None or isinstance(filters, Codec):
        return filters
    if isinstance(filters, str):
        filters = parse(filters)
    if isinstance(filters, Chain):
        return filters.wire
    items = list(filters) if isinstance(filters, (list, tuple)) else [filters]
    compress = [f.codec for f in items if isinstance(f, Compress)]
    quantize = [f.dtype for f in items if isinstance(f, Quantize)]
    cache = any(isinstance(f, KeyCache) for f in items)
    if not (cache or compress or quantize):
        return None
    return Codec(
        key_cache=cache, compress=compress[-1] if compress else None, quantize=quantize[-1] if quantize else None
    )


def table_codec(filters, name: str, dtype) -> Codec | None:
    """`node.table(filters=)`: the wire filters every push and pull of the table travels with when
    the call gives no `filters=` of its own. ConfigError for selection filters (they run where the
    gradients are made: Chain.select) and for 16-bit values of a table that is not float32."""
    if isinstance(filters, str):
        filters = parse(filters)
    items = (
        list(filters.filters)
        if isinstance(filters, Chain)
        else list(filters)
        if isinstance(filters, (list, tuple))
        else [filters]
    )
    chosen = [str(f) for f in items if isinstance(f, (Kkt, SignificantlyModified))]
    if chosen:
        raise ConfigError(
            f"table {name!r}: filters={chosen} choose which gradients a worker sends; they cannot "
            "be a table's: apply them with pskv.filters.Chain(...).select before each push"
        )
    codec = codec_of(filters)
    if codec is not None and codec.quantize and np.dtype(dtype) != np.float32:
        raise ConfigError(
            f"table {name!r}: filters quantize to {codec.quantize}, which needs a float32 table, not {np.dtype(dtype)}"
        )
    return codec


class Chain:
    """The filters of one worker: `select` applies the selection filters to its local columns (and
    keeps SignificantlyModified's residual); `wire` is the Codec to push with (or None)."""

    def __init__(self, filters, *, l1: float = 0.0) -> None:
        self.filters = Filters(filters or ())
        self.l1 = float(l1)
        self.kkt = next((f for f in self.filters if isinstance(f, Kkt)), None)
        self.sig = next((f for f in self.filters if isinstance(f, SignificantlyModified)), None)
        self.wire = codec_of(self.filters)
        self._residual: np.ndarray | None = None
        self.offered = self.sent = 0  # entries given to select() and kept by it

    def select(
        self,
        keys: np.ndarray,
        cols: np.ndarray,
        grads: np.ndarray,
        weights: np.ndarray,
        server_gradient: np.ndarray | None = None,
        *,
        kkt: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(cols, grads) to send of local columns `cols` with gradients `grads`; `weights` (m,) is the
        worker's copy of every local weight, `server_gradient` (m,) the server's last gradient
        per column if known (KKT filter: used instead of this push's); `kkt=False` skips the KKT
        filter this time (a pass that refreshes the server's gradients)."""
        self.offered += len(cols)
        if self.sig is not None:
            if self._residual is None or len(self._residual) != len(keys):
                self._residual = np.zeros(len(keys))
            acc = self._residual[cols] + grads
            big = np.abs(acc) >= self.sig.threshold
            self._residual[cols] = np.where(big, 0.0, acc)
            cols, grads = cols[big], acc[big]
        if self.kkt is not None and self.l1 > 0 and kkt:
            seen = grads if server_gradient is None else server_gradient[cols]
            inside = (weights[cols] == 0) & (np.abs(seen) <= self.l1 * (1.0 - self.kkt.margin))
            cols, grads = cols[~inside], grads[~inside]
        self.sent += len(cols)
        return cols, grads
