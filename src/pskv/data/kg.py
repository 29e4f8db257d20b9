"""Knowledge graphs: loaders for the formats pskv's KGE app reads and a seeded random generator; the
triple files' text is read by data/kg_files.py, filtered ranking is data/kg_ranks.py (both re-exported).

    python -c "from pskv.data.kg import load; print(load('nations'))"

Formats (every split becomes an (n, 3) int64 array of (head, relation, tail) ids):
- pykeen's `train.txt` / `valid.txt` / `test.txt` (nations, umls): `head<TAB>relation<TAB>tail`
  labels, no header; `.gz` files are read too.
- recbole's `ml-100k.kg`: a typed header (`head_id:token<TAB>relation_id:token<TAB>tail_id:token`,
  columns found by name) and one triple of labels per line. It has no split: `load_recbole_kg`
  makes a seeded 90/5/5 one and moves valid/test triples with an entity or relation unseen in
  train back to train, so every evaluated id was trained.
- Lapse's toy KGE data (`train.del` / `valid.del` / `test.del`): `subject<TAB>relation<TAB>object`
  as 0-based integer ids; the ids are kept as they are.
- LibKGE's layout: the same `.del` id triples plus `entity_ids.del` and `relation_ids.del`, lines
  `index<TAB>label` (dense indices 0..n-1); the labels become the names, the ids stay.
- one file of `head<TAB>relation<TAB>tail` labels (a first line `head relation tail`, `subject
  predicate object` or `h r t` is a header): split by a seed as recbole's `.kg`.

`load(NAME)` takes a built-in name or a path: a directory in the pykeen, LibKGE or Lapse layout
(found by which files it holds), or a single file.

Label ids are the positions in the sorted list of all labels of all splits, so they do not depend
on the order of the splits or of the lines. A malformed line raises DataError with the file name
and line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .fetch import DataError
from .kg_files import empty, id_labels, line_of, lines, read_id_triples, read_label_triples
from .kg_ranks import Filter, filtered_ranks, rank_metrics

__all__ = [  # (the readers of kg_files and the ranking of kg_ranks too: they were this module's)
    "KG",
    "SPLITS",
    "Filter",
    "filtered_ranks",
    "index_triples",
    "load",
    "load_lapse",
    "load_libkge",
    "load_path",
    "load_pykeen",
    "load_recbole_kg",
    "load_tsv",
    "random_kg",
    "rank_metrics",
    "read_id_triples",
    "read_label_triples",
]

SPLITS = ("train", "valid", "test")
_RANDOM = re.compile(r"random:(\d+),(\d+),(\d+)")


@dataclass(frozen=True)
class KG:
    """A knowledge graph with a train/valid/test split; ids index `entities` and `relations`."""

    name: str
    entities: tuple[str, ...]  # id -> label
    relations: tuple[str, ...]
    train: np.ndarray  # (n_train, 3) int64: head, relation, tail
    valid: np.ndarray  # (n_valid, 3) int64
    test: np.ndarray  # (n_test, 3) int64

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def all_triples(self) -> np.ndarray:
        """Train, valid and test stacked: (n, 3) int64, the filter of filtered ranking."""
        return np.concatenate([self.train, self.valid, self.test])

    def __repr__(self) -> str:
        return (
            f"<KG {self.name!r} entities={self.num_entities} relations={self.num_relations} "
            f"train={len(self.train)} valid={len(self.valid)} test={len(self.test)}>"
        )


# ---- the KG of label triples -----------------------------------------------------------------------------------


def index_triples(name: str, splits: dict[str, list[tuple[str, str, str]]]) -> KG:
    """Map the labels of every split to ids (sorted labels of all splits) and build the KG."""
    entities = sorted({x for triples in splits.values() for h, _, t in triples for x in (h, t)})
    relations = sorted({r for triples in splits.values() for _, r, _ in triples})
    e_id = {label: i for i, label in enumerate(entities)}
    r_id = {label: i for i, label in enumerate(relations)}
    arrays = {
        s: np.array([(e_id[h], r_id[r], e_id[t]) for h, r, t in splits.get(s, [])], dtype=np.int64).reshape(-1, 3)
        for s in SPLITS
    }
    return KG(name, tuple(entities), tuple(relations), **arrays)


# ---- the formats ---------------------------------------------------------------------------------------------


def _split_file(directory: Path, split: str, suffixes: tuple[str, ...]) -> Path:
    for suffix in suffixes:
        for candidate in (directory / f"{split}{suffix}", directory / f"{split}{suffix}.gz"):
            if candidate.exists():
                return candidate
    raise DataError(f"{directory}: no {split} split (looked for {split}{{{','.join(suffixes)}}}[.gz])")


def load_pykeen(directory: Path, name: str | None = None) -> KG:
    """pykeen's train/valid/test `.txt` (or `.tsv`) label triples in `directory`."""
    directory = Path(directory)
    splits = {s: read_label_triples(_split_file(directory, s, (".txt", ".tsv"))) for s in SPLITS}
    return index_triples(name or directory.name, splits)


def _recbole_columns(path: Path) -> tuple[tuple[int, int, int], int]:
    for number, line in lines(path):
        names = [f.split(":")[0].strip() for f in line.split("\t")]
        try:
            return (names.index("head_id"), names.index("relation_id"), names.index("tail_id")), len(names)
        except ValueError:
            raise DataError(
                f"{path}:{number}: expected a recbole header with head_id, relation_id and tail_id "
                f"columns, got {line[:80]!r}"
            ) from None
    raise DataError(f"{path}: the file is empty; expected a recbole .kg header and triples")


def load_recbole_kg(path: Path, *, seed: int = 0, held_out: float = 0.05, name: str | None = None) -> KG:
    """recbole's `.kg` file with a seeded train/valid/test split (`held_out` of the triples each for
    valid and test); held-out triples with an entity or relation not in train go back to train."""
    path = Path(path)
    columns, width = _recbole_columns(path)
    labels = sorted(set(read_label_triples(path, columns=columns, header=True, width=width)))
    return _seeded_split(index_triples(name or path.stem, {"train": labels}), seed, held_out)


def load_tsv(path: Path, *, seed: int = 0, held_out: float = 0.05, name: str | None = None) -> KG:
    """One file of `head<TAB>relation<TAB>tail` labels (or recbole's `.kg`, found by its typed
    header), split by `seed` as load_recbole_kg splits. A first line of column names
    (`head relation tail`, `subject predicate object`, `h r t`, any case) is a header."""
    path = Path(path)
    first = next((line for _, line in lines(path) if line.strip()), None)
    if first is None:
        raise empty(path)
    if path.suffix == ".kg" or ":token" in first:
        return load_recbole_kg(path, seed=seed, held_out=held_out, name=name)
    header = tuple(f.strip().lower() for f in first.split("\t")) in _HEADERS
    labels = sorted(set(read_label_triples(path, header=header)))
    return _seeded_split(index_triples(name or path.stem, {"train": labels}), seed, held_out)


_HEADERS = {
    ("head", "relation", "tail"),
    ("subject", "predicate", "object"),
    ("subject", "relation", "object"),
    ("h", "r", "t"),
    ("s", "p", "o"),
}


def _seeded_split(kg: KG, seed: int, held_out: float) -> KG:
    """`held_out` of kg.train's triples each for valid and test (at least one each from 10 triples
    on), by a seeded permutation; held-out triples with an entity or relation that train lacks go back."""
    order = np.random.default_rng(seed).permutation(len(kg.train))
    n = int(round(held_out * len(order)))  # noqa: RUF046 - under numpy 1.x round() of a float64 is a float64
    n = max(n, 1) if len(order) >= 10 else n
    train, valid, test = kg.train[order[2 * n :]], kg.train[order[:n]], kg.train[order[n : 2 * n]]
    seen_e = np.zeros(kg.num_entities, bool)
    seen_e[train[:, 0]] = seen_e[train[:, 2]] = True
    seen_r = np.zeros(kg.num_relations, bool)
    seen_r[train[:, 1]] = True
    keep = [seen_e[s[:, 0]] & seen_e[s[:, 2]] & seen_r[s[:, 1]] for s in (valid, test)]
    train = np.concatenate([train, valid[~keep[0]], test[~keep[1]]])
    return KG(kg.name, kg.entities, kg.relations, train, valid[keep[0]], test[keep[1]])


def load_libkge(directory: Path, name: str | None = None) -> KG:
    """LibKGE's layout: train/valid/test `.del` id triples, names from `entity_ids.del` and
    `relation_ids.del` (`index<TAB>label` lines, dense 0-based indices)."""
    directory = Path(directory)
    entities, relations = id_labels(directory / "entity_ids.del"), id_labels(directory / "relation_ids.del")
    splits = {}
    for s in SPLITS:
        path = directory / f"{s}.del"
        splits[s] = read_id_triples(path)
        for column, labels, what in ((0, entities, "entity"), (1, relations, "relation"), (2, entities, "entity")):
            over = np.flatnonzero(splits[s][:, column] >= len(labels))
            if len(over):
                raise DataError(
                    f"{path}:{line_of(path, over[0])}: {what} id {splits[s][over[0], column]} is not in "
                    f"{'entity' if column != 1 else 'relation'}_ids.del ({len(labels)} ids, 0-based)"
                )
    return KG(name or directory.name, tuple(entities), tuple(relations), **splits)


def load_path(path: Path, *, seed: int = 0) -> KG:
    """A KG from a directory (pykeen's .txt/.tsv splits, LibKGE's .del with entity_ids.del, Lapse's
    .del) or from one file of triples (split by `seed`, see load_tsv). Raises DataError."""
    path = Path(path)
    if path.is_file():
        return load_tsv(path, seed=seed)
    if not path.is_dir():
        raise DataError(
            f"{path}: no such file or directory; --data takes nations, umls, ml-100k-kg, lapse-toy, "
            "random:E,R,T, a directory of train/valid/test triples or one file of triples"
        )
    if (path / "entity_ids.del").exists():
        return load_libkge(path)
    if (path / "train.del").exists():
        return load_lapse(path)
    if any((path / f"train{s}").exists() for s in (".txt", ".tsv", ".txt.gz", ".tsv.gz")):
        return load_pykeen(path)
    raise DataError(
        f"{path}: no train split; expected train.txt, valid.txt and test.txt (pykeen; or .tsv), or "
        "train.del, valid.del and test.del (LibKGE, with entity_ids.del and relation_ids.del)"
    )


def load_lapse(directory: Path, *, train_file: str = "train.del", name: str | None = None) -> KG:
    """Lapse's toy KGE data: `.del` files of 0-based ids, kept as they are (entity i is "i").

    `train_file`: e.g. "train.partitioned.2x2.del", the same triples ordered for 2 nodes x 2 threads."""
    directory = Path(directory)
    files = {"train": directory / train_file, "valid": directory / "valid.del", "test": directory / "test.del"}
    splits = {s: read_id_triples(p) for s, p in files.items()}
    every = np.concatenate(list(splits.values()))
    n_e = int(max(every[:, 0].max(initial=-1), every[:, 2].max(initial=-1))) + 1
    n_r = int(every[:, 1].max(initial=-1)) + 1
    return KG(name or directory.name, tuple(map(str, range(n_e))), tuple(map(str, range(n_r))), **splits)


def random_kg(
    entities: int,
    relations: int,
    triples: int,
    *,
    seed: int = 0,
    clusters: int = 16,
    skew: float = 0.5,
    held_out: float = 0.05,
) -> KG:
    """A seeded random KG with structure a model can learn, of any size.

    Entities fall into `clusters` groups; relation r maps group g to a fixed group f_r(g), and a
    triple (h, r, t) takes h from a power-law popularity (P(rank i) ~ i^-`skew`, 0 <= skew < 1: hot
    keys, as in real KGs), r uniformly and t uniformly from group f_r(group(h)). The triples are
    distinct, so a tiny graph may have fewer than `triples`; `held_out` of them each for valid and test."""
    if entities < 2 or relations < 1 or triples < 1 or not 0 <= skew < 1:
        raise ConfigError(
            f"random:{entities},{relations},{triples} (skew {skew}): need >= 2 entities, "
            ">= 1 relation and triple, and 0 <= skew < 1"
        )
    rng = np.random.default_rng(seed)
    clusters = max(1, min(clusters, entities // 2))
    group = rng.permutation(np.arange(entities) % clusters)  # (E,) int64: entity -> group
    members = np.argsort(group, kind="stable")  # (E,) entities ordered by group
    starts = np.searchsorted(group[members], np.arange(clusters + 1))  # (clusters+1,) group offsets
    target = rng.integers(0, clusters, (relations, clusters))  # f_r(g)
    popularity = rng.permutation(entities)  # (E,) entity of popularity rank i
    found = np.empty(0, np.int64)  # distinct codes (h * R + r) * E + t
    for _ in range(20):  # redraw until enough distinct triples; bounded for tiny, dense graphs
        n = (triples - len(found)) * 5 // 4 + 16
        h = popularity[(entities * rng.random(n) ** (1 / (1 - skew))).astype(np.int64)]
        r = rng.integers(0, relations, n)
        g = target[r, group[h]]
        t = members[starts[g] + (rng.random(n) * (starts[g + 1] - starts[g])).astype(np.int64)]
        found = _distinct(np.concatenate([found, (h * relations + r) * entities + t]))
        if len(found) >= triples:
            break
    code = found[rng.permutation(len(found))[:triples]]
    tri = np.stack([code // entities // relations, code // entities % relations, code % entities], 1)
    n = int(held_out * len(tri))
    return KG(
        f"random:{entities},{relations},{triples}",
        tuple(map(str, range(entities))),
        tuple(map(str, range(relations))),
        tri[2 * n :],
        tri[:n],
        tri[n : 2 * n],
    )


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values; np.unique hashes int64 in numpy 2 and took 16 s for 6 M keys, this 0.5 s."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if len(a) else a


def load(name: str, *, seed: int = 0) -> KG:
    """A KG by name: "nations", "umls" (pykeen), "ml-100k-kg" (recbole), "lapse-toy", "random:E,R,T",
    or any other string as a path (load_path)."""
    from .fetch import fetch, lapse_toy_dir

    m = _RANDOM.fullmatch(name)
    if m:
        return random_kg(*map(int, m.groups()), seed=seed)
    if name in ("nations", "umls"):
        return load_pykeen(fetch(name), name)
    if name == "ml-100k-kg":
        return load_recbole_kg(fetch(name) / "ml-100k.kg", seed=seed, name=name)
    if name == "lapse-toy":
        return load_lapse(lapse_toy_dir() / "kge", name=name)
    return load_path(Path(name), seed=seed)
