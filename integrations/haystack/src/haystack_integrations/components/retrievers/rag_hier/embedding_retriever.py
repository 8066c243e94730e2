"""RagHierEmbeddingRetriever: dense retrieval from a RagHierDocumentStore, query embedding in."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierEmbeddingRetriever"]


@component
class RagHierEmbeddingRetriever:
    """Retrieve the documents whose embeddings have the largest inner product with the query embedding.

    Use it with a :class:`RagHierDocumentStore` whose documents were embedded by the same model as the
    query (e.g. ``RagHierDocumentEmbedder`` at indexing time and ``RagHierTextEmbedder`` at query time).
    Filters are applied before the vector search, so a filtered query returns ``top_k`` documents
    whenever that many match. Returned documents carry their metadata as written, including the parent
    ids (``__parent_id``, ``source_id``) that ``AutoMergingRetriever`` and ``SentenceWindowRetriever`` use.

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
            scale_score: Scale scores to [0, 1]: ``(s + 1) / 2`` when the store's model normalizes
                (cosine), else ``sigmoid(s / 100)`` (dot product).
            return_embedding: Return the documents' embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``:
                both apply.

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
        self.scale_score = scale_score
        self.return_embedding = return_embedding
        self.filter_policy = (
            filter_policy if isinstance(filter_policy, FilterPolicy) else FilterPolicy.from_str(filter_policy)
        )

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__}

    def warm_up(self) -> None:
        """Open the document store (idempotent; the store's own model, if any, is not needed here)."""
        _ = self.document_store.hier_store

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierEmbeddingRetriever:
        """Deserialize the component from a dictionary (``data`` is not modified)."""
        init_params = dict(data.get("init_parameters", {}))
        if "filter_policy" in init_params:
            init_params["filter_policy"] = FilterPolicy.from_str(init_params["filter_policy"])
        return default_from_dict(cls, {**data, "init_parameters": init_params})

    def _resolve(
        self, filters: dict[str, Any] | None, top_k: int | None, scale_score: bool | None, return_embedding: bool | None
    ) -> dict[str, Any]:
        top_k = self.top_k if top_k is None else top_k
        if top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        return {
            "filters": apply_filter_policy(self.filter_policy, self.filters, filters),
            "top_k": top_k,
            "scale_score": self.scale_score if scale_score is None else scale_score,
            "return_embedding": self.return_embedding if return_embedding is None else return_embedding,
        }

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
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        return {"documents": self.document_store.embedding_retrieval(query_embedding=query_embedding, **params)}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for a query embedding (the search runs on the store's worker thread).

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
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        docs = await self.document_store.embedding_retrieval_async(query_embedding=query_embedding, **params)
        return {"documents": docs}
