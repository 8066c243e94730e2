"""Training data for EHI: training queries, hard-negative pools mined from leaves (or exact neighbours), sampling."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag_hier.index.ehi import LeafAssignment
from rag_hier.training.hce.data import SupervisedPair

__all__ = ["TrainingQueries", "exact_pools", "leaf_pools", "sample_negatives"]


@dataclass(frozen=True)
class TrainingQueries:
    """The distinct training queries of a list of pairs, and each pair's query index.

    ``ids[i]``/``texts[i]``/``relevant[i]`` describe query ``i``; ``query_of_pair[j]`` is the query of pair ``j``
    and ``positives[j]`` its positive corpus position.
    """

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    relevant: tuple[frozenset[int], ...]
    query_of_pair: np.ndarray
    positives: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: Sequence[SupervisedPair]) -> TrainingQueries:
        """Group ``pairs`` by query id (first-seen order)."""
        index: dict[str, int] = {}
        texts: list[str] = []
        relevant: list[frozenset[int]] = []
        of_pair = np.zeros(len(pairs), np.int64)
        for j, p in enumerate(pairs):
            if p.query_id not in index:
                index[p.query_id] = len(index)
                texts.append(p.query)
                relevant.append(p.relevant)
            of_pair[j] = index[p.query_id]
        return cls(
            tuple(index), tuple(texts), tuple(relevant), of_pair, np.asarray([p.positive for p in pairs], np.int64)
        )

    def __len__(self) -> int:
        return len(self.ids)

    def relevance_pairs(self) -> list[tuple[int, int]]:
        """``(query index, corpus position)`` of every judged-relevant item."""
        return [(i, int(p)) for i, rel in enumerate(self.relevant) for p in rel]


def leaf_pools(
    query_leaves: np.ndarray, assignment: LeafAssignment, relevant: Sequence[frozenset[int]]
) -> list[np.ndarray]:
    """Per query, the corpus positions in its top leaves (``query_leaves[i]``) that are not relevant to it."""
    pools = []
    for leaves, rel in zip(query_leaves, relevant, strict=True):
        members = assignment.members(leaves)
        if rel:
            members = members[~np.isin(members, np.fromiter(rel, np.int64, len(rel)))]
        pools.append(members)
    return pools


def exact_pools(
    query_vectors: np.ndarray, corpus_vectors: np.ndarray, relevant: Sequence[frozenset[int]], size: int
) -> list[np.ndarray]:
    """Per query, its ``size`` nearest corpus positions by inner product, relevant ones excluded."""
    pools = []
    want = min(size + max((len(r) for r in relevant), default=0), corpus_vectors.shape[0])
    for start in range(0, query_vectors.shape[0], 256):
        scores = query_vectors[start : start + 256] @ corpus_vectors.T
        top = np.argpartition(-scores, want - 1, axis=1)[:, :want] if want < scores.shape[1] else None
        for i in range(scores.shape[0]):
            cand = top[i] if top is not None else np.arange(scores.shape[1])
            cand = cand[np.argsort(-scores[i, cand], kind="stable")]
            rel = relevant[start + i]
            if rel:
                cand = cand[~np.isin(cand, np.fromiter(rel, np.int64, len(rel)))]
            pools.append(cand[:size])
    return pools


def sample_negatives(
    pools: Sequence[np.ndarray],
    query_of_row: np.ndarray,
    relevant: Sequence[frozenset[int]],
    n_items: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int]:
    """One hard negative per row, uniform in its query's pool.

    A query whose pool is empty (all its top leaves' documents are relevant to it) gets a uniformly random
    non-relevant document. Returns ``(negatives, rows that fell back to a random document)``.
    """
    out = np.zeros(len(query_of_row), np.int64)
    fallback = 0
    for row, q in enumerate(np.asarray(query_of_row, np.int64)):
        pool = pools[q]
        if pool.size:
            out[row] = pool[int(rng.integers(0, pool.size))]
            continue
        fallback += 1
        rel = relevant[q]
        for _ in range(100):
            cand = int(rng.integers(0, n_items))
            if cand not in rel:
                break
        out[row] = cand
    return out, fallback
