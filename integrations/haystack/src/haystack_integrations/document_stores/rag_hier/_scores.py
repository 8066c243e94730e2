"""How ``scale_score`` maps a strategy's scores to [0, 1], as Haystack's InMemoryDocumentStore does."""

from __future__ import annotations

import math

from rag_hier.retrieval.bm25 import BM25Retriever
from rag_hier.retrieval.registry import StrategyEntry

__all__ = ["BM25_SCALE", "SIMILARITY_SCALE", "check_scale_score", "scaled_score", "score_scale"]

DOT_PRODUCT_SCALING_FACTOR = 100
"""``scale_score`` maps a dot product ``s`` to ``sigmoid(s / 100)``, as Haystack's InMemory store does."""
BM25_SCALING_FACTOR = 8
"""``scale_score`` maps a BM25 score ``s`` to ``sigmoid(s / 8)``, as Haystack's InMemory store (and its Elasticsearch
and OpenSearch integrations, whose scores are Lucene's, as ours) do."""


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


BM25_SCALE = "bm25"
"""What :func:`score_scale` returns for a strategy that ranks by BM25 (``scaled_score`` then uses ``sigmoid(s/8)``)."""
SIMILARITY_SCALE = "similarity"
"""What :func:`score_scale` returns for a strategy ranking dense inner products (scaled by the store's similarity)."""


def scaled_score(score: float, similarity: str) -> float:
    """Map a score to [0, 1] as Haystack's InMemory store does.

    ``similarity`` says what the score is: a dense inner product in a ``"cosine"`` store, ``(s+1)/2``, or in a
    ``"dot_product"`` one, ``sigmoid(s/100)``; or a ``"bm25"`` score, ``sigmoid(s/8)`` (``expit(s / 8)`` in
    ``InMemoryDocumentStore.bm25_retrieval``).
    """
    if similarity == "cosine":
        return (score + 1.0) / 2.0
    if similarity == BM25_SCALE:
        return _sigmoid(score / BM25_SCALING_FACTOR)
    return _sigmoid(score / DOT_PRODUCT_SCALING_FACTOR)


def score_scale(entry: StrategyEntry) -> str | None:
    """How ``scale_score`` maps the scores of a strategy to [0, 1], as InMemoryDocumentStore does for that kind.

    :data:`SIMILARITY_SCALE` for dense inner products (``dense``, ``hierarchical``, ``tree``...: by the store's
    similarity), :data:`BM25_SCALE` for BM25 (``bm25``: ``sigmoid(s / 8)``), ``None`` when its scores are neither
    (SVDR, sparse embeddings, fusion): those are not scaled.
    """
    retriever = entry.retriever
    if retriever.over_vectors:
        return SIMILARITY_SCALE
    if issubclass(retriever, BM25Retriever):
        return BM25_SCALE
    return None


def check_scale_score(entry: StrategyEntry, scale_score: bool) -> None:
    """Refuse ``scale_score`` for a strategy whose scores :func:`score_scale` cannot map."""
    if scale_score and score_scale(entry) is None:
        raise ValueError(
            "scale_score maps inner products of dense vectors (by the store's similarity) and BM25 scores "
            f"(sigmoid(s / 8)) to [0, 1]; the {entry.name!r} strategy's scores are neither: leave scale_score off"
        )
