"""HierarchicalRetriever: query text in, ranked nodes of a :class:`RagHierVectorStore` out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery, VectorStoreQueryResult
from llama_index.vector_stores.rag_hier import RagHierVectorStore

if TYPE_CHECKING:
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

logger = logging.getLogger(__name__)

__all__ = ["HierarchicalRetriever"]


class HierarchicalRetriever(BaseRetriever):
    """Retrieve passages (nodes) of a rag-hier store for a query, each carrying its parent document.

    Today the search is flat: the dense passage search of the store, with the store's filters applied
    before it. The DHR strategy (documents first, then passages inside the best documents) will take
    its place behind the same interface. Every returned node keeps its SOURCE relationship, so
    ``node.ref_doc_id`` is the id of its parent document (a node stored without SOURCE is its own
    document).

    The query is embedded by, in this order: ``QueryBundle.embedding`` when the caller set it,
    ``embed_model`` when given, else the store's own encoder (a store created with ``model=...``).

    Args:
        vector_store: The store to search.
        similarity_top_k: Nodes to return.
        filters: Metadata filters applied before the search (nested ``MetadataFilters`` allowed).
        doc_ids: Search only inside these documents (SOURCE ids); ``None`` or empty: everywhere.
        embed_model: Embedding model for the query (the one the nodes were embedded with).
        callback_manager: LlamaIndex callback manager.
        verbose: LlamaIndex verbosity flag.

    Example:
        >>> retriever = HierarchicalRetriever(store, embed_model=RagHierEmbedding())  # doctest: +SKIP
        >>> for hit in retriever.retrieve("how do tides work?"):  # doctest: +SKIP
        ...     print(hit.node.ref_doc_id, hit.score)

    """

    def __init__(
        self,
        vector_store: RagHierVectorStore,
        *,
        similarity_top_k: int = 10,
        filters: MetadataFilters | None = None,
        doc_ids: list[str] | None = None,
        embed_model: BaseEmbedding | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(vector_store, RagHierVectorStore):
            raise TypeError(f"vector_store must be a RagHierVectorStore, got {type(vector_store).__name__}")
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be >= 1, got {similarity_top_k}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.vector_store = vector_store
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.doc_ids = list(doc_ids) if doc_ids else None
        self.embed_model = embed_model

    @classmethod
    def from_index(cls, index: VectorStoreIndex, **kwargs: Any) -> HierarchicalRetriever:
        """A retriever over the ``RagHierVectorStore`` of ``index``, embedding queries with its embed model."""
        kwargs.setdefault("embed_model", index._embed_model)
        kwargs.setdefault("callback_manager", index._callback_manager)
        return cls(index.vector_store, **kwargs)  # type: ignore[arg-type]

    def _query(self, query_bundle: QueryBundle, embedding: list[float] | None) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_embedding=embedding,
            query_str=query_bundle.query_str,
            similarity_top_k=self.similarity_top_k,
            filters=self.filters,
            doc_ids=self.doc_ids,
        )

    @staticmethod
    def _to_nodes(result: VectorStoreQueryResult) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=node, score=score)
            for node, score in zip(result.nodes or [], result.similarities or [], strict=True)
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        embedding = query_bundle.embedding
        if embedding is None and self.embed_model is not None:
            embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return self._to_nodes(self.vector_store.query(self._query(query_bundle, embedding)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        embedding = query_bundle.embedding
        if embedding is None and self.embed_model is not None:
            embedding = await self.embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)
        return self._to_nodes(await self.vector_store.aquery(self._query(query_bundle, embedding)))
