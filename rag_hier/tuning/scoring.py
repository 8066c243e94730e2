"""Scoring a store's search on held-back judged queries: the base model as stored, a candidate beside it.

Both are scored by the store's own dense search (:class:`~rag_hier.retrieval.DenseRetriever`: the same index
kind and parameters, filters, document aggregation and tie rule), with the conventions of ``rag-hier eval``
(pytrec_eval; a hit whose id is its query's id is removed first, and one more hit is fetched so each query
keeps ``top_k``). The candidate's passage vectors sit in an index of the store's kind built beside the
store's own (:class:`CandidateView`), so nothing is written until the candidate is adopted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rag_hier.eval.judged import JudgedQueries
from rag_hier.eval.metrics import evaluate_per_query, parse_metric, remove_identical_ids
from rag_hier.eval.trec import hits_to_run
from rag_hier.index.dense import DenseIndex
from rag_hier.retrieval.base import Queries
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.store.encoder_switch import EncodedPassages

__all__ = ["CandidateView", "candidate_index", "fetch_depth", "score_queries", "score_results"]


def candidate_index(store: Any, encoded: EncodedPassages) -> DenseIndex:
    """An index of the store's kind and parameters over a candidate model's passage vectors."""
    index = DenseIndex(int(encoded.vectors.shape[1]), store.index_config)
    if encoded.rowids.size:
        index.add(encoded.rowids, np.ascontiguousarray(encoded.vectors, dtype=np.float32))
    return index


class CandidateView:
    """A store as the dense search sees it, with another passage index (a candidate model's vectors).

    Everything but the dense search is the store's own (records, filters, counts, read blocks).
    """

    search_dense_hits = None  # no one-statement fast path: the general path reads through the store

    def __init__(self, store: Any, index: DenseIndex) -> None:
        self._store = store
        self._index = index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def dimension(self) -> int:
        """The candidate's dimension."""
        return self._index.dimension

    def count_vectors(self) -> int:
        """Vectors in the candidate index."""
        return len(self._index)

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`HierStore.search_dense` on the candidate index."""
        live = len(self._index)
        q = np.asarray(queries, dtype=np.float32)
        if live == 0:
            return np.zeros((q.shape[0], 0), np.float32), np.zeros((q.shape[0], 0), np.int64)
        return self._index.search(q, min(top_k, live), allowed_ids=allowed)


def score_queries(
    store: Any,
    judged: JudgedQueries,
    query_vectors: np.ndarray,
    metrics: Sequence[str],
    *,
    index: DenseIndex | None = None,
    ignore_identical_ids: bool = True,
) -> dict[str, dict[str, float]]:
    """Per-query values of ``metrics`` for ``judged`` (metric → {query id → value}), as ``rag-hier eval`` scores.

    Args:
        store: The store.
        judged: The queries and their judgements (at ``judged.level``).
        query_vectors: The queries encoded by the model under test, rows in ``judged.queries`` order.
        metrics: Metric names (``ndcg@10``, ...).
        index: A candidate's passage index (:func:`candidate_index`); ``None``: the store's own.
        ignore_identical_ids: Remove hits whose id is the query id first (BEIR / MTEB).

    """
    fetch_k = fetch_depth(judged, metrics, ignore_identical_ids)
    target = store if index is None else CandidateView(store, index)
    results = DenseRetriever(target).run(Queries(vectors=query_vectors), fetch_k, aggregate=judged.level)  # type: ignore[arg-type]
    return score_results(judged, [r.hits for r in results], metrics, ignore_identical_ids=ignore_identical_ids)


def fetch_depth(judged: JudgedQueries, metrics: Sequence[str], ignore_identical_ids: bool = True) -> int:
    """Hits to fetch per query: the deepest metric's cut-off, plus one when an identical-id hit may be removed."""
    top_k = max(parse_metric(m)[1] for m in metrics)
    return top_k + 1 if ignore_identical_ids and any(q in judged.known for q in judged.queries) else top_k


def score_results(
    judged: JudgedQueries,
    hits: Sequence[Sequence[Any]],
    metrics: Sequence[str],
    *,
    ignore_identical_ids: bool = True,
) -> dict[str, dict[str, float]]:
    """Per-query values of ``metrics`` for the hits of ``judged``'s queries (rows in ``judged.queries`` order)."""
    qids = list(judged.queries)
    top_k = max(parse_metric(m)[1] for m in metrics)
    run = hits_to_run(qids, list(hits), level=judged.level)
    if ignore_identical_ids:
        run = remove_identical_ids(run)[0]
    run = {q: dict(list(scores.items())[:top_k]) for q, scores in run.items()}
    return evaluate_per_query(run, judged.qrels, metrics, ignore_identical_ids=False)
