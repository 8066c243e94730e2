"""SparseEmbeddingRetriever (strategy ``sparse-embedding``): a caller's sparse query vector against stored ones.

Passages written with a sparse embedding (a framework's ``sparse_embedding``: SPLADE, BM25-style or SVDR
vectors as ``{"indices", "values"}``) are mirrored by the store's ``sparse-embeddings`` extension; this
strategy scores them by exact inner product with the query's sparse vector (``Queries(sparse=[(indices,
values)])``). Passages without a sparse embedding, and those sharing no index with the query (score 0), are
never returned, as in sparse vector databases. ``Hit.scores`` is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.retrieval.base import Queries, Ranking, Retriever
from rag_hier.retrieval.params import SparseEmbeddingParams
from rag_hier.store.candidates import search_sparse_rows
from rag_hier.store.extensions.sparse_embeddings import SparseEmbeddingExtension, parse_sparse_embedding

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

__all__ = ["SparseEmbeddingParams", "SparseEmbeddingRetriever"]

SparseQuery = tuple[Sequence[int], Sequence[float]]


class SparseEmbeddingRetriever(Retriever[list[SparseQuery]]):
    """Exact sparse inner-product search over the store's ``sparse-embeddings`` extension."""

    name = "sparse-embedding"
    Params = SparseEmbeddingParams
    over_vectors = False

    @property
    def uses_query_vectors(self) -> bool:
        """Searches with sparse query vectors only."""
        return False

    def prepare(self, queries: Queries) -> list[SparseQuery]:
        """The sparse query vectors (required)."""
        if queries.sparse is None:
            raise ValueError("sparse-embedding search needs a sparse query vector per query (Queries(sparse=...))")
        return list(queries.sparse)

    def select(self, queries: list[SparseQuery], rows: Sequence[int]) -> list[SparseQuery]:
        """The queries at ``rows``."""
        return [queries[i] for i in rows]

    def rank(
        self, queries: list[SparseQuery], k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The top ``k`` passages by sparse inner product (none when the store keeps no sparse embeddings)."""
        ext = self.store.extension(SparseEmbeddingExtension.name)
        if not isinstance(ext, SparseEmbeddingExtension):
            return [Ranking.empty() for _ in queries]

        def here() -> tuple[np.ndarray, np.ndarray]:  # the extension's index in this process, one query at a time
            scores = np.full((len(queries), k), -np.inf, np.float64)
            ids = np.full((len(queries), k), -1, np.int64)
            for r, (indices, values) in enumerate(queries):
                found_scores, rowids = ext.search(indices, values, k, allowed_ids=allowed)
                scores[r, : rowids.size], ids[r, : rowids.size] = found_scores, rowids
            return scores, ids

        scores, ids = search_sparse_rows(
            self.store, ext.name, k, allowed, queries=lambda: _query_rows(queries), here=here
        )
        out = []
        for srow, irow in zip(scores, ids, strict=True):
            keep = irow >= 0
            out.append(Ranking(irow[keep], srow[keep].astype(np.float64), exhausted=int(keep.sum()) < k))
        return out


def _query_rows(queries: list[SparseQuery]) -> sp.csr_matrix:
    """The sparse queries as the rows of one CSR matrix (checked as stored embeddings are)."""
    parsed = [parse_sparse_embedding({"indices": list(i), "values": list(v)}, "query") for i, v in queries]
    width = max([int(i.max()) + 1 for i, _ in parsed if i.size] or [1])
    return sp.vstack(
        [sp.csr_matrix((v, (np.zeros(i.size, np.int64), i)), shape=(1, width)) for i, v in parsed],
        format="csr",
    )
