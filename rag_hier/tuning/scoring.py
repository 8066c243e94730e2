"""Scoring a store's search on held-back judged queries: the base model as stored, a candidate beside it.

Both are scored by the store's own dense search (:class:`~rag_hier.retrieval.DenseRetriever`: the same index
kind and parameters, filters, document aggregation and tie rule), with the conventions of ``rag-hier eval``
(pytrec_eval; a hit whose id is its query's id is removed first, and one more hit is fetched so each query
keeps ``top_k``). The candidate's passage vectors sit in an index of the store's kind built beside the
store's own (:class:`CandidateView`), so nothing is written until the candidate is adopted.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.eval.judged import JudgedQueries
from rag_hier.eval.metrics import evaluate_per_query, parse_metric, remove_identical_ids
from rag_hier.eval.trec import hits_to_run
from rag_hier.index.dense import DenseIndex
from rag_hier.retrieval.base import Aggregate, Queries
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.store.capabilities import HitRows, supports
from rag_hier.store.encoder_switch import EncodedPassages

if TYPE_CHECKING:
    from rag_hier.store.contract import Filters, StoreBackend
    from rag_hier.store.records import PassageRecord

__all__ = ["CandidateView", "candidate_index", "candidate_view", "fetch_depth", "score_queries", "score_results"]


def candidate_index(store: Any, encoded: EncodedPassages) -> DenseIndex:
    """An index of the store's kind and parameters over a candidate model's passage vectors."""
    index = DenseIndex(int(encoded.vectors.shape[1]), store.index_config)
    if encoded.rowids.size:
        index.add(encoded.rowids, np.ascontiguousarray(encoded.vectors, dtype=np.float32))
    return index


class CandidateView:
    """A store as a dense search of query vectors reads it, with another passage index (a candidate model's vectors).

    It has exactly what :class:`~rag_hier.retrieval.DenseRetriever` reads for query vectors: the dense search,
    dimension and vector count are the candidate index's; records, filters, counts and read blocks are the store's.
    It has no encoder (query text must come as the candidate's vectors) and none of the store's fast paths that
    search the store's own index (:class:`~rag_hier.store.capabilities.DenseHitSearch`): a search through the view
    always ranks the candidate index. :func:`candidate_view` adds
    :class:`~rag_hier.store.capabilities.HitRows` (rows by rowid, the same for any index) when the store has it.
    """

    encoder = None
    """No model: a search through the view takes query vectors encoded by the candidate."""

    def __init__(self, store: StoreBackend, index: DenseIndex) -> None:
        self._store = store
        self._index = index

    @property
    def location(self) -> str:
        """The store's location, for messages."""
        return self._store.location

    @property
    def dimension(self) -> int:
        """The candidate's dimension."""
        return self._index.dimension

    def count_vectors(self) -> int:
        """Vectors in the candidate index."""
        return len(self._index)

    def count_passages(self, filters: Filters = None) -> int:
        """The store's passages (matching ``filters``)."""
        return self._store.count_passages(filters)

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`HierStore.search_dense` on the candidate index."""
        live = len(self._index)
        q = np.asarray(queries, dtype=np.float32)
        if live == 0:
            return np.zeros((q.shape[0], 0), np.float32), np.zeros((q.shape[0], 0), np.int64)
        return self._index.search(q, min(top_k, live), allowed_ids=allowed)

    def matching_rowids(self, filters: Filters, *, with_vector: bool = True) -> np.ndarray | None:
        """The store's rowids matching ``filters`` (``None``: no filter)."""
        return self._store.matching_rowids(filters, with_vector=with_vector)

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """The store's passages by rowid."""
        return self._store.records(rowids)

    def reading(self) -> AbstractContextManager[Any]:
        """A block of the store's reads from one committed generation."""
        return self._store.reading()


class _CandidateViewWithHitRows(CandidateView):
    """:class:`CandidateView` of a store with :class:`~rag_hier.store.capabilities.HitRows`."""

    def hit_rows(self, rowids: Sequence[int]) -> Mapping[int, tuple[Any, ...]]:
        """The store's hit rows by rowid."""
        return typing.cast(HitRows, self._store).hit_rows(rowids)


def candidate_view(store: StoreBackend, index: DenseIndex) -> CandidateView:
    """A :class:`CandidateView` of ``store`` over ``index``, with the store's hit rows when it has them."""
    return (_CandidateViewWithHitRows if supports(store, HitRows) else CandidateView)(store, index)


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
    # the view has what a dense search of query vectors reads, not the whole store contract
    target = store if index is None else typing.cast("StoreBackend", candidate_view(store, index))
    level = typing.cast(Aggregate, judged.level)
    results = DenseRetriever(target).run(Queries(vectors=query_vectors), fetch_k, aggregate=level)
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
