"""RagHierSparseEmbeddingRetriever: search the sparse embeddings stored in a RagHierDocumentStore."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierSparseEmbeddingRetriever"]


@component
class RagHierSparseEmbeddingRetriever:
    """Retrieve the documents whose ``sparse_embedding`` has the largest inner product with the query's.

    The counterpart of Qdrant's and Pinecone's sparse embedding retrievers, in-process: documents written
    with a ``sparse_embedding`` (from any sparse embedder: SPLADE, BM25-style, SVDR's vocabulary encoder)
    are indexed by the store; this component takes the query's sparse embedding from the matching text
    embedder. Scores are exact inner products (higher is better); documents without a sparse embedding or
    sharing no index with the query are not returned. Filters are applied before the search.

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
        if not isinstance(document_store, RagHierDocumentStore):
            raise TypeError("document_store must be an instance of RagHierDocumentStore")
        if top_k <= 0:
            raise ValueError(f"top_k must be greater than 0, but got {top_k}")
        self.document_store = document_store
        self.filters = filters
        self.top_k = top_k
        self.return_embedding = return_embedding
        self.filter_policy = (
            filter_policy if isinstance(filter_policy, FilterPolicy) else FilterPolicy.from_str(filter_policy)
        )

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__}

    def warm_up(self) -> None:
        """Open the document store (idempotent; no model is needed)."""
        _ = self.document_store.hier_store

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierSparseEmbeddingRetriever:
        """Deserialize the component from a dictionary (``data`` is not modified)."""
        init_params = dict(data.get("init_parameters", {}))
        if "filter_policy" in init_params:
            init_params["filter_policy"] = FilterPolicy.from_str(init_params["filter_policy"])
        return default_from_dict(cls, {**data, "init_parameters": init_params})

    def _resolve(
        self, filters: dict[str, Any] | None, top_k: int | None, return_embedding: bool | None
    ) -> dict[str, Any]:
        top_k = self.top_k if top_k is None else top_k
        if top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        return {
            "filters": apply_filter_policy(self.filter_policy, self.filters, filters),
            "top_k": top_k,
            "return_embedding": self.return_embedding if return_embedding is None else return_embedding,
        }

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
        params = self._resolve(filters, top_k, return_embedding)
        docs = self.document_store.sparse_embedding_retrieval(query_sparse_embedding=query_sparse_embedding, **params)
        return {"documents": docs}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for a query's sparse embedding (on the store's worker thread).

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
        params = self._resolve(filters, top_k, return_embedding)
        docs = await self.document_store.sparse_embedding_retrieval_async(
            query_sparse_embedding=query_sparse_embedding, **params
        )
        return {"documents": docs}
