"""Rating matrices for matrix factorization: loaders, a zipf-skewed generator and a fixed split.

    from pskv.data import fetch, ratings
    r = ratings.load_inter(fetch("ml-100k") / "ml-100k.inter")   # 100,000 ratings, 943 x 1682
    train, test = ratings.split(r, test_fraction=0.1, seed=0)

Formats:
- RecBole atomic files (`.inter`): tab-separated, a typed header such as
  `user_id:token<TAB>item_id:token<TAB>rating:float<TAB>timestamp:float`. Tokens become dense
  0-based ids in order of their sorted values (numerically when all are integers); the tokens
  are kept in `Ratings.user_tokens` / `item_tokens`.
- MatrixMarket coordinate (`.mmc`, Lapse's toy train/test): `%%MatrixMarket matrix coordinate
  real general`, `%` comments, `ROWS COLS NNZ`, then NNZ lines `i j value` with 1-based i, j.
- MatrixMarket array (`.mma`, Lapse's W and H): `%%MatrixMarket matrix array real general`,
  `ROWS COLS`, then ROWS*COLS values in column-major order.
- a table of your own (`.csv`, `.tsv`, `.txt`, `.dat`, any other suffix): one rating per line, fields
  separated by tabs, commas, `::` (MovieLens-1M) or spaces, whichever the first line uses; a first line
  whose third field is not a number is a header, and then the columns named user/user_id/userId,
  item/item_id/itemId/movieId and rating/score/value are used (else the first three); without one
  they are user, item, rating, then anything (a timestamp). Ids may be any strings, mapped as
  `.inter` tokens are.
A malformed line raises DataError naming the file and the line number; `load_file(path)` picks the
reader by suffix.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .fetch import DataError

__all__ = ["Ratings", "load_file", "load_inter", "load_mma", "load_mmc", "load_table", "split", "zipf_ratings"]


@dataclasses.dataclass
class Ratings:
    """A sparse matrix of `n_users` x `n_items` as coordinate arrays of equal length."""

    users: np.ndarray  # (nnz,) int64 row ids, 0-based
    items: np.ndarray  # (nnz,) int64 column ids, 0-based
    values: np.ndarray  # (nnz,) float32
    n_users: int
    n_items: int
    user_tokens: np.ndarray | None = None  # (n_users,) original ids, when the file had tokens
    item_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def take(self, index: np.ndarray) -> Ratings:
        """The ratings at `index` (a mask or positions), with the same shape and tokens."""
        return dataclasses.replace(self, users=self.users[index], items=self.items[index], values=self.values[index])

    def __repr__(self) -> str:
        return f"<Ratings {self.n_users} x {self.n_items}, {len(self):,} ratings>"


def load_inter(path: Path, *, user: str = "user_id", item: str = "item_id", rating: str = "rating") -> Ratings:
    """Read a RecBole `.inter` file: the columns named `user`, `item` and `rating` (header names
    without their `:type`). Raises DataError for a missing column or a malformed line."""
    path = Path(path)
    with _open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        names = [h.split(":", 1)[0] for h in header]
        try:
            cols = [names.index(c) for c in (user, item, rating)]
        except ValueError:
            raise DataError(
                f"{path} line 1: header {header!r} lacks one of the columns {user!r}, {item!r}, "
                f"{rating!r}; is it a RecBole .inter file?"
            ) from None
        us, its, vs = [], [], []
        for lineno, line in enumerate(f, 2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != len(header) or not all(fields[c] for c in cols):
                if line.strip() == "":
                    continue
                raise DataError(
                    f"{path} line {lineno}: {line.rstrip()!r} has {len(fields)} tab-separated fields, "
                    f"the header {len(header)}"
                )
            us.append(fields[cols[0]])
            its.append(fields[cols[1]])
            vs.append(_float(fields[cols[2]], path, lineno))
    if not vs:
        raise DataError(f"{path} line 2: no ratings after the header; expected user, item and rating columns")
    return _from_tokens(us, its, vs)


def load_file(path: Path) -> Ratings:
    """Ratings from a file of yours: `.inter` (load_inter), `.mmc` (load_mmc), else a table (load_table)."""
    path = Path(path)
    if path.suffix == ".inter":
        return load_inter(path)
    if path.suffix == ".mmc":
        return load_mmc(path)
    return load_table(path)


_COLUMNS = (
    {"user", "user_id", "userid", "uid", "users"},
    {"item", "item_id", "itemid", "movieid", "movie_id", "iid", "movie", "items"},
    {"rating", "ratings", "score", "value", "stars", "r"},
)


def load_table(path: Path) -> Ratings:
    """Read a CSV/TSV/whitespace table of user, item, rating (see the module docstring). Raises
    DataError naming the file and line for a wrong field count, a rating that is not a finite
    number, or a file with no ratings."""
    path = Path(path)
    us: list[str] = []
    its: list[str] = []
    vs: list[float] = []
    split = None
    cols, width = (0, 1, 2), 0
    for lineno, line in _text_lines(path):
        if not line.strip():
            continue
        if split is None:  # the first line: the separator, and a header or the first rating
            split = _splitter(line)
            fields = split(line)
            width = len(fields)
            if width < 3:
                raise DataError(
                    f"{path} line {lineno}: {line[:80]!r} has {width} field(s); expected user, "
                    "item and rating (separated by tabs, commas, '::' or spaces)"
                )
            header = _header_columns(fields)
            if header is not None:
                cols = header
                continue
        fields = split(line)
        if len(fields) != width or not all(fields[c].strip() for c in cols):
            raise DataError(
                f"{path} line {lineno}: {line[:80]!r} has {len(fields)} field(s), the first line "
                f"{width}; expected user, item and rating, none empty, on every line"
            )
        us.append(fields[cols[0]].strip())
        its.append(fields[cols[1]].strip())
        vs.append(_float(fields[cols[2]].strip(), path, lineno))
    if not vs:
        raise DataError(f"{path} line 1: no ratings in the file; expected lines of user, item, rating")
    return _from_tokens(us, its, vs)


def _from_tokens(us: list[str], its: list[str], vs: list[float]) -> Ratings:
    """Ratings of users and items given by their ids as read (dense indices; the ids kept)."""
    user_tokens, users = _dense_ids(us)
    item_tokens, items = _dense_ids(its)
    return Ratings(
        users, items, np.asarray(vs, np.float32), len(user_tokens), len(item_tokens), user_tokens, item_tokens
    )


def _splitter(line: str):
    """How to cut the lines of a table whose first line is `line`."""
    if "\t" in line:
        return lambda text: text.split("\t")
    if "::" in line:
        return lambda text: text.split("::")
    if "," in line:
        return lambda text: next(csv.reader([text]))  # quoted fields may hold commas
    return str.split


def _header_columns(fields: list[str]) -> tuple[int, int, int] | None:
    """(user, item, rating) columns of a header line, or None if `fields` is a rating (a number third)."""
    try:
        float(fields[2])
        return None
    except ValueError:
        pass
    names = [f.strip().strip('"').lower() for f in fields]
    u, i, r = (next((k for k, n in enumerate(names) if n in wanted), -1) for wanted in _COLUMNS)
    return (u, i, r) if -1 not in (u, i, r) and len({u, i, r}) == 3 else (0, 1, 2)


def _text_lines(path: Path):
    """(line number, text without the newline) of a UTF-8 file; DataError naming the line otherwise."""
    with _open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{path} line {lineno}: not UTF-8 text; expected user, item, rating") from None


def _open(path: Path, mode: str = "r"):
    try:
        return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; --data takes a built-in name or a ratings file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot open it ({exc.strerror})") from None


def load_mmc(path: Path) -> Ratings:
    """Read a MatrixMarket coordinate file (1-based indices) as 0-based Ratings."""
    path = Path(path)
    lines = _mm_body(path, "coordinate")
    (lineno, size), body = lines[0], lines[1:]
    n_rows, n_cols, nnz = _ints(size, 3, path, lineno)
    if len(body) != nnz:
        raise DataError(f"{path}: the size line promises {nnz} entries but {len(body)} follow")
    rows = np.empty(nnz, np.int64)
    cols = np.empty(nnz, np.int64)
    values = np.empty(nnz, np.float32)
    for k, (lineno, fields) in enumerate(body):
        if len(fields) != 3:
            raise DataError(f"{path} line {lineno}: {' '.join(fields)!r} is not 'ROW COL VALUE'")
        i, j = _ints(fields[:2], 2, path, lineno)
        if not (1 <= i <= n_rows and 1 <= j <= n_cols):
            raise DataError(
                f"{path} line {lineno}: entry ({i}, {j}) is outside the {n_rows} x {n_cols} "
                "matrix (indices are 1-based)"
            )
        rows[k], cols[k], values[k] = i - 1, j - 1, _float(fields[2], path, lineno)
    return Ratings(rows, cols, values, n_rows, n_cols)


def load_mma(path: Path) -> np.ndarray:
    """Read a MatrixMarket array file (column-major) as a (ROWS, COLS) float64 array."""
    path = Path(path)
    lines = _mm_body(path, "array")
    (lineno, size), body = lines[0], lines[1:]
    n_rows, n_cols = _ints(size, 2, path, lineno)
    if len(body) != n_rows * n_cols:
        raise DataError(
            f"{path}: the size line promises {n_rows} x {n_cols} = {n_rows * n_cols} values "
            f"but {len(body)} lines follow"
        )
    values = []
    for lineno, fields in body:
        if len(fields) != 1:
            raise DataError(f"{path} line {lineno}: {' '.join(fields)!r} is not one value")
        values.append(_float(fields[0], path, lineno))
    return np.asarray(values, np.float64).reshape(n_cols, n_rows).T.copy()


def zipf_ratings(
    n_users: int, n_items: int, nnz: int, *, seed: int = 0, exponent: float = 1.1, rank: int = 10, noise: float = 0.1
) -> Ratings:
    """NuPS's MF workload: `nnz` ratings with uniform users and zipf(`exponent`)-skewed items.

    Item popularity p(k) ~ 1/k**exponent over a seeded random order of the items (so the hot items
    are spread over the key range). Values are a random rank-`rank` matrix (unit variance) plus
    N(0, noise**2). Deterministic for a seed; duplicates (user, item) can occur."""
    if min(n_users, n_items, nnz) < 1:
        raise ConfigError(f"zipf_ratings needs positive sizes, got {n_users} x {n_items} with {nnz} ratings")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    order = rng.permutation(n_items)
    users = rng.integers(0, n_users, nnz, dtype=np.int64)
    items = order[np.minimum(np.searchsorted(cdf, rng.random(nnz)), n_items - 1)].astype(np.int64)
    scale = rank**-0.25  # each factor entry ~ N(0, rank**-0.5): a dot product has variance 1
    u = rng.normal(0, scale, (n_users, rank)).astype(np.float32)
    v = rng.normal(0, scale, (n_items, rank)).astype(np.float32)
    values = np.empty(nnz, np.float32)
    for lo in range(0, nnz, 1 << 20):  # chunks keep the (chunk, rank) temporaries small
        hi = min(lo + (1 << 20), nnz)
        values[lo:hi] = np.einsum("ij,ij->i", u[users[lo:hi]], v[items[lo:hi]])
    values += rng.normal(0, noise, nnz).astype(np.float32)
    return Ratings(users, items, values, n_users, n_items)


def split(ratings: Ratings, *, test_fraction: float = 0.1, seed: int = 0) -> tuple[Ratings, Ratings]:
    """A fixed random split: the first round(test_fraction * nnz) of a seeded permutation are the test set."""
    order = np.random.default_rng(seed).permutation(len(ratings))
    n_test = int(round(test_fraction * len(ratings)))  # noqa: RUF046 - numpy 1.x: round(float64) is a float64
    return ratings.take(np.sort(order[n_test:])), ratings.take(np.sort(order[:n_test]))


def _mm_body(path: Path, kind: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of the non-comment lines of a MatrixMarket file of `kind`."""
    with open(path, encoding="ascii", errors="replace") as f:
        text = f.read().splitlines()
    banner = text[0].lower().split() if text else []
    if banner[:3] != ["%%matrixmarket", "matrix", kind] or banner[3:4] not in (["real"], ["integer"]):
        raise DataError(
            f"{path} line 1: {text[0] if text else ''!r} is not a '%%MatrixMarket matrix {kind} real general' banner"
        )
    lines = [(n, line.split()) for n, line in enumerate(text[1:], 2) if line.strip() and not line.startswith("%")]
    if not lines:
        raise DataError(f"{path}: no size line after the comments")
    return lines


def _ints(fields, count: int, path: Path, lineno: int) -> list[int]:
    try:
        if len(fields) != count:
            raise ValueError
        return [int(x) for x in fields]
    except ValueError:
        raise DataError(f"{path} line {lineno}: {' '.join(fields)!r} is not {count} integers") from None


def _float(text: str, path: Path, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path} line {lineno}: {text!r} is not a number") from None
    if not np.isfinite(value):
        raise DataError(f"{path} line {lineno}: the value {text!r} is not finite")
    return value


def _dense_ids(tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique tokens, 0-based id of each token); integer tokens sort numerically (when each
    is written as str(int) writes it: "007" and "7" stay two ids)."""
    try:
        keys = np.asarray(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        keys = None
    if keys is None or not np.array_equal(keys.astype(str), np.asarray(tokens, dtype=str)):
        keys = np.asarray(tokens, dtype=object)
    unique, ids = np.unique(keys, return_inverse=True)
    return unique, ids.astype(np.int64)
