"""HierarchicalRetriever: retrieval from a RagHierDocumentStore with query text in, encoded by the store's model."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["HierarchicalRetriever"]


@component
class HierarchicalRetriever:
    """Retrieve passages for a query text; the document store's own model encodes the query.

    The store must have a model (``RagHierDocumentStore(path=..., model=...)``, or one recorded in the
    store directory), so no text embedder is needed in the query pipeline. This version searches all
    passages (flat dense search, exact pre-filtering); the document-then-passage search of Dense
    Hierarchical Retrieval (DHR) builds on it. Returned passages carry their parent ids in ``meta``
    (``source_id``/``split_id``, or ``__parent_id`` for hierarchically split documents), so
    ``SentenceWindowRetriever`` and ``AutoMergingRetriever`` work after it.

    Usage example:
    ```python
    from haystack_integrations.components.retrievers.rag_hier import HierarchicalRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection", model="sentence-transformers/all-MiniLM-L6-v2")
    retriever = HierarchicalRetriever(document_store=store, top_k=5)
    retriever.run(query="How do tides work?")["documents"]
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
            document_store: The RagHierDocumentStore to search; it must have a model.
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of passages to return; must be greater than 0.
            scale_score: Scale scores to [0, 1]: ``(s + 1) / 2`` when the store's model normalizes
                (cosine), else ``sigmoid(s / 100)`` (dot product).
            return_embedding: Return the passages' embeddings.
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
        """Open the store and load its model (idempotent; cheap after the first call)."""
        self.document_store.warm_up()

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
    def from_dict(cls, data: dict[str, Any]) -> HierarchicalRetriever:
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
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve passages for a query text.

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of passages to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no model.

        """
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        return {"documents": self.document_store.text_retrieval(query=query, **params)}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve passages (encoding and search run on the store's worker thread).

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of passages to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no model.

        """
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        return {"documents": await self.document_store.text_retrieval_async(query=query, **params)}
