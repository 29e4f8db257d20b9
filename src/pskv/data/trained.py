"""Trained models on disk: what the apps' `--out` writes, and the loaders that read it back in a plain process.

    from pskv.data.trained import load_embeddings, load_factors
    emb = load_embeddings("emb")          # kge --out emb: emb.E[i] is entity emb.entities[i]
    f = load_factors("factors")           # mf --out factors: f.predict(["196"], ["242"])

(word2vec's --out is word2vec's own text format: pskv.data.text.write_vectors / read_vectors.)

A labelled array NAME is two files in one directory:
- `NAME.npy`: a (n, dim) float32 array (numpy's .npy format, `np.load` reads it);
- `NAME.tsv`: n lines, UTF-8, line i the name of row i (an entity, a relation, a user or item id,
  as the input file spelled it). A name never holds a tab or a newline: the apps read them from
  tab- or line-separated files.
Each file is written to a temporary name and renamed, so a reader never sees half of one, and a
run that fails before its end leaves none behind. `meta.json` beside them holds what else the
model needs (written with write_json).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ConfigError
from .fetch import DataError

__all__ = ["Embeddings", "Factors", "load_embeddings", "load_factors", "read_json", "read_labelled", "write_json",
           "write_labelled"]


def write_labelled(directory: Path, name: str, rows: np.ndarray, labels: Sequence[object]) -> None:
    """Write `rows` as DIRECTORY/NAME.npy and `labels` (str() of each) as DIRECTORY/NAME.tsv."""
    rows = np.asarray(rows)
    if len(rows) != len(labels):
        raise ConfigError(f"write_labelled {name!r}: {len(rows)} rows but {len(labels)} labels")
    text = [str(label) for label in labels]
    bad = [t for t in text if "\t" in t or "\n" in t or "\r" in t]
    if bad:
        raise ConfigError(f"write_labelled {name!r}: label {bad[0]!r} holds a tab or a newline")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / f"{name}.npy", lambda f: np.save(f, rows, allow_pickle=False))
    write_atomic(directory / f"{name}.tsv", lambda f: f.write("".join(t + "\n" for t in text).encode("utf-8")))


def read_labelled(directory: Path, name: str) -> tuple[list[str], np.ndarray]:
    """(labels, rows) of a labelled array written by write_labelled. Raises DataError naming the
    file (and line) if a file is missing, unreadable, or the two disagree in length."""
    directory = Path(directory)
    array_path, label_path = directory / f"{name}.npy", directory / f"{name}.tsv"
    try:
        rows = np.load(array_path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{array_path}: no such file; is {directory} an --out directory of this app?") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{array_path}: not a .npy array ({exc}); write it again with --out") from None
    labels = []
    try:
        with open(label_path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    labels.append(raw.decode("utf-8").rstrip("\r\n"))
                except UnicodeDecodeError:
                    raise DataError(f"{label_path}:{number}: not UTF-8 text; expected one label per line") from None
    except FileNotFoundError:
        raise DataError(f"{label_path}: no such file; is {directory} an --out directory of this app?") from None
    if len(labels) != len(rows):
        raise DataError(f"{label_path}:{len(labels) + 1}: {len(labels)} labels for the {len(rows)} rows of "
                        f"{array_path.name}; expected one label per row")
    return labels, rows


def write_json(path: Path, value: dict) -> None:
    """Write `value` as indented JSON, atomically."""
    write_atomic(Path(path), lambda f: f.write((json.dumps(value, indent=1) + "\n").encode("utf-8")))


def read_json(path: Path) -> dict:
    """The JSON object in `path`. Raises DataError if it is missing or not JSON."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; is {path.parent} an --out directory of this app?") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a JSON file ({exc}); write it again with --out") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}:1: expected a JSON object, got {type(value).__name__}")
    return value


# ---- the apps' models ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Embeddings:
    """What `kge --out DIR` wrote: row i of E is entity `entities[i]`, of R relation `relations[i]`."""

    entities: list[str]
    relations: list[str]
    E: np.ndarray  # (n_entities, dim) float32
    R: np.ndarray  # (n_relations, dim) float32
    model: str  # "complex" or "distmult": how compose() scores
    meta: dict  # meta.json: dim, data, seed, epochs, the test metrics the app printed

    def ids(self, triples: list[tuple[str, str, str]]) -> np.ndarray:
        """(n, 3) int64 rows of (head, relation, tail) labels; KeyError for an unknown label."""
        e, r = {x: i for i, x in enumerate(self.entities)}, {x: i for i, x in enumerate(self.relations)}
        return np.array([(e[h], r[p], e[t]) for h, p, t in triples], np.int64).reshape(-1, 3)

    def __repr__(self) -> str:
        return (f"<Embeddings {self.model} entities={len(self.entities)} relations={len(self.relations)} "
                f"dim={self.E.shape[1]}>")


def load_embeddings(directory: Path) -> Embeddings:
    """Read what `kge --out DIRECTORY` wrote, in any process (no cluster). Raises DataError naming the
    file if one is missing or they disagree."""
    directory = Path(directory)
    meta = read_json(directory / "meta.json")
    entities, E = read_labelled(directory, "entities")
    relations, R = read_labelled(directory, "relations")
    if E.ndim != 2 or R.ndim != 2 or E.shape[1] != R.shape[1] or meta.get("model") not in ("complex", "distmult"):
        raise DataError(f"{directory}: entities {E.shape}, relations {R.shape}, model {meta.get('model')!r} do not "
                        "make one kge model; write it again with --out")
    return Embeddings(entities, relations, E, R, meta["model"], meta)


@dataclasses.dataclass(frozen=True)
class Factors:
    """What `mf --out DIR` wrote: r(u, i) ~ global_mean + user_bias[u] + item_bias[i] + U[u] . V[i],
    clipped to `clip`; row u of U is user `users[u]` (the input file's id), row i of V item `items[i]`."""

    users: list[str]
    items: list[str]
    U: np.ndarray  # (n_users, rank) float32
    V: np.ndarray  # (n_items, rank) float32
    user_bias: np.ndarray  # (n_users,) float32, zeros without biases
    item_bias: np.ndarray  # (n_items,) float32
    meta: dict  # meta.json: global_mean, rank, biases, clip, data

    def predict(self, users: Sequence[object], items: Sequence[object]) -> np.ndarray:
        """(n,) float64 predicted ratings of (users[k], items[k]), by the ids of the input file
        (str() of each); KeyError for an id the model has no row of."""
        u_of, i_of = {x: k for k, x in enumerate(self.users)}, {x: k for k, x in enumerate(self.items)}
        u = np.array([u_of[str(x)] for x in users], np.int64)
        i = np.array([i_of[str(x)] for x in items], np.int64)
        return self.predict_rows(u, i)

    def predict_rows(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """(n,) float64 predictions of rows u[k] of U and i[k] of V (the app's dense ids)."""
        dots = np.einsum("ij,ij->i", self.U[u].astype(np.float64), self.V[i].astype(np.float64))
        pred = self.meta["global_mean"] + self.user_bias[u] + self.item_bias[i] + dots
        lo, hi = self.meta.get("clip") or (None, None)  # None in meta.json: unbounded
        return np.clip(pred, -np.inf if lo is None else lo, np.inf if hi is None else hi)

    def __repr__(self) -> str:
        return f"<Factors {len(self.users)} users x {len(self.items)} items, rank {self.U.shape[1]}>"


def load_factors(directory: Path) -> Factors:
    """Read what `mf --out DIRECTORY` wrote (any --schedule), in any process. Raises DataError
    naming the file if one is missing or they disagree."""
    directory = Path(directory)
    meta = read_json(directory / "meta.json")
    users, U = read_labelled(directory, "user_factors")
    items, V = read_labelled(directory, "item_factors")
    biases = bool(meta.get("biases"))
    bu = _vector(directory / "user_bias.npy", len(users)) if biases else np.zeros(len(users), np.float32)
    bi = _vector(directory / "item_bias.npy", len(items)) if biases else np.zeros(len(items), np.float32)
    if U.ndim != 2 or V.ndim != 2 or U.shape[1] != V.shape[1] or "global_mean" not in meta:
        raise DataError(f"{directory}: user factors {U.shape}, item factors {V.shape} and meta.json keys "
                        f"{sorted(meta)} do not make one mf model; write it again with --out")
    return Factors(users, items, U, V, bu, bi, meta)


def _vector(path: Path, n: int) -> np.ndarray:
    try:
        v = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read it ({exc}); write the model again with --out") from None
    if v.shape != (n,):
        raise DataError(f"{path}: shape {v.shape}, expected ({n},) (one per row of the factors)")
    return v


def write_atomic(path: Path, write) -> None:
    """Call write(binary file) on a temporary file beside `path`, then rename it to `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
