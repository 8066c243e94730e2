"""HierarchicalRetriever: Dense Hierarchical Retrieval (DHR) from a RagHierDocumentStore, with query text in."""

from __future__ import annotations

import math
from typing import Any, Literal

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval.hierarchical import DEFAULT_K1, DEFAULT_LAMBDA

__all__ = ["HierarchicalRetriever"]

HierarchicalRetrieverMode = Literal["serial", "parallel", "flat"]
_MODES: tuple[str, ...] = ("serial", "parallel", "flat")


@component
class HierarchicalRetriever:
    """Retrieve passages for a query text with Dense Hierarchical Retrieval (DHR): documents first, then passages.

    Liu et al., *Dense Hierarchical Retrieval for Open-Domain Question Answering* (Findings of EMNLP 2021),
    as implemented by the engine's ``rag_hier.retrieval.HierarchicalRetriever``: the store's model encodes
    the query, the top-``k1`` documents are found in the store's document index, and only the passages of
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
        k1: int = DEFAULT_K1,
        lambda_: float = DEFAULT_LAMBDA,
        mode: HierarchicalRetrieverMode = "serial",
        auto_document_index: bool = False,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search; it must have a model.
            filters: Filters applied to every query (see ``filter_policy``); in DHR modes they restrict
                passages, and only documents with a matching passage are ranked.
            top_k: The maximum number of passages to return; must be greater than 0.
            scale_score: Scale scores to [0, 1]: ``(s + 1) / 2`` when the store's model normalizes (cosine),
                else ``sigmoid(s / 100)`` (dot product). Applies to ``Document.score`` (the fused score;
                exactly in [0, 1] when ``lambda_`` is 0), never to ``meta["scores"]``.
            return_embedding: Return the passages' embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``:
                both apply.
            k1: Documents kept by the first stage (serial mode); default 500 (see docs/dhr.md).
            lambda_: Weight of the document score in the fused score; default 0 (see docs/dhr.md).
            mode: ``"serial"`` (DHR), ``"parallel"`` or ``"flat"`` (dense search of all passages).
            auto_document_index: Build the store's document index on first use when it has none.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: ``top_k`` or ``k1`` is not greater than 0, ``lambda_`` is not a finite number, or
                ``mode`` is unknown.

        """
        if not isinstance(document_store, RagHierDocumentStore):
            raise TypeError("document_store must be an instance of RagHierDocumentStore")
        if top_k <= 0:
            raise ValueError(f"top_k must be greater than 0, but got {top_k}")
        if isinstance(k1, bool) or not isinstance(k1, int) or k1 <= 0:
            raise ValueError(f"k1 must be an integer greater than 0, but got {k1!r}")
        if isinstance(lambda_, bool) or not isinstance(lambda_, int | float) or not math.isfinite(lambda_):
            raise ValueError(f"lambda_ must be a finite number, but got {lambda_!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
        self.document_store = document_store
        self.filters = filters
        self.top_k = top_k
        self.scale_score = scale_score
        self.return_embedding = return_embedding
        self.filter_policy = (
            filter_policy if isinstance(filter_policy, FilterPolicy) else FilterPolicy.from_str(filter_policy)
        )
        self.k1 = k1
        self.lambda_ = float(lambda_)
        self.mode: HierarchicalRetrieverMode = mode
        self.auto_document_index = bool(auto_document_index)

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__, "mode": self.mode}

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
            k1=self.k1,
            lambda_=self.lambda_,
            mode=self.mode,
            auto_document_index=self.auto_document_index,
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

    def _dhr_options(self) -> dict[str, Any]:
        return {
            "k1": self.k1,
            "lambda_": self.lambda_,
            "mode": self.mode,
            "auto_document_index": self.auto_document_index,
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
            ``{"documents": [...]}``, best first, with ``score`` (the fused score) and, in the DHR modes,
            ``meta["scores"]`` and ``meta["parent_document"]`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no model, or (DHR modes) no document index and
                ``auto_document_index`` is false.

        """
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        if self.mode == "flat":
            return {"documents": self.document_store.text_retrieval(query=query, **params)}
        return {"documents": self.document_store.hierarchical_retrieval(query=query, **params, **self._dhr_options())}

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
            ``{"documents": [...]}``, best first, as :meth:`run` returns them.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The store has no model, or (DHR modes) no document index and
                ``auto_document_index`` is false.

        """
        params = self._resolve(filters, top_k, scale_score, return_embedding)
        if self.mode == "flat":
            return {"documents": await self.document_store.text_retrieval_async(query=query, **params)}
        documents = await self.document_store.hierarchical_retrieval_async(query=query, **params, **self._dhr_options())
        return {"documents": documents}
