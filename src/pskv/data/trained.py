"""Trained models on disk: what the apps' `--out` writes, and the loaders that read it back in a plain process.

    from pskv.data.trained import load_embeddings, load_factors
    emb = load_embeddings("emb")          # kge --out emb: emb.E[i] is entity emb.entities[i]
    f = load_factors("factors")           # mf --out factors: f.predict("196", "242") -> one float,
    f.predict("196", ["242", "302"])      # f.predict(users, items) -> an array; unknown ids: see predict

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .fetch import DataError

__all__ = [
    "Embeddings",
    "Factors",
    "UnknownId",
    "load_embeddings",
    "load_factors",
    "read_json",
    "read_labelled",
    "write_json",
    "write_labelled",
]


class UnknownId(DataError, KeyError):
    """An id (user, item, entity, relation) a trained model has no row of; `.id` is it."""

    def __init__(self, message: str, id: str) -> None:
        super().__init__(message)
        self.id = id

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else ""


def write_labelled(directory: Path, name: str, rows: np.ndarray, labels: Sequence[object] | np.ndarray) -> None:
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
        raise DataError(
            f"{label_path}:{len(labels) + 1}: {len(labels)} labels for the {len(rows)} rows of "
            f"{array_path.name}; expected one label per row"
        )
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
        """(n, 3) int64 rows of (head, relation, tail) labels. Raises UnknownId (a KeyError) naming the
        first label the model has no row of."""
        e, r = {x: i for i, x in enumerate(self.entities)}, {x: i for i, x in enumerate(self.relations)}
        return np.array(
            [(_row(e, h, "entity"), _row(r, p, "relation"), _row(e, t, "entity")) for h, p, t in triples], np.int64
        ).reshape(-1, 3)

    def __repr__(self) -> str:
        return (
            f"<Embeddings {self.model} entities={len(self.entities)} relations={len(self.relations)} "
            f"dim={self.E.shape[1]}>"
        )


def load_embeddings(directory: Path) -> Embeddings:
    """Read what `kge --out DIRECTORY` wrote, in any process (no cluster). Raises DataError naming the
    file if one is missing or they disagree."""
    directory = Path(directory)
    meta = read_json(directory / "meta.json")
    entities, E = read_labelled(directory, "entities")
    relations, R = read_labelled(directory, "relations")
    if E.ndim != 2 or R.ndim != 2 or E.shape[1] != R.shape[1] or meta.get("model") not in ("complex", "distmult"):
        raise DataError(
            f"{directory}: entities {E.shape}, relations {R.shape}, model {meta.get('model')!r} do not "
            "make one kge model; write it again with --out"
        )
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

    def predict(self, users: object, items: object, *, unknown: str = "fallback") -> float | np.ndarray:
        """Predicted ratings by the ids of the input file (str() of each: "196" and 196 are one id).

        `users`, `items`: one id each, which gives one float; or sequences of ids (list, tuple, array)
        of one length, which give an (n,) float64 array of (users[k], items[k]); one id beside a
        sequence is paired with each of its ids (every item for one user, say). Blocks only to compute.

        An id the model has no row of (not in the training data): with unknown="fallback" (the default)
        it gets the cold-start prediction, what the model knows without it: global mean plus the bias of
        the known side (an unknown user: mean + item bias; an unknown item: mean + user bias; both: the
        mean), clipped like the rest. With unknown="raise" it raises UnknownId (a KeyError) naming it."""
        if unknown not in ("fallback", "raise"):
            raise ConfigError(f"Factors.predict: unknown={unknown!r}; use 'fallback' or 'raise'")
        one = _scalar(users) and _scalar(items)
        u_ids, i_ids = _ids(users), _ids(items)
        if len(u_ids) != len(i_ids) and 1 not in (len(u_ids), len(i_ids)):
            raise ConfigError(
                f"Factors.predict: {len(u_ids)} users but {len(i_ids)} items; give one of each per "
                "prediction, or one id to pair with every id of the other side"
            )
        u_pairs, i_pairs = np.broadcast_arrays(np.array(u_ids, object), np.array(i_ids, object))
        u_of, i_of = {x: k for k, x in enumerate(self.users)}, {x: k for k, x in enumerate(self.items)}
        u = np.array([u_of.get(x, -1) for x in u_pairs], np.int64)
        i = np.array([i_of.get(x, -1) for x in i_pairs], np.int64)
        if unknown == "raise":
            for side, rows, ids in (("user", u, u_pairs), ("item", i, i_pairs)):
                if (rows < 0).any():
                    missing = ids[int(np.argmax(rows < 0))]
                    raise UnknownId(
                        f"{side} {missing!r} is not in the model (it was not in the training data of "
                        f"{self.meta.get('data', 'this model')!r}); predict(..., unknown='fallback') "
                        "gives the global mean plus the known side's bias instead",
                        missing,
                    )
        pred = self.predict_rows(u, i)
        return float(pred[0]) if one else pred

    def predict_rows(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """(n,) float64 predictions of rows u[k] of U and i[k] of V (the app's dense ids); a row -1
        is an unknown user or item, whose factors and bias count as zero (predict's fallback)."""
        u, i = np.asarray(u, np.int64), np.asarray(i, np.int64)
        known_u, known_i = u >= 0, i >= 0
        U = np.where(known_u[:, None], self.U[np.where(known_u, u, 0)], 0).astype(np.float64)  # (n, rank)
        V = np.where(known_i[:, None], self.V[np.where(known_i, i, 0)], 0).astype(np.float64)
        bu = np.where(known_u, self.user_bias[np.where(known_u, u, 0)], 0.0)
        bi = np.where(known_i, self.item_bias[np.where(known_i, i, 0)], 0.0)
        pred = self.meta["global_mean"] + bu + bi + np.einsum("ij,ij->i", U, V)
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
        raise DataError(
            f"{directory}: user factors {U.shape}, item factors {V.shape} and meta.json keys "
            f"{sorted(meta)} do not make one mf model; write it again with --out"
        )
    return Factors(users, items, U, V, bu, bi, meta)


def _scalar(value: Any) -> bool:
    """One id (a str, an int, a numpy scalar), not a sequence of them."""
    return isinstance(value, (str, bytes)) or np.ndim(value) == 0


def _ids(value: Any) -> list[str]:
    """The ids of one id or a sequence of them, as the model's labels spell them (str of each)."""
    return [str(value)] if _scalar(value) else [str(x) for x in value]


def _row(rows: dict[str, int], label: object, kind: str) -> int:
    try:
        return rows[str(label)]
    except KeyError:
        raise UnknownId(f"{kind} {str(label)!r} is not in the model (not in its training data)", str(label)) from None


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
