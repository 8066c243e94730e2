"""DenseRetriever (strategy ``dense``): exact or approximate inner-product search over a store's passage index.

Filters are applied before the vector search (FAISS id selectors), so a filtered search returns ``top_k``
hits whenever that many passages match. ``Hit.scores`` is empty: the score is the inner product.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from operator import le
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.index.selection import select_top_k
from rag_hier.retrieval import base
from rag_hier.retrieval.base import (
    Aggregate,
    Ranking,
    Retriever,
    _check_top_k,
    _query_matrix,
    aggregate_max_passage,
)
from rag_hier.retrieval.hit import Hit, QueryResult
from rag_hier.retrieval.params import DenseParams
from rag_hier.store.capabilities import DenseHitSearch, supports
from rag_hier.store.filters import compile_filter
from rag_hier.store.records import new_hit
from rag_hier.store.store import set_default_search

if TYPE_CHECKING:
    from rag_hier.store.contract import Filters, StoreBackend

__all__ = ["Aggregate", "DenseParams", "DenseRetriever", "aggregate_max_passage"]


class DenseRetriever(Retriever[np.ndarray]):
    """Dense retrieval over a store: each query's top passages by inner product with its vector.

    Example:
        >>> DenseRetriever(store).search("how do tides work?", top_k=5)  # doctest: +SKIP

    """

    name = "dense"
    Params = DenseParams

    def rank(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The top ``k`` passages by inner product."""
        scores, ids = self.store.search_dense(queries, k, allowed)
        out = []
        for srow, irow in zip(scores, ids, strict=True):
            if irow.shape[0] == 0 or irow[-1] >= 0:  # the index pads with -1 at the end only
                out.append(Ranking(irow, srow.astype(np.float64), exhausted=irow.shape[0] < k))
                continue
            keep = irow >= 0
            out.append(Ranking(irow[keep], srow[keep].astype(np.float64), exhausted=int(keep.sum()) < k))
        return out

    def _short_path(self, filters: Filters, aggregate: Aggregate) -> bool:
        """Whether a search takes the strategy's own path: unfiltered passages, ranked by this class."""
        return (
            aggregate == "passage"
            and type(self).rank is DenseRetriever.rank
            and (filters is None or compile_filter(filters) is None)
        )

    def search_vectors(
        self, vectors: np.ndarray, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[list[Hit]]:
        """:meth:`Retriever.search_vectors`; an unfiltered passage search goes from the index's ids to hits directly.

        The lean path, on a store with :class:`~rag_hier.store.capabilities.DenseHitSearch`: the vectors and
        ``top_k`` are checked once, each block of queries is one store call (the search and the hit rows of one
        generation), and the hits are built from the rows in one pass, with no per-query ranking or result objects.
        """
        store = self.store
        plain = type(self).prepare is Retriever.prepare and type(self).dense_vectors is Retriever.dense_vectors
        if not supports(store, DenseHitSearch) or not plain or not self._short_path(filters, aggregate):
            return super().search_vectors(vectors, top_k, filters, aggregate)
        search = store.search_dense_hits
        if isinstance(vectors, np.ndarray) and vectors.ndim == 2 and vectors.shape[0] == 0:
            return []
        q = _query_matrix(vectors)
        if type(top_k) is not int or top_k < 1:
            top_k = _check_top_k(top_k)
        dim = self.store.dimension
        if dim is not None and q.shape[1] != dim:
            raise ValueError(f"query vectors have {q.shape[1]} dimensions; the store holds {dim}-d vectors")
        if q.shape[0] <= base.READ_BLOCK_QUERIES:  # one block (a single query): no slicing
            scores, ids, rows = search(q, top_k)
            return _hit_lists(scores, ids, rows, q.shape[0], top_k)
        out: list[list[Hit]] = []
        for start in range(0, q.shape[0], base.READ_BLOCK_QUERIES):
            part = q[start : start + base.READ_BLOCK_QUERIES]
            scores, ids, rows = search(part, top_k)
            out.extend(_hit_lists(scores, ids, rows, len(part), top_k))
        return out

    def run_prepared(
        self,
        prepared: np.ndarray,
        n_queries: int,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
    ) -> list[QueryResult]:
        """:meth:`Retriever.run_prepared`; an unfiltered passage search is one store call (``DenseHitSearch``)."""
        store = self.store
        if not supports(store, DenseHitSearch) or not self._short_path(filters, aggregate):
            return super().run_prepared(prepared, n_queries, top_k, filters, aggregate)
        search = store.search_dense_hits
        # one store call: the search and the hit rows of one generation (in a read block: within its transaction),
        # READ_BLOCK_QUERIES queries at a time so that no read keeps a writer in another process waiting long
        top_k = _check_top_k(top_k)
        out: list[QueryResult] = []
        for start in range(0, max(n_queries, 1), base.READ_BLOCK_QUERIES):
            part = prepared[start : start + base.READ_BLOCK_QUERIES]
            scores, ids, rows = search(part, top_k)
            out.extend(QueryResult(hits, {}) for hits in _hit_lists(scores, ids, rows, len(part), top_k))
        return out


def _hit_lists(
    scores: np.ndarray, ids: np.ndarray, rows: Mapping[int, Any], n_queries: int, top_k: int
) -> list[list[Hit]]:
    """Hits from a dense search's ``(scores, ids)`` and the hit rows, without the general path's per-query objects.

    FAISS returns each row best first, so only rows with tied scores (or padding) need the shared tie rule.
    """
    if ids.shape[1] == 0:
        return [[] for _ in range(n_queries)]
    out = []
    get = rows.get
    for srow, irow in zip(scores.tolist(), ids.tolist(), strict=True):
        if min(irow) < 0 or any(map(le, srow, islice(srow, 1, None))):  # padding or a tie: the shared rule
            s, i = np.asarray(srow, np.float32), np.asarray(irow, np.int64)
            keep = i >= 0
            s, i = s[keep], i[keep]
            order = select_top_k(s, i, top_k)
            srow, irow = s[order].tolist(), i[order].tolist()
        hits: list[Hit] = []
        for rowid, score in zip(irow, srow, strict=True):
            row = get(rowid)
            if row is not None:  # else deleted meanwhile
                hits.append(new_hit(row, score, len(hits) + 1))
        out.append(hits)
    return out


def _store_search(store: StoreBackend, query: str | Sequence[str], top_k: int, filters: Filters) -> Any:
    """What :meth:`HierStore.search` runs."""
    retriever = DenseRetriever(store)
    if isinstance(query, str):
        return retriever.search(query, top_k=top_k, filters=filters)
    return retriever.search(list(query), top_k=top_k, filters=filters)


set_default_search(_store_search)
