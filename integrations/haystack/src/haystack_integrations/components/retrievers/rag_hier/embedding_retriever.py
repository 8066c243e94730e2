"""RagHierEmbeddingRetriever: dense retrieval (the ``dense`` strategy), query embedding in."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierEmbeddingRetriever"]


@component
class RagHierEmbeddingRetriever(StrategyComponent):
    """Retrieve the documents whose embeddings have the largest inner product with the query embedding.

    Use it with a :class:`RagHierDocumentStore` whose documents were embedded by the same model as the
    query (e.g. ``RagHierDocumentEmbedder`` at indexing time and ``RagHierTextEmbedder`` at query time).
    Filters are applied before the vector search, so a filtered query returns ``top_k`` documents
    whenever that many match. Returned documents carry their metadata as written, including the parent
    ids (``__parent_id``, ``source_id``) that ``AutoMergingRetriever`` and ``SentenceWindowRetriever`` use.
    The preset of ``RagHierRetriever(strategy="dense")``.

    Usage example:
    ```python
    from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    retriever = RagHierEmbeddingRetriever(document_store=RagHierDocumentStore(path="./my-collection"))
    retriever.run(query_embedding=[0.1, 0.2, 0.3], top_k=5)["documents"]
    ```
    """

    def __init__(
        self,
        document_store: RagHierDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search.
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of documents to return; must be greater than 0.
            scale_score: Scale scores to [0, 1] by the store's similarity, as InMemoryDocumentStore does:
                ``(s + 1) / 2`` (cosine), ``sigmoid(s / 100)`` (dot product).
            return_embedding: Return the documents' embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``:
                both apply.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: ``top_k`` is not greater than 0.

        """
        self._setup(document_store, filters, top_k, return_embedding, filter_policy)
        self._use_strategy("dense", None, where="RagHierEmbeddingRetriever")
        self.scale_score = self._scale_score = scale_score

    def warm_up(self) -> None:
        """Open the document store (idempotent; the store's own model, if any, is not needed here)."""
        self.document_store.warm_up_strategy(self._strategy, self._params, models=False)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component, with its document store, to a dictionary."""
        return default_to_dict(
            self,
            document_store=self.document_store,
            filters=self.filters,
            top_k=self.top_k,
            scale_score=self.scale_score,
            return_embedding=self.return_embedding,
            filter_policy=self.filter_policy.value,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for a query embedding.

        Args:
            query_embedding: Embedding of the query.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query_embedding`` is empty.

        """
        if query_embedding is None:
            raise ValueError("query_embedding should be a non-empty list of floats.")
        return self._search(
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for a query embedding (the search runs in a worker thread).

        Args:
            query_embedding: Embedding of the query.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query_embedding`` is empty.

        """
        if query_embedding is None:
            raise ValueError("query_embedding should be a non-empty list of floats.")
        return await self._search_async(
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )
