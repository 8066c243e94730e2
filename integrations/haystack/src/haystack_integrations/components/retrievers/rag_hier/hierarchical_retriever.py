"""HierarchicalRetriever: Dense Hierarchical Retrieval (DHR) from a RagHierDocumentStore, query text or embedding in."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

from haystack import Document, component, default_to_dict
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval.hierarchical import HierarchicalMode, HierarchicalParams

__all__ = ["HierarchicalRetriever"]

HierarchicalRetrieverMode = Literal["serial", "parallel", "flat"]
_MODES: tuple[str, ...] = (*get_args(HierarchicalMode), "flat")
_DHR = {f.name: f.default for f in dataclasses.fields(HierarchicalParams)}
"""The ``hierarchical`` strategy's defaults (k1, lambda_, mode): this component's defaults."""


@component
class HierarchicalRetriever(StrategyComponent):
    """Retrieve passages for a query text with Dense Hierarchical Retrieval (DHR): documents first, then passages.

    Liu et al., *Dense Hierarchical Retrieval for Open-Domain Question Answering* (Findings of EMNLP 2021),
    as implemented by the engine's ``rag_hier.retrieval.HierarchicalRetriever`` (the ``hierarchical``
    strategy; this component is the preset of ``RagHierRetriever(strategy="hierarchical")`` that also adds the
    parent document): the query is encoded by the store's model, or comes as ``query_embedding`` from the
    embedder that embedded the documents (a store filled by ``SentenceTransformersDocumentEmbedder`` has no
    model of its own); the top-``k1`` documents are found in the store's document index, and only the passages of
    those documents are scored, each with the fused score ``passage + lambda_ * document`` (``mode=
    "serial"``). ``mode="parallel"`` scores every passage with its document's score added; ``mode="flat"``
    is the plain dense search over all passages (this component's behaviour before DHR, needing no
    document index).

    Documents and passages: each Haystack Document in the store is a passage; passages are grouped into
    documents by ``meta["__parent_id"]`` (HierarchicalDocumentSplitter), else ``meta["source_id"]``
    (DocumentSplitter), else each Document is its own document (then the document level adds nothing:
    the document vector is the passage vector). Stores filled by ``write_corpus`` or ``rag-hier index``
    keep the corpus documents (title, sections, metadata).

    Every returned Document has ``score`` = the fused score, ``meta["scores"] = {"passage": ...,
    "document": ..., "fused": ...}`` and ``meta["parent_document"] = {"id", "title", "title_path",
    "meta"}`` (``mode="flat"`` returns the stored Documents with ``score`` only). Returned passages keep
    their parent ids in ``meta`` (``source_id``/``split_id``, or ``__parent_id``), so
    ``SentenceWindowRetriever`` and ``AutoMergingRetriever`` work after it.

    The store needs a document index (``doc-index`` extension). Without one, the first run raises a
    ``DocumentStoreError`` naming the fix, unless ``auto_document_index=True``: the retriever then builds
    it on first use (one pass over the stored passage vectors, no model run), and every later write keeps it
    current.

    Usage example:
    ```python
    from haystack_integrations.components.retrievers.rag_hier import HierarchicalRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection", model="sentence-transformers/all-MiniLM-L6-v2")
    retriever = HierarchicalRetriever(document_store=store, top_k=5, k1=100, auto_document_index=True)
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
        k1: int = _DHR["k1"],
        lambda_: float = _DHR["lambda_"],
        mode: HierarchicalRetrieverMode = _DHR["mode"],
        auto_document_index: bool = False,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search (with a model, or give ``query_embedding``).
            filters: Filters applied to every query (see ``filter_policy``); in DHR modes they restrict
                passages, and only documents with a matching passage are ranked.
            top_k: The maximum number of passages to return; must be greater than 0.
            scale_score: Scale scores to [0, 1] by the store's recorded similarity, as InMemoryDocumentStore
                does: ``(s + 1) / 2`` (cosine) or ``sigmoid(s / 100)`` (dot product). Applies to
                ``Document.score`` (the fused score; exactly in [0, 1] when ``lambda_`` is 0), never to
                ``meta["scores"]``.
            return_embedding: Return the passages' embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``:
                both apply.
            k1: Documents kept by the first stage (serial mode); default: the ``hierarchical`` strategy's
                (500, see docs/dhr.md).
            lambda_: Weight of the document score in the fused score; default: the strategy's (0, see
                docs/dhr.md).
            mode: ``"serial"`` (DHR), ``"parallel"`` or ``"flat"`` (dense search of all passages).
            auto_document_index: Build the store's document index on first use when it has none.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: ``top_k`` or ``k1`` is not greater than 0, ``lambda_`` is not a finite number, or
                ``mode`` is unknown.

        """
        self._setup(document_store, filters, top_k, return_embedding, filter_policy)
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
        # k1 and lambda_ are checked by the strategy's parameters (in "flat" mode too, for a later switch)
        dhr = self._use_strategy(
            "hierarchical",
            {"k1": k1, "lambda_": lambda_, **({} if mode == "flat" else {"mode": mode})},
            where="HierarchicalRetriever",
        )
        if mode == "flat":
            self._use_strategy("dense", None, where="HierarchicalRetriever(mode='flat')")
        else:
            self._parent_documents = True
        self.k1 = dhr.k1  # type: ignore[attr-defined]
        self.lambda_ = dhr.lambda_  # type: ignore[attr-defined]
        self.mode: HierarchicalRetrieverMode = mode
        self.scale_score = self._scale_score = scale_score
        self.auto_document_index = self._auto_extensions = bool(auto_document_index)
        self._auto_option = "auto_document_index=True"

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__, "mode": self.mode}

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
            k1=self.k1,
            lambda_=self.lambda_,
            mode=self.mode,
            auto_document_index=self.auto_document_index,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
        query_embedding: list[float] | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve passages for a query.

        Args:
            query: The query text (encoded by the store's model unless ``query_embedding`` is given).
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of passages to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.
            query_embedding: The query's vector, from the embedder that embedded the documents (needed
                when the store has no model).

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` (the fused score) and, in the DHR modes,
            ``meta["scores"]`` and ``meta["parent_document"]`` set.

        Raises:
            ValueError: ``top_k`` is negative, ``query`` is empty, or neither input is given.
            DocumentStoreError: Neither a query embedding nor a model to encode the query, or (DHR modes)
                no document index and ``auto_document_index`` is false.

        """
        return self._search(
            query=query,
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
        query_embedding: list[float] | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve passages (encoding and search run in a worker thread).

        Args:
            query: The query text (encoded by the store's model unless ``query_embedding`` is given).
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of passages to return; 0 returns none.
            scale_score: Override the init ``scale_score``.
            return_embedding: Override the init ``return_embedding``.
            query_embedding: The query's vector, from the embedder that embedded the documents.

        Returns:
            ``{"documents": [...]}``, best first, as :meth:`run` returns them.

        """
        return await self._search_async(
            query=query,
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )
