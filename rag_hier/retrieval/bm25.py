"""BM25Retriever (strategy ``bm25``): Okapi BM25, Lucene's variant, over the store's ``bm25`` extension.

``score(q, d) = Σ_{t ∈ q} ln(1 + (N − df + 0.5) / (df + 0.5)) · tf / (tf + k1 · (1 − b + b · |d| / avgdl))`` —
the scores of Lucene ≥ 8 and of bm25s' ``BM25(method="lucene")`` (tested equal), with bm25s's tokenization
(English stopwords, Snowball stemmer). ``N``, ``avgdl`` and the document frequencies are those of every passage
the store holds at the searched generation (filters restrict which passages are returned, not the statistics,
as in Lucene); ``k1`` and ``b`` are query-time parameters. Passages sharing no term with the query are not
returned. No model is needed; the query text is required. ``Hit.scores`` is empty.

The per-term scores are derived once per committed state and ``(k1, b)`` (cached in the extension); a query
then reads only its terms' postings. On the Milvus backend the extension is a file of the collection, loaded
into the client and scored there, like the HCE tree.

Example:
    >>> build_retriever("bm25", store, k1=1.2, b=0.75).search("what pulls the tides?", top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_hier.retrieval.base import Queries, Ranking, Retriever
from rag_hier.retrieval.params import BM25Params
from rag_hier.store.extensions.bm25 import BM25Extension

__all__ = ["BM25Params", "BM25Retriever"]

TermQuery = tuple[np.ndarray, np.ndarray]
"""A query's ``(term hashes, counts)``."""


class BM25Retriever(Retriever[list[TermQuery]]):
    """BM25 search over the store's ``bm25`` extension (see the module docstring)."""

    name = "bm25"
    Params = BM25Params
    params: BM25Params
    over_vectors = False

    @property
    def uses_query_vectors(self) -> bool:
        """Searches with the query text only."""
        return False

    def _extension(self) -> BM25Extension:
        return BM25Extension.of(self.store)

    def warm_up(self) -> None:
        """Check that this machine tokenizes as the index was built, and derive the per-term scores now."""
        ext = self._extension()
        ext.tokenizer.check()
        with self.store.reading():
            ext.index.search([], 1, k1=self.params.k1, b=self.params.b)

    def prepare(self, queries: Queries) -> list[TermQuery]:
        """The terms (and how often each occurs) of each query text."""
        if queries.texts is None:
            raise ValueError("bm25 search needs the query text")
        return self._extension().index.queries(list(queries.texts))

    def select(self, queries: list[TermQuery], rows: Sequence[int]) -> list[TermQuery]:
        """The queries at ``rows``."""
        return [queries[i] for i in rows]

    def rank(
        self, queries: list[TermQuery], k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The top ``k`` passages by BM25 among ``allowed`` (passages sharing no term with a query are left out)."""
        index = self._extension().index
        found = index.search(queries, k, k1=self.params.k1, b=self.params.b, allowed_ids=allowed)
        return [
            Ranking(ids, scores, stats={"postings": float(postings)}, exhausted=ids.size < k)
            for ids, scores, postings in found
        ]
