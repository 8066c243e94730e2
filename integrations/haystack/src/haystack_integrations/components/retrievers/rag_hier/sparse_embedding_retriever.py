"""RagHierSparseEmbeddingRetriever: search the sparse embeddings stored in a RagHierDocumentStore."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierSparseEmbeddingRetriever"]


@component
class RagHierSparseEmbeddingRetriever(StrategyComponent):
    """Retrieve the documents whose ``sparse_embedding`` has the largest inner product with the query's.

    The counterpart of Qdrant's and Pinecone's sparse embedding retrievers, in-process: documents written
    with a ``sparse_embedding`` (from any sparse embedder: SPLADE, BM25-style, SVDR's vocabulary encoder)
    are indexed by the store; this component takes the query's sparse embedding from the matching text
    embedder. Scores are exact inner products (higher is better); documents without a sparse embedding or
    sharing no index with the query are not returned. Filters are applied before the search. The preset of
    ``RagHierRetriever(strategy="sparse-embedding")``.

    Usage example:
    ```python
    from haystack import Document
    from haystack.dataclasses import SparseEmbedding
    from haystack_integrations.components.retrievers.rag_hier import RagHierSparseEmbeddingRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./sparse-collection")
    store.write_documents([Document(content="tides", sparse_embedding=SparseEmbedding(indices=[7], values=[1.5]))])
    retriever = RagHierSparseEmbeddingRetriever(document_store=store)
    retriever.run(query_sparse_embedding=SparseEmbedding(indices=[7], values=[1.0]))["documents"]
    ```
    """

    def __init__(
        self,
        document_store: RagHierDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search.
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of documents to return; must be greater than 0.
            return_embedding: Return the documents' dense embeddings (their sparse embeddings always come back).
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``: both
                apply.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: ``top_k`` is not greater than 0.

        """
        self._setup(document_store, filters, top_k, return_embedding, filter_policy)
        self._use_strategy("sparse-embedding", None, where="RagHierSparseEmbeddingRetriever")

    def warm_up(self) -> None:
        """Open the document store (idempotent; no model is needed)."""
        self.document_store.warm_up_strategy(self._strategy, self._params, models=False)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component, with its document store, to a dictionary."""
        return default_to_dict(
            self,
            document_store=self.document_store,
            filters=self.filters,
            top_k=self.top_k,
            return_embedding=self.return_embedding,
            filter_policy=self.filter_policy.value,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for a query's sparse embedding.

        Args:
            query_sparse_embedding: Sparse embedding of the query.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query_sparse_embedding`` is not a SparseEmbedding.

        """
        if not isinstance(query_sparse_embedding, SparseEmbedding):
            raise ValueError(
                f"query_sparse_embedding must be a SparseEmbedding, got {type(query_sparse_embedding).__name__}"
            )
        return self._search(
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            return_embedding=return_embedding,
        )

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for a query's sparse embedding (in a worker thread).

        Args:
            query_sparse_embedding: Sparse embedding of the query.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query_sparse_embedding`` is not a SparseEmbedding.

        """
        if not isinstance(query_sparse_embedding, SparseEmbedding):
            raise ValueError(
                f"query_sparse_embedding must be a SparseEmbedding, got {type(query_sparse_embedding).__name__}"
            )
        return await self._search_async(
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            return_embedding=return_embedding,
        )
