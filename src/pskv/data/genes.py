"""Gene expression for Lasso: Bioconductor's ALL data set (Debian's r-bioc-all), and correlated
synthetic designs with a known structure.

ALL: 128 patients x 12,625 gene probes (Chiaretti et al. 2004), an R ExpressionSet saved as
ALL.rda. `all_expression()` fetches the Debian package (`pskv data fetch all-genes`: nothing is
installed), reads the .rda with the `rdata` parser (no R needed; `pip install 'pskv[compare]'`),
takes the expression matrix (the ExpressionSet's only numeric array of 12,625 x 128 values,
stored column-major: probes x samples) and caches it as all-genes/exprs.npy (samples x genes).
Neighbouring probes of one gene and co-regulated genes are strongly correlated, which is what
makes parallel coordinate descent interfere.

`planted(X, nonzeros, seed)`: a response y = X beta* + noise with `nonzeros` non-zero
coefficients: the regression problem the Lasso app solves on real X.
`correlated(n, p, rho, block, seed)`: X with blocks of `block` features correlated `rho` within a
block (a shared factor plus noise), independent across blocks.
"""

from __future__ import annotations

import os

import numpy as np

from .fetch import DataError, fetch

SAMPLES, GENES = 128, 12625


def all_expression(*, quiet: bool = False) -> np.ndarray:
    """(128, 12625) float64: ALL's expression values, samples by genes (cached after the first read)."""
    target = fetch("all-genes", quiet=quiet)
    cached = target / "exprs.npy"
    if cached.is_file():
        return np.load(cached)
    try:
        import rdata
    except ImportError:
        raise DataError("reading ALL.rda needs the rdata parser: pip install 'pskv[compare]'") from None
    parsed = rdata.parser.parse_file(target / "ALL.rda")
    arrays = [a for a in _arrays(parsed.object) if a.dtype == np.float64 and a.size == SAMPLES * GENES]
    if not arrays:
        raise DataError(f"{target / 'ALL.rda'} holds no {GENES} x {SAMPLES} expression matrix; the file changed?")
    x = np.ascontiguousarray(arrays[0].reshape(GENES, SAMPLES, order="F").T)  # R: column-major, probes x samples
    tmp = cached.with_name(f".exprs.{os.getpid()}.npy")
    np.save(tmp, x)
    os.replace(tmp, cached)
    return x


def _arrays(root):
    """Every numpy array inside rdata's parse tree (iteratively: the tree is deep)."""
    stack, seen = [root], set()
    while stack:
        o = stack.pop()
        if o is None or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            if o.dtype != object:
                yield o
            else:
                stack.extend(o.ravel().tolist())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif hasattr(o, "__dict__") or hasattr(o, "__slots__"):
            stack.extend(
                getattr(o, name, None)
                for name in ("value", "attributes", "tag", "referenced_object", "frame", "enclosure", "hash_table")
            )
            if hasattr(o, "__dict__"):
                stack.extend(v for v in vars(o).values() if not isinstance(v, (str, bytes, int, float)))


def planted(x: np.ndarray, nonzeros: int, seed: int, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(y, beta*): y = x beta* + noise on `nonzeros` random coefficients of +-1 (x standardized per column)."""
    rng = np.random.default_rng(seed)
    beta = np.zeros(x.shape[1])
    support = rng.choice(x.shape[1], nonzeros, replace=False)
    beta[support] = rng.choice([-1.0, 1.0], nonzeros)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    y = (x - x.mean(axis=0)) / scale @ beta
    return y + noise * y.std() * rng.standard_normal(len(y)), beta


def correlated(n: int, p: int, rho: float, block: int, seed: int) -> np.ndarray:
    """(n, p) features: blocks of `block` columns with pairwise correlation `rho`, independent blocks."""
    if not 0 <= rho < 1:
        raise DataError(f"correlation {rho} must be in [0, 1)")
    rng = np.random.default_rng(seed)
    factors = rng.standard_normal((n, -(-p // block)))
    own = rng.standard_normal((n, p))
    return np.sqrt(rho) * np.repeat(factors, block, axis=1)[:, :p] + np.sqrt(1 - rho) * own
