"""Search: every registered strategy, one way (RagHierDocumentStore's retrieve and named retrievals, a mixin)."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from haystack import Document
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack_integrations.document_stores.rag_hier._convert import (
    hit_to_document,
    validate_filters,
)
from haystack_integrations.document_stores.rag_hier._lifecycle import _engine_errors
from haystack_integrations.document_stores.rag_hier._scores import (
    SIMILARITY_SCALE,
    check_scale_score,
    scaled_score,
    score_scale,
)

from rag_hier.encoders.identity import other_store_model
from rag_hier.errors import DuplicateIdError, StoreError
from rag_hier.retrieval.base import Queries, Retriever, RetrieverParams
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.retrieval.hit import Hit
from rag_hier.retrieval.registry import StrategyEntry, strategy
from rag_hier.store.contract import StoreBackend as Store
from rag_hier.store.extensions.base import extension_class

logger = logging.getLogger(__name__)

__all__ = ["StrategySearch"]


def _check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0, got {top_k!r}")
    return top_k


_NUMBERS = frozenset({float, int})


def _query_vector(query_embedding: Any) -> np.ndarray | list[float]:
    """A query embedding checked to be a flat, non-empty list of numbers (as float64 where that is at hand).

    An embedder's list of Python floats becomes its float64 array in one NumPy call (the values themselves;
    NumPy infers float64 only for numbers that are all real and at least one a float); anything else is checked
    item by item (one type check per item, not an ABC isinstance: 6x slower at 384-d) and returned as a list.
    """
    if type(query_embedding) is list and query_embedding:
        try:
            v = np.array(query_embedding)
        except (TypeError, ValueError):  # nested or ragged: the checks below say what is wrong
            pass
        else:
            if v.dtype == np.float64 and v.ndim == 1:
                return v
        if set(map(type, query_embedding)) <= _NUMBERS:
            return list(query_embedding)
    if isinstance(query_embedding, str | bytes) or not isinstance(query_embedding, Sequence) or not query_embedding:
        raise ValueError("query_embedding should be a non-empty list of floats.")
    if any(isinstance(x, Sequence) for x in query_embedding):
        raise ValueError("query_embedding must be a flat list of floats")
    return list(query_embedding)


def _query_matrix(vector: np.ndarray | list[float], cosine: bool) -> np.ndarray:
    """The ``(1, dimension)`` float32 query matrix of a checked query vector (normalized in a cosine store)."""
    v = vector if type(vector) is np.ndarray else np.asarray(vector, dtype=np.float64)  # _query_vector's: float64
    if cosine:  # as InMemoryDocumentStore: cosine of the query, whatever its norm
        norm = math.sqrt(math.fsum((v * v).tolist()))  # the exactly rounded norm, as in float64 by hand
        if norm > 0:
            v = v / norm
    return v.astype(np.float32)[None, :]


def _lean(retriever: type[Retriever[Any]]) -> bool:
    """Whether the ``retriever`` class searches query vectors by :meth:`DenseRetriever.search_vectors`.

    That method is :meth:`Retriever.run` on ``Queries(vectors=...)`` (the same hits, the same checks), by a
    shorter path for a plain unfiltered search (falling back to :meth:`Retriever.run` for any other).
    """
    return retriever.search_vectors is DenseRetriever.search_vectors


class _CachedRetriever:
    """An engine retriever kept between queries (with what it loaded), and a lock serializing its use."""

    def __init__(self, retriever: Retriever[Any]) -> None:
        self.retriever = retriever
        self.lock = threading.Lock()


class StrategySearch:
    """RagHierDocumentStore's searches: :meth:`retrieve` with any registered strategy, and the named ones."""

    def _engine_retriever(self, store: Store, entry: StrategyEntry, params: RetrieverParams) -> _CachedRetriever:
        """The engine retriever of ``entry`` with ``params`` over ``store``, kept (with what it loaded) while open."""
        key = (entry.name, params)
        cached = self._retrievers.get(key)  # the common case without the lock: a dict read is atomic
        if cached is not None and cached.retriever.store is store:
            return cached
        with self._lock:
            cached = self._retrievers.get(key)
            if cached is None or cached.retriever.store is not store:
                cached = self._retrievers[key] = _CachedRetriever(entry.retriever(store, params=params))
            return cached

    @staticmethod
    def _needed_extensions(entry: StrategyEntry, params: RetrieverParams) -> tuple[str, ...]:
        """The extensions a search with ``entry`` and ``params`` uses: its own and its component strategies'.

        A strategy built from other registered strategies (``fusion``) names them in a ``strategies`` parameter.
        """
        strategies = getattr(params, "strategies", None)
        if not strategies and not entry.extensions:  # dense: the common case, answered at once
            return ()
        names = list(entry.extensions)
        for component in strategies or ():
            names.extend(strategy(component).extensions)
        return tuple(dict.fromkeys(names))

    def _prepare_extensions(self, entry: StrategyEntry, params: RetrieverParams, auto_extensions: bool) -> None:
        """Build the extensions the search needs that the store lacks, when asked to or configured to."""
        store = self._read_handle()
        for name in self._needed_extensions(entry, params):
            if store.extension(name) is not None:
                continue
            if auto_extensions or (name == "token-index" and self._token_options is not None):
                self._ensure_extension(self._write_handle(), name)

    def _missing_extension_hint(self, entry: StrategyEntry, params: RetrieverParams, auto_option: str) -> str:
        store = self._read_handle()
        missing = [name for name in self._needed_extensions(entry, params) if store.extension(name) is None]
        if not missing:
            return ""
        adds = []
        for name in missing:
            cls = extension_class(name)
            adds.append(f"`document_store.hier_store.add_extension({cls.__module__}.{cls.__qualname__}())`")
        return (
            f". Pass {auto_option} (it builds what the {entry.name!r} strategy needs on first use; every later "
            f"write keeps it current), or add it once with {' and '.join(adds)}"
        )

    @staticmethod
    def _check_strategy_params(
        entry: StrategyEntry, strategy_params: RetrieverParams | Mapping[str, Any] | None
    ) -> RetrieverParams:
        if isinstance(strategy_params, RetrieverParams):
            expected = entry.params
            if not isinstance(strategy_params, expected):
                raise ValueError(
                    f"strategy_params for {entry.name!r} must be a {expected.__name__}, "
                    f"got {type(strategy_params).__name__}"
                )
            return strategy_params
        return entry.parse(strategy_params, where=f"strategy_params of {entry.name!r}")

    def _check_query_model(self, store: Store, query_embedding: Any) -> None:
        """Refuse a query embedding that names another model than the one the store's vectors come from.

        Only an embedding that names its weights (``RagHierTextEmbedder``'s) can be checked; a plain list cannot.
        """
        theirs = other_store_model(store, getattr(query_embedding, "weights_sha256", None))
        if theirs is None:
            return
        line = (
            f"the query embedding comes from model {getattr(query_embedding, 'model', None)!r}, but the vectors of "
            f"the store at {self.location} come from {theirs!r}: queries and passages would come from "
            "different models. Give the text embedder the store (RagHierTextEmbedder(document_store=store)) so it "
            "follows the store's model, or query with text (RagHierRetriever, HierarchicalRetriever)"
        )
        if not self.allow_other_model:
            raise DocumentStoreError(line + ", or create the store with allow_other_model=True to search anyway")
        logger.warning("%s (allow_other_model=True: searching anyway)", line)

    def _queries(
        self,
        entry: StrategyEntry,
        store: Store,
        query: str | None,
        query_embedding: Any,
        query_sparse_embedding: Any,
    ) -> tuple[list[str] | None, np.ndarray | None, list[tuple[list[int], list[float]]] | None]:
        """The engine's queries from Haystack's inputs: ``Queries``' texts, vectors and sparse vectors.

        Checked here, with clear errors for what cannot be searched; the vectors' values (finite numbers) are
        checked by ``Queries`` or the engine's search.
        """
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        vector: np.ndarray | list[float] | None = None
        if query_embedding is not None:
            self._check_query_model(store, query_embedding)
            vector = _query_vector(query_embedding)
        sparse = None
        if query_sparse_embedding is not None:
            if not isinstance(query_sparse_embedding, SparseEmbedding):
                raise ValueError(
                    f"query_sparse_embedding must be a SparseEmbedding, got {type(query_sparse_embedding).__name__}"
                )
            sparse = [(list(query_sparse_embedding.indices), list(query_sparse_embedding.values))]
        if query is None and vector is None and sparse is None:
            raise ValueError(
                f"the {entry.name!r} strategy needs a query: pass query (text), query_embedding or "
                "query_sparse_embedding"
            )
        if vector is None and entry.retriever.over_vectors:
            if query is None:
                raise ValueError(f"the {entry.name!r} strategy ranks dense vectors: pass query or query_embedding")
            embedder = self._embedder_model(store) if store.encoder is None else None
            if embedder is not None:
                vector = [float(x) for x in embedder.encode_queries([query])[0]]
            elif store.encoder is None:
                if not self.dense:
                    raise StoreError(
                        f"the store at {self.location} keeps no dense vectors of its own (dense=False) and has no "
                        f"model to encode query text for the {entry.name!r} strategy: pass query_embedding (for "
                        "documents written with embeddings), or search it with a token strategy (svdr-*)"
                    )
                raise StoreError(
                    f"the store at {self.location} has no model to encode query text for the {entry.name!r} "
                    "strategy: pass query_embedding (from a text embedder such as RagHierTextEmbedder or "
                    "SentenceTransformersTextEmbedder, with the model that embedded the documents), or create "
                    "the RagHierDocumentStore with model=..."
                )
        matrix = None
        if vector is not None:
            dim = store.dimension
            if dim is not None and len(vector) != dim:
                raise StoreError(
                    f"the query embedding has {len(vector)} dimensions; the documents in {self.location} have {dim}. "
                    "Embed queries with the model that embedded the documents."
                )
            matrix = _query_matrix(vector, store.similarity == "cosine")
        return None if query is None else [query], matrix, sparse

    def _documents(
        self,
        store: Store,
        hits: list[Hit],
        *,
        scale: str | None,
        return_embedding: bool,
        component_scores: bool,
        parent_documents: bool,
    ) -> list[Document]:
        """Documents built straight from the engine's hits, which carry every stored field a Document needs.

        The hit rows were read by the search itself; the store is read again only for what a hit does not
        carry and the caller asked for: embeddings (``return_embedding``) and parent documents, both from one
        committed state.
        """
        if not (return_embedding or parent_documents or scale):  # a plain search: the hits as they are
            if component_scores:
                return [
                    hit_to_document(hit, None, None, {"scores": dict(hit.scores)} if hit.scores else None)
                    for hit in hits
                ]
            return [hit_to_document(hit) for hit in hits]
        embeddings: list[Any] = [None] * len(hits)
        parents: dict[str, dict[str, Any]] = {}
        if return_embedding or parent_documents:
            with store.reading():
                if return_embedding:
                    embeddings = store.get_embeddings([h.passage_id for h in hits])
                if parent_documents:
                    for doc_id in dict.fromkeys(h.doc_id for h in hits):
                        parents[doc_id] = store.get_document(doc_id) or {}
        out = []
        for hit, embedding in zip(hits, embeddings, strict=True):
            extra: dict[str, Any] = {}
            if component_scores and hit.scores:
                extra["scores"] = dict(hit.scores)
            if parent_documents:
                parent = parents.get(hit.doc_id) or {}
                extra["parent_document"] = {
                    "id": hit.doc_id,
                    "title": parent.get("title", ""),
                    "title_path": list(hit.title_path),
                    "meta": dict(parent.get("meta") or {}),
                }
            score = scaled_score(hit.score, scale) if scale else hit.score
            out.append(hit_to_document(hit, embedding, score, extra))
        return out

    @staticmethod
    def _empty(store: Store) -> bool:
        """Whether the store holds no passage (the vector count first: in memory for a local store, no SQL)."""
        return store.count_vectors() == 0 and store.count_passages() == 0

    def _retrieve(
        self,
        strategy_name: str,
        strategy_params: RetrieverParams | Mapping[str, Any] | None = None,
        *,
        query: str | None = None,
        query_embedding: list[float] | None = None,
        query_sparse_embedding: SparseEmbedding | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        auto_extensions: bool = False,
        component_scores: bool = True,
        parent_documents: bool = False,
        auto_option: str = "auto_extensions=True",
    ) -> list[Document]:
        entry = strategy(strategy_name)
        params = self._check_strategy_params(entry, strategy_params)
        top_k = _check_top_k(top_k)
        if scale_score:
            check_scale_score(entry, scale_score)
        if filters:
            validate_filters(filters)
        try:  # _engine_errors() inline: a context manager costs a query more than the try
            store = self._read_handle()
            texts, vectors, sparse = self._queries(entry, store, query, query_embedding, query_sparse_embedding)
            # a plain dense search (query vectors only, unfiltered) takes the engine's lean path, search_vectors,
            # which checks the vectors' values itself; any other builds the engine's Queries (which checks them)
            lean = top_k > 0 and texts is None and sparse is None and not filters and _lean(entry.retriever)
            queries = None if lean else Queries(texts=texts, vectors=vectors, sparse=sparse)
            if top_k == 0:
                return []
            if self._needed_extensions(entry, params):  # without any, the engine answers an empty store itself
                if self._empty(store):
                    return []
                self._prepare_extensions(entry, params, auto_extensions)
                store = self._read_handle()  # the read-write handle if extensions were just built
            cached = self._engine_retriever(store, entry, params)
            retriever = cached.retriever
            try:
                with cached.lock:
                    if queries is None:  # unfiltered
                        hits = retriever.search_vectors(vectors, top_k)[0]  # type: ignore[arg-type]
                    else:
                        hits = retriever.run(queries, top_k, self._predicate(filters, store))[0].hits
            except StoreError as exc:
                hint = self._missing_extension_hint(entry, params, auto_option)
                if hint:
                    raise StoreError(f"{exc}{hint}") from exc
                raise
            scale = score_scale(entry) if scale_score else None
            return self._documents(
                store,
                hits,
                scale=store.similarity if scale == SIMILARITY_SCALE else scale,
                return_embedding=return_embedding,
                component_scores=component_scores,
                parent_documents=parent_documents,
            )
        except DuplicateIdError as exc:
            raise DuplicateDocumentError(str(exc)) from exc
        except StoreError as exc:
            raise DocumentStoreError(str(exc)) from exc

    def retrieve(
        self,
        strategy: str = "dense",
        strategy_params: RetrieverParams | Mapping[str, Any] | None = None,
        *,
        query: str | None = None,
        query_embedding: list[float] | None = None,
        query_sparse_embedding: SparseEmbedding | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        auto_extensions: bool = False,
    ) -> list[Document]:
        """Search with any registered strategy (``rag_hier.retrieval.registry``): the engine's results as Documents.

        Args:
            strategy: A registered strategy name: ``"dense"``, ``"hierarchical"``, ``"tree"``, ``"svdr-beta"``,
                ``"bm25"``, ``"sparse-embedding"``, ``"fusion"``, ...
            strategy_params: Its parameters (a mapping checked against the strategy's parameters dataclass,
                or the dataclass itself).
            query: Query text (encoded by the store's model for dense strategies; SVDR and BM25 need it).
            query_embedding: A dense query vector (dense strategies use it instead of encoding ``query``).
            query_sparse_embedding: A sparse query vector (the ``sparse-embedding`` strategy).
            filters: A Haystack filter applied before the search (exact ``top_k`` among the matches).
            top_k: How many documents to return (``0``: none).
            scale_score: Map scores to [0, 1] as InMemoryDocumentStore does: by the store's similarity for
                strategies that rank dense vectors, ``(s + 1) / 2`` (cosine) or ``sigmoid(s / 100)`` (dot
                product); ``sigmoid(s / 8)`` for ``bm25``. Other strategies' scores are not scaled (an error).
            return_embedding: Include the documents' dense embeddings.
            auto_extensions: Build the store extensions the strategy needs (document index, cluster tree,
                token index, BM25 index, ...) when the store lacks them; they then follow every write.

        Returns:
            Documents, best first, with ``score`` set and, when the strategy reports component scores
            (``hierarchical``, ``svdr-*``, ``fusion``), ``meta["scores"]``.

        Raises:
            ValueError: Unknown strategy or parameter, bad query input, negative ``top_k``.
            DocumentStoreError: The store cannot run the strategy (no model for query text, a missing
                extension, ...); the message says how to fix it.

        """
        return self._retrieve(
            strategy,
            strategy_params,
            query=query,
            query_embedding=query_embedding,
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
            auto_extensions=auto_extensions,
        )

    def warm_up_strategy(
        self,
        strategy_name: str,
        strategy_params: RetrieverParams | Mapping[str, Any] | None = None,
        *,
        models: bool = True,
    ) -> None:
        """Open the store and load what searching with a strategy needs (idempotent and cheap once done).

        Extensions the store lacks are left for the first search (which builds them or says how to).
        ``models=False`` only opens the store (a caller that brings query vectors needs no model).
        """
        entry = strategy(strategy_name)
        params = self._check_strategy_params(entry, strategy_params)
        with _engine_errors():
            store = self._read_handle()
            if not models:
                return
            if entry.retriever.over_vectors and store.encoder is None:
                embedder = self._embedder_model(store)  # the model recorded from RagHierDocumentEmbedder
                if embedder is not None:
                    _ = embedder.model
            if any(store.extension(name) is None for name in self._needed_extensions(entry, params)):
                if entry.retriever.over_vectors and store.encoder is not None:
                    _ = store.encoder.model  # what the first search will need in any case
                return
            cached = self._engine_retriever(store, entry, params)
            with cached.lock:
                cached.retriever.warm_up()

    def embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Return the ``top_k`` documents with the largest inner product with ``query_embedding`` (``dense``).

        Args:
            query_embedding: The query vector.
            filters: A Haystack filter applied before the search (exact ``top_k`` among the matches).
            top_k: How many documents to return (``0``: none).
            scale_score: Map scores to [0, 1] by the store's similarity, as InMemoryDocumentStore does.
            return_embedding: Include the documents' embeddings.

        Returns:
            Documents with ``score`` set, best first.

        """
        if query_embedding is None:
            raise ValueError("query_embedding should be a non-empty list of floats.")
        return self._retrieve(
            "dense",
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )

    def text_retrieval(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Encode ``query`` with the store's model and search like :meth:`embedding_retrieval`.

        Raises:
            DocumentStoreError: The store has no model (create it with ``model=...``).

        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        return self._retrieve(
            "dense",
            query=query,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
        )

    def warm_up_svdr(self, mode: str = "beta-rerank", rerank_m: int = 100, vocab_model: str | None = None) -> None:
        """Open the store and load what SVDR search in ``mode`` needs (idempotent and cheap once done)."""
        self.warm_up_strategy(f"svdr-{mode}", {"rerank_m": rerank_m, "vocab_model": vocab_model})

    def svdr_retrieval(
        self,
        query: str,
        mode: str = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
    ) -> list[Document]:
        """SVDR search with query text (the ``svdr-<mode>`` strategy; see ``rag_hier.retrieval.svdr``).

        Args:
            query: The query text.
            mode: ``"beta"`` ⟨E(q), T(d)⟩, ``"beta-rerank"`` (β, then the top ``rerank_m`` re-scored by
                ⟨E(q), E(d)⟩), ``"full"`` ⟨E(q), E(d)⟩, ``"alpha"`` ⟨T(q), E(d)⟩ or ``"lexical"`` (idf-weighted
                token overlap, no model). β, β+rerank and lexical need the token index; full and α encode the
                E(d) they lack on first use.
            filters: A Haystack filter applied before the search (exact ``top_k`` among the matches).
            top_k: How many documents to return (``0``: none).
            rerank_m: Candidates re-ranked by β+rerank.
            vocab_model: The vocabulary encoder (a ``rag-hier train svdr`` output or any BERT-family model);
                default: the store's model, else the token index's tokenizer model.
            return_embedding: Include the documents' dense embeddings.

        Returns:
            Documents with ``score`` set, best first (the engine's order: ties by insertion order).

        Raises:
            DocumentStoreError: The mode needs a token index and the store has none, or the encoder
                tokenizes differently from the token index.

        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        return self._retrieve(
            f"svdr-{mode}",
            {"rerank_m": rerank_m, "vocab_model": vocab_model},
            query=query,
            filters=filters,
            top_k=top_k,
            return_embedding=return_embedding,
            component_scores=False,
        )

    def sparse_embedding_retrieval(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Return the documents whose stored ``sparse_embedding`` has the largest inner product with the query's.

        The ``sparse-embedding`` strategy. Documents without a sparse embedding, and those sharing no index with
        the query (score 0), are never returned. Scores are the raw inner products, best first; ties by
        insertion order.

        Args:
            query_sparse_embedding: The query's sparse embedding (same encoder as the documents').
            filters: A Haystack filter applied before the search (exact ``top_k`` among the matches).
            top_k: How many documents to return (``0``: none).
            return_embedding: Include the documents' dense embeddings.

        """
        if not isinstance(query_sparse_embedding, SparseEmbedding):
            raise ValueError(
                f"query_sparse_embedding must be a SparseEmbedding, got {type(query_sparse_embedding).__name__}"
            )
        return self._retrieve(
            "sparse-embedding",
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            return_embedding=return_embedding,
        )

    def bm25_retrieval(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        *,
        k1: float | None = None,
        b: float | None = None,
        auto_extensions: bool = False,
    ) -> list[Document]:
        """Return the documents that BM25 ranks highest for ``query`` (the ``bm25`` strategy).

        The counterpart of ``InMemoryDocumentStore.bm25_retrieval`` (same positional parameters), over the
        store's BM25 index (the store extension ``bm25``): Lucene's BM25, the scores of bm25s'
        ``BM25(method="lucene")``, on the text bm25s tokenizes (lowercase words of two or more characters, English
        stopwords removed, Snowball-stemmed). Documents sharing no term with the query are not returned. ``N``,
        ``avgdl`` and document frequencies are those of every stored document; filters restrict which are
        returned (exact ``top_k`` among the matches), not the statistics. Ties keep insertion order.

        Args:
            query: The query text.
            filters: A Haystack filter applied before the search.
            top_k: How many documents to return (``0``: none).
            scale_score: Map scores to [0, 1] with ``sigmoid(s / 8)``, InMemoryDocumentStore's BM25 scaling.
            k1: Term-frequency saturation (default 1.5; query time, no rebuild).
            b: Length normalisation, 0 to 1 (default 0.75; query time).
            auto_extensions: Build the BM25 index when the store has none (it tokenizes every stored document
                once; every later write keeps it current).

        Returns:
            Documents with ``score`` set, best first (without embeddings).

        Raises:
            ValueError: ``query`` is empty, ``top_k`` is negative, or ``k1`` / ``b`` is out of range.
            DocumentStoreError: The store has no BM25 index and ``auto_extensions`` is off (the message says how
                to add one), or this machine tokenizes differently from the index (see ``docs/bm25.md``).

        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        params = {k: v for k, v in {"k1": k1, "b": b}.items() if v is not None}
        return self._retrieve(
            "bm25",
            params,
            query=query,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            auto_extensions=auto_extensions,
            component_scores=False,
        )

    def hierarchical_retrieval(
        self,
        query: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        *,
        k1: int | None = None,
        lambda_: float | None = None,
        mode: str = "serial",
        auto_document_index: bool = False,
        query_embedding: list[float] | None = None,
    ) -> list[Document]:
        """Dense Hierarchical Retrieval: the top-``k1`` documents, then their passages (``hierarchical``).

        Each returned Document is a passage with ``score`` = the fused score ``passage + lambda_ * document``
        (scaled by ``scale_score`` like :meth:`embedding_retrieval`), ``meta["scores"] = {"passage",
        "document", "fused"}`` (raw scores) and ``meta["parent_document"] = {"id", "title", "title_path",
        "meta"}``. These two keys replace any keys of the same name in the stored meta, in the returned copy only.

        Args:
            query: The query text (encoded by the store's model unless ``query_embedding`` is given).
            filters: A Haystack filter on passages, applied before the search.
            top_k: How many passages to return (``0``: none).
            scale_score: Map the fused score to [0, 1] as :meth:`embedding_retrieval` does.
            return_embedding: Include the passages' embeddings.
            k1: Documents kept by the first stage (``mode="serial"``); default: the strategy's.
            lambda_: Weight of the document score in the fused score; default: the strategy's.
            mode: ``"serial"`` or ``"parallel"``.
            auto_document_index: Build the document index when the store has none.
            query_embedding: The query's vector (a store without a model: from the embedder of the documents).

        """
        params = {k: v for k, v in {"k1": k1, "lambda_": lambda_, "mode": mode}.items() if v is not None}
        return self._retrieve(
            "hierarchical",
            params,
            query=query,
            query_embedding=query_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
            auto_extensions=auto_document_index,
            parent_documents=True,
            auto_option="auto_document_index=True",
        )
