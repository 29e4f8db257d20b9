"""Filtered ranking of knowledge-graph completion: the known answers of each query (`Filter`), the
filtered rank of a target among a model's scores, and MRR / Hits@k (data/kg.py re-exports them).
"""

from __future__ import annotations

import numpy as np


class Filter:
    """The known answers of each query, from all splits: tails of (head, relation), heads of
    (relation, tail). Used to drop the other true answers before ranking (filtered setting)."""

    def __init__(self, triples: np.ndarray, num_entities: int, num_relations: int) -> None:
        self._n_e, self._n_r = num_entities, num_relations
        triples = np.asarray(triples, np.int64).reshape(-1, 3)  # duplicates are harmless: filtered twice
        self._tails = self._index(triples[:, 0] * num_relations + triples[:, 1], triples[:, 2])
        self._heads = self._index(triples[:, 2] * num_relations + triples[:, 1], triples[:, 0])

    @staticmethod
    def _index(query: np.ndarray, answer: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = np.argsort(query, kind="stable")
        keys, starts = np.unique(query[order], return_index=True)
        return keys, np.append(starts, len(order)), answer[order]

    def answers(self, triples: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets (n+1,), entities) of the known tails (side="tail") or heads of each triple."""
        keys, starts, answer = self._tails if side == "tail" else self._heads
        anchor = triples[:, 0] if side == "tail" else triples[:, 2]
        q = anchor * self._n_r + triples[:, 1]
        pos = np.clip(np.searchsorted(keys, q), 0, max(len(keys) - 1, 0))
        hit = keys[pos] == q if len(keys) else np.zeros(len(q), bool)
        lo = np.where(hit, starts[pos], 0)
        hi = np.where(hit, starts[np.minimum(pos + 1, len(starts) - 1)], 0)
        counts = hi - lo  # (n,) known answers per query
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        idx = np.arange(offsets[-1]) + np.repeat(lo - offsets[:-1], counts)  # positions in `answer`, query by query
        return offsets, answer[idx]


def filtered_ranks(scores: np.ndarray, targets: np.ndarray, offsets: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Filtered rank of `targets[i]` among `scores[i]` after dropping the other known answers
    `known[offsets[i]:offsets[i+1]]`; ties count half ("realistic" rank, so a constant model is not
    rewarded). `scores`: (n, num_entities). Returns (n,) float64, 1 is best."""
    scores = np.array(scores, np.result_type(scores, np.float32))  # (n, E) a copy: filtered entries become -inf
    n = len(targets)
    rows = np.repeat(np.arange(n), np.diff(offsets))
    true = scores[np.arange(n), targets]  # (n,)
    scores[rows, known] = -np.inf
    scores[np.arange(n), targets] = -np.inf  # so the target is not its own tie
    higher = (scores > true[:, None]).sum(1)
    ties = (scores == true[:, None]).sum(1)
    return 1.0 + higher + 0.5 * ties


def rank_metrics(ranks: np.ndarray) -> dict[str, float]:
    """MRR and Hits@1/3/10 of filtered ranks."""
    ranks = np.asarray(ranks, np.float64)
    if not len(ranks):
        return {"mrr": float("nan"), "hits@1": float("nan"), "hits@3": float("nan"), "hits@10": float("nan")}
    return {"mrr": float(np.mean(1 / ranks)), **{f"hits@{k}": float(np.mean(ranks <= k)) for k in (1, 3, 10)}}
