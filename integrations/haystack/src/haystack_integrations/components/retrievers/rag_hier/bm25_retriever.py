"""RagHierBM25Retriever: BM25 keyword search (the ``bm25`` strategy) over a RagHierDocumentStore."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierBM25Retriever"]


@component
class RagHierBM25Retriever(StrategyComponent):
    """Retrieve the documents that BM25 ranks highest for a query: keyword search, no model.

    The counterpart of Haystack's ``InMemoryBM25Retriever`` (same parameters and ``run`` / ``run_async``
    inputs) over a :class:`RagHierDocumentStore`'s BM25 index, the store extension ``bm25``: the term
    frequencies of every document, kept current by every write. Scores are Lucene's BM25 (Elasticsearch,
    OpenSearch; equal to bm25s' ``BM25(method="lucene")``), on bm25s's tokenization (lowercase words of two or
    more characters, English stopwords removed, Snowball-stemmed). Documents sharing no term with the query are
    not returned. Filters are applied before the search, so a filtered query returns ``top_k`` documents
    whenever that many match; they restrict which documents are returned, not BM25's statistics (``N``,
    ``avgdl``, document frequencies are those of every stored document, as with a Lucene filter).

    The store needs the index: ``auto_extensions=True`` builds it on first use (tokenizing every stored
    document once); otherwise a run on a store without one raises ``DocumentStoreError`` saying how to add it.
    The preset of ``RagHierRetriever(strategy="bm25", strategy_params={"k1": ..., "b": ...})``.

    Usage example:
    ```python
    from haystack import Document
    from haystack_integrations.components.retrievers.rag_hier import RagHierBM25Retriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection", dense=False)
    store.write_documents([Document(content="Python is a popular programming language"),
                           Document(content="python ist eine beliebte Programmiersprache")])
    retriever = RagHierBM25Retriever(document_store=store, auto_extensions=True)
    retriever.run(query="Programmiersprache")["documents"]
    ```
    """

    def __init__(
        self,
        document_store: RagHierDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
        auto_extensions: bool = False,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search.
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of documents to return; must be greater than 0.
            scale_score: Scale scores to [0, 1] with ``sigmoid(score / 8)``, as ``InMemoryBM25Retriever``
                does (and Haystack's Elasticsearch and OpenSearch BM25 retrievers, whose raw scores are these).
                ``False``: the raw BM25 scores.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``: both
                apply.
            auto_extensions: Build the store's BM25 index on first use when it has none.
            k1: BM25's term-frequency saturation (>= 0). A query-time parameter: the index needs no rebuild.
            b: BM25's length normalisation (0: none, 1: full). A query-time parameter.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: ``top_k`` is not greater than 0, or ``k1`` / ``b`` is out of range.

        """
        self._setup(document_store, filters, top_k, False, filter_policy)
        params = self._use_strategy("bm25", {"k1": k1, "b": b}, where="RagHierBM25Retriever")
        self.k1: float = params.k1  # type: ignore[attr-defined]
        self.b: float = params.b  # type: ignore[attr-defined]
        self.scale_score = self._scale_score = bool(scale_score)
        self.auto_extensions = self._auto_extensions = bool(auto_extensions)
        self._component_scores = False  # Documents as written, the BM25 score in Document.score

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component, with its document store, to a dictionary."""
        return default_to_dict(
            self,
            document_store=self.document_store,
            filters=self.filters,
            top_k=self.top_k,
            scale_score=self.scale_score,
            filter_policy=self.filter_policy.value,
            auto_extensions=self.auto_extensions,
            k1=self.k1,
            b=self.b,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for query text.

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set (ties in insertion order).

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no BM25 index and ``auto_extensions`` is off (the message says how
                to add one).

        """
        return self._search(query=query, filters=filters, top_k=top_k, scale_score=scale_score, return_embedding=None)

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for query text (the search runs in a worker thread).

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.

        Returns:
            ``{"documents": [...]}``, best first, as :meth:`run` returns them.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no BM25 index and ``auto_extensions`` is off.

        """
        return await self._search_async(
            query=query, filters=filters, top_k=top_k, scale_score=scale_score, return_embedding=None
        )
