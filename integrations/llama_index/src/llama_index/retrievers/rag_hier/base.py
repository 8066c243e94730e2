"""LlamaIndex retrievers over a :class:`RagHierVectorStore`: any registered strategy, and the DHR preset.

:class:`RagHierRetriever` runs any strategy of the engine's registry (``rag_hier.retrieval.registry``) by
name: ``dense``, ``hierarchical`` (DHR), ``tree`` (HCE), ``svdr-*``, ``fusion``, and whatever a plugin
registers, with no change here. Its keyword arguments are checked against the strategy's parameters
dataclass when the retriever is built. :class:`HierarchicalRetriever` is the DHR preset of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery, VectorStoreQueryResult
from llama_index.vector_stores.rag_hier import RagHierVectorStore
from llama_index.vector_stores.rag_hier._filters import build_predicate
from llama_index.vector_stores.rag_hier._nodes import hit_to_node

from rag_hier.retrieval.base import Queries, Retriever
from rag_hier.retrieval.hierarchical import HIERARCHICAL_MODES, HierarchicalParams
from rag_hier.retrieval.registry import StrategyEntry, strategy

if TYPE_CHECKING:
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

    from rag_hier.retrieval.hit import Hit

logger = logging.getLogger(__name__)

__all__ = ["PARENT_KEY", "SCORES_KEY", "HierarchicalRetriever", "HierarchicalRetrieverMode", "RagHierRetriever"]

SCORES_KEY = "scores"
"""Node metadata key of a strategy's component scores (``Hit.scores``: e.g. ``{"passage", "document", "fused"}``
for DHR); excluded from the LLM and embedding text."""
PARENT_KEY = "parent_document"
"""Node metadata key of ``{"id", "title", "title_path", "meta"}`` (excluded from the LLM and embedding text)."""


def _exclude(node: BaseNode, *keys: str) -> None:
    """Keep ``keys`` of the node's metadata out of the text an LLM or an embedding model sees."""
    for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        excluded.extend(k for k in keys if k not in excluded)


class RagHierRetriever(BaseRetriever):
    """Any registered rag-hier strategy over a :class:`RagHierVectorStore`, as a LlamaIndex retriever.

    The strategy is named as in ``rag-hier search --strategy``; its parameters are given as keyword arguments
    (or ``strategy_params``) and checked against the strategy's parameters dataclass when the retriever is built
    (an unknown name, a wrong type or a value out of range raises ``ValueError`` naming it). A strategy
    registered with ``rag_hier.retrieval.register_strategy`` is usable here at once.

    The dense query vector, for strategies that use one, comes from (in this order) ``QueryBundle.embedding``,
    ``embed_model``, or the store's own encoder (a store created with ``model=...``); text-only strategies
    (``svdr-*``) never embed the query. Returned nodes carry ``score`` (the strategy's score) and, when the
    strategy reports component scores (``hierarchical``, ``svdr-*``, ``fusion``), ``metadata["scores"]``,
    which is excluded from the LLM and embedding text.

    Strategies need store extensions (``hierarchical``: ``doc-index``, ``tree``: ``tree``, ``svdr-beta*`` /
    ``svdr-lexical``: ``token-index``). When one is missing, retrieval raises ``ValueError`` naming the fix,
    unless ``auto_extensions=True``: the retriever then builds it on first use with its default settings (the
    store's only write; every later write keeps it current).

    Args:
        vector_store: The store to search.
        strategy: A registered strategy name (``rag_hier.retrieval.strategy_names()``).
        similarity_top_k: Nodes to return.
        filters: Metadata filters applied before the search (nested ``MetadataFilters`` allowed).
        doc_ids: Search only inside these documents (SOURCE ids); ``None`` or empty: everywhere.
        embed_model: Embedding model for the query (the one the nodes were embedded with).
        strategy_params: The strategy's parameters as a mapping (keyword arguments override it).
        auto_extensions: Build missing store extensions the strategy needs on first use.
        callback_manager: LlamaIndex callback manager.
        verbose: LlamaIndex verbosity flag.
        warm_up: Load on construction what the first query would load (:meth:`warm_up`).
        **strategy_kwargs: The strategy's parameters (e.g. ``beam=`` for ``tree``, ``k1=`` for ``hierarchical``).

    Raises:
        TypeError: ``vector_store`` is not a RagHierVectorStore.
        ValueError: ``similarity_top_k`` < 1, an unknown strategy, or a parameter the strategy does not take
            or does not accept.

    Example:
        >>> retriever = RagHierRetriever(store, "tree", beam=16, embed_model=embed_model)  # doctest: +SKIP
        >>> retriever.retrieve("how do tides work?")  # doctest: +SKIP

    """

    def __init__(
        self,
        vector_store: RagHierVectorStore,
        strategy: str = "dense",
        *,
        similarity_top_k: int = 10,
        filters: MetadataFilters | None = None,
        doc_ids: list[str] | None = None,
        embed_model: BaseEmbedding | None = None,
        strategy_params: Mapping[str, Any] | None = None,
        auto_extensions: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        warm_up: bool = False,
        **strategy_kwargs: Any,
    ) -> None:
        if not isinstance(vector_store, RagHierVectorStore):
            raise TypeError(f"vector_store must be a RagHierVectorStore, got {type(vector_store).__name__}")
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int) or similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be an integer >= 1, got {similarity_top_k!r}")
        self.entry: StrategyEntry = _strategy(strategy)
        self.params = self.entry.parse(
            {**dict(strategy_params or {}), **strategy_kwargs}, where=f"RagHierRetriever(strategy={strategy!r})"
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.vector_store = vector_store
        self.strategy = strategy
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.doc_ids = list(doc_ids) if doc_ids else None
        self.embed_model = embed_model
        self.auto_extensions = bool(auto_extensions)
        self._engine: Retriever[Any] | None = None
        if warm_up:
            self.warm_up()

    def warm_up(self) -> None:
        """Load now what the first query would load, so that it is as fast as the next; idempotent.

        Builds the engine's retriever, checks the store's extensions (building them when ``auto_extensions``)
        and loads the models the strategy searches with: ``embed_model``'s when it embeds the query (a
        :class:`~llama_index.embeddings.rag_hier.RagHierEmbedding` loads its encoder), else the store's own
        encoder; SVDR's tokenizer and vocabulary encoder; BM25's per-term scores.
        """
        self._check_store()
        engine = self.engine
        if engine.uses_query_vectors and self.embed_model is not None:
            load = getattr(self.embed_model, "warm_up", None)
            if callable(load):
                load()
            return
        engine.warm_up()

    @classmethod
    def from_index(cls, index: VectorStoreIndex, *args: Any, **kwargs: Any) -> RagHierRetriever:
        """A retriever over the ``RagHierVectorStore`` of ``index``, embedding queries with its embed model."""
        kwargs.setdefault("embed_model", index._embed_model)
        kwargs.setdefault("callback_manager", index._callback_manager)
        return cls(index.vector_store, *args, **kwargs)  # type: ignore[arg-type]

    @property
    def engine(self) -> Retriever[Any]:
        """The engine's retriever of this strategy, over the vector store's read handle (built on first use)."""
        if self._engine is None:
            self._engine = self.entry.retriever(self.vector_store.reader, params=self.params)
        return self._engine

    # -- before searching -----------------------------------------------------------------------------
    def _missing_extension(self, name: str) -> str:
        store = self.vector_store
        return (
            f"the store at {store.location} has no {name!r} extension, which the {self.strategy!r} strategy "
            f"needs: pass auto_extensions=True to RagHierRetriever (it builds the extension on first use; every "
            f"later write keeps it current), or add it once with `vector_store.client.ensure_extension({name!r})`"
        )

    def _check_store(self) -> None:
        """The store can run this strategy: dense vectors when it uses them, and its extensions (built if asked)."""
        store = self.vector_store
        if self.engine.uses_query_vectors and not store.dense:
            raise ValueError(
                f"the store at {store.location} keeps no dense vectors (dense=False); the {self.strategy!r} "
                "strategy needs them (search it with a text strategy such as svdr-lexical)"
            )
        for name in self.entry.extensions:
            if store.reader.extension(name) is not None:
                continue
            if not self.auto_extensions:
                raise ValueError(self._missing_extension(name))
            logger.info("adding the %s extension to %s for the %s strategy", name, store.location, self.strategy)
            store.client.ensure_extension(name)

    def _embedding(self, query_bundle: QueryBundle) -> list[float] | None:
        if not self.engine.uses_query_vectors:
            return None
        if query_bundle.embedding is None and self.embed_model is not None:
            return self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return query_bundle.embedding

    async def _aembedding(self, query_bundle: QueryBundle) -> list[float] | None:
        if not self.engine.uses_query_vectors:
            return None
        if query_bundle.embedding is None and self.embed_model is not None:
            return await self.embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)
        return query_bundle.embedding

    # -- searching ----------------------------------------------------------------------------------------
    def _queries(self, query_bundle: QueryBundle, embedding: Sequence[float] | None) -> Queries:
        vectors = None
        if self.engine.uses_query_vectors:  # the vector store's rules: its encoder for text, normalized if cosine
            vectors = self.vector_store.query_vector(query_bundle.query_str, embedding)
        return Queries(texts=[query_bundle.query_str], vectors=vectors)

    def _search(self, query_bundle: QueryBundle, embedding: Sequence[float] | None) -> list[NodeWithScore]:
        queries = self._queries(query_bundle, embedding)
        predicate = build_predicate(self.filters, doc_ids=self.doc_ids)
        hits = self.engine.run(queries, self.similarity_top_k, predicate)[0].hits
        return self._nodes(hits)

    def _nodes(self, hits: Sequence[Hit]) -> list[NodeWithScore]:
        """Nodes straight from the hits (no second read of the store), with their component scores."""
        out = []
        for hit in hits:
            node = hit_to_node(hit)
            if hit.scores:
                node.metadata[SCORES_KEY] = dict(hit.scores)
                _exclude(node, SCORES_KEY)
            out.append(NodeWithScore(node=node, score=hit.score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self._check_store()  # fail (or build an extension) before embedding the query
        return self._search(query_bundle, self._embedding(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await asyncio.to_thread(self._check_store)
        embedding = await self._aembedding(query_bundle)
        # the search blocks (FAISS, SQLite, maybe the store's encoder): run it in a worker thread
        return await asyncio.to_thread(self._search, query_bundle, embedding)


def _strategy(name: str) -> StrategyEntry:
    if not isinstance(name, str):
        raise ValueError(f"strategy must be a strategy name, got {name!r}")
    return strategy(name)


HierarchicalRetrieverMode = Literal["serial", "parallel", "flat"]
_MODES: tuple[str, ...] = (*HIERARCHICAL_MODES, "flat")
_DHR_DEFAULTS = {f.name: f.default for f in dataclasses.fields(HierarchicalParams)}


class HierarchicalRetriever(RagHierRetriever):
    """Dense Hierarchical Retrieval (DHR) over a rag-hier store: the best documents first, then their nodes.

    Liu et al., *Dense Hierarchical Retrieval for Open-Domain Question Answering* (Findings of EMNLP 2021),
    as implemented by the engine's ``hierarchical`` strategy (this class is :class:`RagHierRetriever` with
    ``strategy="hierarchical"``; defaults and checks of ``k1``, ``lambda_`` and ``mode`` are the strategy's
    ``HierarchicalParams``): the top-``k1`` documents are found in the store's document index, and only the
    nodes of those documents are scored, each with the fused score ``passage + lambda_ * document``
    (``mode="serial"``). ``mode="parallel"`` scores every node with its document's score added;
    ``mode="flat"`` is the plain dense query of the vector store (this retriever's behaviour before DHR; it
    needs no document index).

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
        warm_up: Load on construction what the first query would load (:meth:`warm_up`).

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
        k1: int = _DHR_DEFAULTS["k1"],
        lambda_: float = _DHR_DEFAULTS["lambda_"],
        mode: HierarchicalRetrieverMode = _DHR_DEFAULTS["mode"],
        auto_document_index: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        warm_up: bool = False,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
        super().__init__(
            vector_store,
            "hierarchical",
            similarity_top_k=similarity_top_k,
            filters=filters,
            doc_ids=doc_ids,
            embed_model=embed_model,
            auto_extensions=auto_document_index,
            callback_manager=callback_manager,
            verbose=verbose,
            k1=k1,
            lambda_=lambda_,
            mode=_DHR_DEFAULTS["mode"] if mode == "flat" else mode,  # k1 and lambda_ are checked in every mode
        )
        self.k1: int = self.params.k1  # type: ignore[attr-defined]
        self.lambda_: float = self.params.lambda_  # type: ignore[attr-defined]
        self.mode: HierarchicalRetrieverMode = mode
        self.auto_document_index = self.auto_extensions
        if warm_up:  # after the mode is known: mode="flat" needs no document index
            self.warm_up()

    @classmethod
    def from_index(cls, index: VectorStoreIndex, *args: Any, **kwargs: Any) -> HierarchicalRetriever:
        """A retriever over the ``RagHierVectorStore`` of ``index``, embedding queries with its embed model."""
        retriever = super().from_index(index, *args, **kwargs)
        assert isinstance(retriever, HierarchicalRetriever)
        return retriever

    def _missing_extension(self, name: str) -> str:
        return (
            f"the store at {self.vector_store.location} has no document index, which hierarchical (DHR) "
            "retrieval needs. Pass auto_document_index=True to HierarchicalRetriever (it builds the index on first "
            "use; every later write keeps it current), or add it once with "
            "`vector_store.client.add_extension(rag_hier.store.extensions.doc_index.DocumentIndex())`, or index "
            "with `rag-hier index --hierarchical`; mode='flat' searches all nodes without it"
        )

    def _check_store(self) -> None:
        if self.mode != "flat":
            super()._check_store()

    # -- flat mode: the vector store's own dense query --------------------------------------------------
    def _flat_query(self, query_bundle: QueryBundle, embedding: list[float] | None) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_embedding=embedding,
            query_str=query_bundle.query_str,
            similarity_top_k=self.similarity_top_k,
            filters=self.filters,
            doc_ids=self.doc_ids,
        )

    @staticmethod
    def _flat_nodes(result: VectorStoreQueryResult) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=node, score=score)
            for node, score in zip(result.nodes or [], result.similarities or [], strict=True)
        ]

    # -- DHR modes ----------------------------------------------------------------------------------------
    def _nodes(self, hits: Sequence[Hit]) -> list[NodeWithScore]:
        """Nodes with their three scores and their parent document (title and metadata read once each)."""
        reader = self.vector_store.reader
        parents = {d: reader.get_document(d) or {} for d in dict.fromkeys(h.doc_id for h in hits)}
        out = super()._nodes(hits)
        for hit, scored in zip(hits, out, strict=True):
            parent = parents[hit.doc_id]
            scored.node.metadata[SCORES_KEY] = dict(hit.scores)
            scored.node.metadata[PARENT_KEY] = {
                "id": hit.doc_id,
                "title": parent.get("title", ""),
                "title_path": list(hit.title_path),
                "meta": dict(parent.get("meta") or {}),
            }
            _exclude(scored.node, SCORES_KEY, PARENT_KEY)
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.mode == "flat":
            embedding = query_bundle.embedding
            if embedding is None and self.embed_model is not None:
                embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
            return self._flat_nodes(self.vector_store.query(self._flat_query(query_bundle, embedding)))
        return super()._retrieve(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.mode == "flat":
            embedding = query_bundle.embedding
            if embedding is None and self.embed_model is not None:
                embedding = await self.embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)
            return self._flat_nodes(await self.vector_store.aquery(self._flat_query(query_bundle, embedding)))
        return await super()._aretrieve(query_bundle)
