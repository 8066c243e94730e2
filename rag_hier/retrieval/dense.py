"""DenseRetriever (strategy ``dense``): exact or approximate inner-product search over a store's passage index.

Filters are applied before the vector search (FAISS id selectors), so a filtered search returns ``top_k``
hits whenever that many passages match. ``Hit.scores`` is empty: the score is the inner product.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.retrieval.base import Aggregate, Ranking, Retriever, RetrieverParams, aggregate_max_passage
from rag_hier.store.store import set_default_search

if TYPE_CHECKING:
    from rag_hier.store.contract import Filters, StoreBackend

__all__ = ["Aggregate", "DenseParams", "DenseRetriever", "aggregate_max_passage"]


@dataclass(frozen=True)
class DenseParams(RetrieverParams):
    """The ``dense`` strategy has no parameters of its own (the index's own, e.g. ``nprobe``, live in the store)."""


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
            keep = irow >= 0
            out.append(Ranking(irow[keep], srow[keep].astype(np.float64), exhausted=int(keep.sum()) < k))
        return out


def _store_search(store: StoreBackend, query: str | Sequence[str], top_k: int, filters: Filters) -> Any:
    """What :meth:`HierStore.search` runs."""
    retriever = DenseRetriever(store)
    if isinstance(query, str):
        return retriever.search(query, top_k=top_k, filters=filters)
    return retriever.search(list(query), top_k=top_k, filters=filters)


set_default_search(_store_search)
