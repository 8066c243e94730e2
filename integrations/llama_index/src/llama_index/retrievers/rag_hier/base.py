"""HierarchicalRetriever: query text in, nodes of a :class:`RagHierVectorStore` ranked by DHR out."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery, VectorStoreQueryResult
from llama_index.vector_stores.rag_hier import RagHierVectorStore
from llama_index.vector_stores.rag_hier._filters import build_predicate
from llama_index.vector_stores.rag_hier._nodes import record_to_node

from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.retrieval.hierarchical import DEFAULT_K1, DEFAULT_LAMBDA
from rag_hier.retrieval.hierarchical import HierarchicalRetriever as DHRRetriever
from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

    from rag_hier.store.store import HierStore

logger = logging.getLogger(__name__)

__all__ = ["PARENT_KEY", "SCORES_KEY", "HierarchicalRetriever", "HierarchicalRetrieverMode"]

HierarchicalRetrieverMode = Literal["serial", "parallel", "flat"]
_MODES: tuple[str, ...] = ("serial", "parallel", "flat")
SCORES_KEY = "scores"
"""Node metadata key of ``{"passage", "document", "fused"}`` (excluded from the LLM and embedding text)."""
PARENT_KEY = "parent_document"
"""Node metadata key of ``{"id", "title", "title_path", "meta"}`` (excluded from the LLM and embedding text)."""


class HierarchicalRetriever(BaseRetriever):
    """Dense Hierarchical Retrieval (DHR) over a rag-hier store: the best documents first, then their nodes.

    Liu et al., *Dense Hierarchical Retrieval for Open-Domain Question Answering* (Findings of EMNLP 2021),
    as implemented by the engine's ``rag_hier.retrieval.HierarchicalRetriever``: the top-``k1`` documents
    are found in the store's document index, and only the nodes of those documents are scored, each with the
    fused score ``passage + lambda_ * document`` (``mode="serial"``). ``mode="parallel"`` scores every node
    with its document's score added; ``mode="flat"`` is the plain dense search of the vector store (this
    retriever's behaviour before DHR; it needs no document index).

    A document is a node's SOURCE (``node.ref_doc_id``: the LlamaIndex ``Document`` it was parsed from); a
    node without SOURCE is its own document (the document level then adds nothing). Stores built by the
    rag-hier engine or CLI keep their corpus documents (title, sections, metadata).

    Every returned node has ``score`` = the fused score, ``metadata["scores"] = {"passage", "document",
    "fused"}`` and ``metadata["parent_document"] = {"id", "title", "title_path", "meta"}``; both keys are
    excluded from the LLM and embedding text of the node, so prompts are unchanged (``mode="flat"`` returns
    the stored nodes as they are).

    The store needs a document index (extension ``"doc-index"``). Without one, retrieval raises a
    ``ValueError`` naming the fix, unless ``auto_document_index=True``: the retriever then builds it on first
    use (one pass over the stored vectors, no model run), and every later write to the store keeps it current.

    The query is embedded by, in this order: ``QueryBundle.embedding`` when the caller set it,
    ``embed_model`` when given, else the store's own encoder (a store created with ``model=...``).

    Args:
        vector_store: The store to search.
        similarity_top_k: Nodes to return.
        filters: Metadata filters applied before the search (nested ``MetadataFilters`` allowed); in the DHR
            modes only documents with a matching node are ranked.
        doc_ids: Search only inside these documents (SOURCE ids); ``None`` or empty: everywhere.
        embed_model: Embedding model for the query (the one the nodes were embedded with).
        k1: Documents kept by the first stage (``mode="serial"``); default 500 (see docs/dhr.md).
        lambda_: Weight of the document score in the fused score; default 0 (see docs/dhr.md).
        mode: ``"serial"`` (DHR), ``"parallel"`` or ``"flat"``.
        auto_document_index: Build the store's document index on first use when it has none.
        callback_manager: LlamaIndex callback manager.
        verbose: LlamaIndex verbosity flag.

    Raises:
        TypeError: ``vector_store`` is not a RagHierVectorStore.
        ValueError: ``similarity_top_k`` or ``k1`` < 1, ``lambda_`` not finite, or an unknown ``mode``.

    Example:
        >>> retriever = HierarchicalRetriever(store, embed_model=RagHierEmbedding(), k1=100)  # doctest: +SKIP
        >>> for hit in retriever.retrieve("how do tides work?"):  # doctest: +SKIP
        ...     print(hit.node.ref_doc_id, hit.score, hit.node.metadata["scores"])

    """

    def __init__(
        self,
        vector_store: RagHierVectorStore,
        *,
        similarity_top_k: int = 10,
        filters: MetadataFilters | None = None,
        doc_ids: list[str] | None = None,
        embed_model: BaseEmbedding | None = None,
        k1: int = DEFAULT_K1,
        lambda_: float = DEFAULT_LAMBDA,
        mode: HierarchicalRetrieverMode = "serial",
        auto_document_index: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(vector_store, RagHierVectorStore):
            raise TypeError(f"vector_store must be a RagHierVectorStore, got {type(vector_store).__name__}")
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be >= 1, got {similarity_top_k}")
        if isinstance(k1, bool) or not isinstance(k1, int) or k1 < 1:
            raise ValueError(f"k1 must be an integer >= 1, got {k1!r}")
        if isinstance(lambda_, bool) or not isinstance(lambda_, int | float) or not math.isfinite(lambda_):
            raise ValueError(f"lambda_ must be a finite number, got {lambda_!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.vector_store = vector_store
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.doc_ids = list(doc_ids) if doc_ids else None
        self.embed_model = embed_model
        self.k1 = k1
        self.lambda_ = float(lambda_)
        self.mode: HierarchicalRetrieverMode = mode
        self.auto_document_index = bool(auto_document_index)

    @classmethod
    def from_index(cls, index: VectorStoreIndex, **kwargs: Any) -> HierarchicalRetriever:
        """A retriever over the ``RagHierVectorStore`` of ``index``, embedding queries with its embed model."""
        kwargs.setdefault("embed_model", index._embed_model)
        kwargs.setdefault("callback_manager", index._callback_manager)
        return cls(index.vector_store, **kwargs)  # type: ignore[arg-type]

    # -- flat mode: the vector store's own dense query --------------------------------------------------
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

    # -- DHR modes ----------------------------------------------------------------------------------------
    def _document_index(self) -> DocumentIndex:
        """The store's document index, built here when missing and ``auto_document_index`` is set."""
        store = self.vector_store.client
        if not getattr(self.vector_store, "dense", True):
            raise ValueError(
                f"the store at {store.path} keeps no dense vectors (dense=False); hierarchical (DHR) retrieval "
                "needs them"
            )
        existing = store.extension(DocumentIndex.name)
        if isinstance(existing, DocumentIndex):
            return existing
        if existing is not None:
            raise ValueError(f"the {DocumentIndex.name!r} extension of {store.path} is not a DocumentIndex")
        if not self.auto_document_index:
            raise ValueError(
                f"the store at {store.path} has no document index, which hierarchical (DHR) retrieval needs. "
                "Pass auto_document_index=True to HierarchicalRetriever (it builds the index on first use; every "
                "later write keeps it current), or add it once with "
                "`vector_store.client.add_extension(rag_hier.store.extensions.doc_index.DocumentIndex())`, or index with "
                "`rag-hier index --hierarchical`; mode='flat' searches all nodes without it"
            )
        if store.read_only:
            raise ValueError(f"the store at {store.path} has no document index and is read-only")
        logger.info("adding a document index (DHR) to %s", store.path)
        ext = DocumentIndex()
        store.add_extension(ext)
        return ext

    def _predicate(self) -> Predicate | None:
        """Metadata filters and ``doc_ids`` as one predicate over passage records."""
        predicate = build_predicate(self.filters)
        doc_ids = set(self.doc_ids) if self.doc_ids else None
        if doc_ids is None:
            return predicate

        def restricted(record: Mapping[str, Any]) -> bool:
            return record["doc_id"] in doc_ids and (predicate is None or predicate(record))

        return restricted

    def _hierarchical(self, query_bundle: QueryBundle, embedding: list[float] | None) -> list[NodeWithScore]:
        vs = self.vector_store
        # the vector store's query embedding rules (the store's encoder for text; normalized for "cosine")
        vector = vs._query_vector(VectorStoreQuery(query_embedding=embedding, query_str=query_bundle.query_str))
        ext = self._document_index_locked()
        store: HierStore = vs.client
        doc_vector: np.ndarray | None = None
        if not ext.shares_encoder:  # a distinct document encoder embeds the query for the document level
            doc_vector = ext.encode_queries(store, [query_bundle.query_str])
        with vs._lock:
            retriever = DHRRetriever(store, k1=self.k1, lambda_=self.lambda_, mode=self.mode)  # type: ignore[arg-type]
            hits = retriever.search_vectors(
                vector, top_k=self.similarity_top_k, filters=self._predicate(), doc_vectors=doc_vector
            )[0]
            passages = {p.id: p for p in store.get_passages([h.passage_id for h in hits])}
            parents = {d: store.get_document(d) for d in dict.fromkeys(h.doc_id for h in hits)}
        out: list[NodeWithScore] = []
        for hit in hits:
            p = passages.get(hit.passage_id)
            if p is None:  # pragma: no cover - read under the same lock as the search
                continue
            node = record_to_node({"id": p.id, "doc_id": p.doc_id, "content": p.text, "meta": p.meta, "extra": p.extra})
            parent = parents.get(hit.doc_id) or {}
            node.metadata[SCORES_KEY] = dict(hit.scores)
            node.metadata[PARENT_KEY] = {
                "id": hit.doc_id,
                "title": parent.get("title", ""),
                "title_path": list(hit.title_path),
                "meta": dict(parent.get("meta") or {}),
            }
            for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                excluded.extend(k for k in (SCORES_KEY, PARENT_KEY) if k not in excluded)
            out.append(NodeWithScore(node=node, score=hit.score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.mode != "flat":
            self._document_index_locked()  # fail before embedding the query
        embedding = query_bundle.embedding
        if embedding is None and self.embed_model is not None:
            embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        if self.mode == "flat":
            return self._to_nodes(self.vector_store.query(self._query(query_bundle, embedding)))
        return self._hierarchical(query_bundle, embedding)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.mode != "flat":
            await asyncio.to_thread(self._document_index_locked)
        embedding = query_bundle.embedding
        if embedding is None and self.embed_model is not None:
            embedding = await self.embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)
        if self.mode == "flat":
            return self._to_nodes(await self.vector_store.aquery(self._query(query_bundle, embedding)))
        # the search blocks (FAISS, SQLite, maybe the store's encoder): run it in a worker thread
        return await asyncio.to_thread(self._hierarchical, query_bundle, embedding)

    def _document_index_locked(self) -> DocumentIndex:
        with self.vector_store._lock:
            return self._document_index()
