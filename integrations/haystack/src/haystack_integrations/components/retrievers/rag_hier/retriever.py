"""RagHierRetriever: any strategy of the engine's registry as a Haystack retriever."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

__all__ = ["RagHierRetriever"]


@component
class RagHierRetriever(StrategyComponent):
    """Retrieve documents with any search strategy registered with rag-hier (``rag_hier.retrieval.registry``).

    ``strategy`` names the strategy — ``"dense"``, ``"hierarchical"`` (DHR), ``"tree"`` (HCE cluster tree),
    ``"svdr-beta"``, ``"svdr-beta-rerank"``, ``"svdr-full"``, ``"svdr-alpha"``, ``"svdr-lexical"``, ``"bm25"``,
    ``"sparse-embedding"``, ``"fusion"``, or one registered by a plugin — and ``strategy_params`` its
    parameters, checked against the strategy's parameters dataclass when the component is built (an unknown
    name, a wrong type or a value out of range raises ``ValueError`` naming the parameter). A strategy
    registered later works here with no change to this component.

    Each run takes what the strategy needs: ``query`` (text: SVDR and BM25 need it; dense strategies encode it
    with the store's model), ``query_embedding`` (dense strategies use it instead of encoding the text) or
    ``query_sparse_embedding`` (the ``sparse-embedding`` strategy). Filters are applied before the search.
    Returned Documents carry ``score`` and, when the strategy reports component scores (``hierarchical``:
    passage, document, fused; ``svdr-*``; ``fusion``: each component and fused), ``meta["scores"]``.

    Strategies that need a store extension (``hierarchical``: the document index, ``tree``: the cluster tree,
    β/lexical SVDR: the token index, ``bm25``: the BM25 index) raise a ``DocumentStoreError`` naming the fix
    when it is missing, unless ``auto_extensions=True``: the component then builds it on first use, and every
    later write keeps it current.

    Usage example:
    ```python
    from haystack_integrations.components.retrievers.rag_hier import RagHierRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection")
    retriever = RagHierRetriever(document_store=store, strategy="tree", strategy_params={"beam": 4},
                                 auto_extensions=True)
    retriever.run(query_embedding=[0.1, 0.2, 0.3], top_k=5)["documents"]
    ```
    """

    def __init__(
        self,
        document_store: RagHierDocumentStore,
        strategy: str = "dense",
        strategy_params: dict[str, Any] | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
        auto_extensions: bool = False,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search.
            strategy: A registered strategy name.
            strategy_params: The strategy's parameters by name (``None``: its defaults).
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of documents to return; must be greater than 0.
            scale_score: Scale scores to [0, 1] as InMemoryDocumentStore does: for strategies that rank dense
                vectors (dense, hierarchical, tree, ehi) by the store's similarity, ``(s + 1) / 2`` (cosine) or
                ``sigmoid(s / 100)`` (dot product); for ``bm25``, ``sigmoid(s / 8)``. Other strategies refuse it.
            return_embedding: Return the documents' dense embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``: both
                apply.
            auto_extensions: Build the store extensions the strategy needs when the store lacks them.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: Unknown strategy, a bad ``strategy_params`` entry (named in the message), ``top_k``
                not greater than 0, or ``scale_score`` with a strategy whose scores are neither inner products
                nor BM25 scores.

        """
        self._setup(document_store, filters, top_k, return_embedding, filter_policy)
        if strategy_params is not None and not isinstance(strategy_params, dict):
            raise ValueError(f"strategy_params must be a dict of parameters, got {type(strategy_params).__name__}")
        given = dict(strategy_params or {})
        params = self._use_strategy(
            strategy, given, where=f"RagHierRetriever(strategy={strategy!r}) strategy_params", scale_score=scale_score
        )
        self.strategy = strategy
        # what the user set, in its validated JSON form (so a saved pipeline reloads to the same dict)
        self.strategy_params = {k: v for k, v in params.to_dict().items() if k in given}
        self.scale_score = self._scale_score = bool(scale_score)
        self.auto_extensions = self._auto_extensions = bool(auto_extensions)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component, with its document store, to a dictionary."""
        return default_to_dict(
            self,
            document_store=self.document_store,
            strategy=self.strategy,
            strategy_params=self.strategy_params,
            filters=self.filters,
            top_k=self.top_k,
            scale_score=self.scale_score,
            return_embedding=self.return_embedding,
            filter_policy=self.filter_policy.value,
            auto_extensions=self.auto_extensions,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str | None = None,
        query_embedding: list[float] | None = None,
        query_sparse_embedding: SparseEmbedding | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for a query.

        Args:
            query: The query text.
            query_embedding: The query's dense vector.
            query_sparse_embedding: The query's sparse vector.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative, or the strategy gets no query input it can use.
            DocumentStoreError: The store cannot run the strategy (no model for query text, a missing
                extension without ``auto_extensions``, ...).

        """
        return self._search(
            query=query,
            query_embedding=query_embedding,
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str | None = None,
        query_embedding: list[float] | None = None,
        query_sparse_embedding: SparseEmbedding | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for a query (the search runs in a worker thread).

        Args:
            query: The query text.
            query_embedding: The query's dense vector.
            query_sparse_embedding: The query's sparse vector.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, as :meth:`run` returns them.

        """
        return await self._search_async(
            query=query,
            query_embedding=query_embedding,
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )
