"""RagHierVectorStore: a rag-hier store (SQLite + FAISS directory) as a LlamaIndex vector store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import fsspec
import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    DEFAULT_PERSIST_DIR,
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.vector_stores.rag_hier._filters import NODE_KEY, build_predicate
from llama_index.vector_stores.rag_hier._nodes import node_to_passage, record_to_node

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.retrieval.svdr import SvdrMode, SvdrRetriever, default_vocab_model
from rag_hier.store.filters import Predicate
from rag_hier.store.store import MANIFEST, HierStore

if TYPE_CHECKING:
    from rag_hier.retrieval.hit import Hit

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_NAMESPACE", "RagHierVectorStore", "Similarity", "relative_score_fusion"]

Similarity = Literal["cosine", "dot_product"]
_SIMILARITIES: tuple[str, ...] = ("cosine", "dot_product")
_SVDR_MODES: tuple[str, ...] = get_args(SvdrMode)
_TOKEN_MODES = frozenset({"beta", "beta-rerank", "lexical"})
_TOKEN_INDEX_OPTIONS = frozenset({"model", "max_length"})
DEFAULT_NAMESPACE = "default"
_CONFIG_KEY = "llama_index"
_PERSIST_SUFFIX = "__vector_store"


def _normalize_rows(mat: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)


def _store_dir_for(persist_path: str | Path) -> Path:
    """The store directory for a persist path: ``d/default__vector_store.json`` → ``d/default__vector_store``."""
    p = Path(persist_path)
    return p.with_suffix("") if p.suffix == ".json" else p


def _payload_for_filters(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": payload.get("type"), "ref_doc_id": payload.get("ref_doc_id")}


def relative_score_fusion(
    dense: Sequence[tuple[str, float]], sparse: Sequence[tuple[str, float]], alpha: float, top_k: int
) -> list[tuple[str, float]]:
    """Fuse two ranked lists by relative scores: ``alpha · dense' + (1 − alpha) · sparse'``, best first.

    Each list's scores are min-max scaled to [0, 1] (all 1.0 when they are equal); an id missing from one
    list gets 0 there. ``alpha=1`` ranks by the dense scores, ``alpha=0`` by the sparse ones (LlamaIndex's
    ``VectorStoreQuery.alpha`` convention, and the default fusion of its Qdrant store). Ties keep the dense
    order, then the sparse order.
    """

    def scaled(results: Sequence[tuple[str, float]]) -> dict[str, float]:
        if not results:
            return {}
        scores = [s for _, s in results]
        lo, hi = min(scores), max(scores)
        return {i: 1.0 if hi == lo else (s - lo) / (hi - lo) for i, s in results}

    d, s = scaled(dense), scaled(sparse)
    ids = list(dict.fromkeys([i for i, _ in dense] + [i for i, _ in sparse]))
    fused = [(i, alpha * d.get(i, 0.0) + (1.0 - alpha) * s.get(i, 0.0)) for i in ids]
    fused.sort(key=lambda item: -item[1])  # stable: ties keep the order above
    return fused[:top_k]


def _token_options(token_index: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """``None`` (no token index asked for) or the token index options, validated."""
    if isinstance(token_index, bool):
        return {} if token_index else None
    if isinstance(token_index, Mapping):
        unknown = set(token_index) - _TOKEN_INDEX_OPTIONS
        if unknown:
            raise ValueError(f"token_index options must be among {sorted(_TOKEN_INDEX_OPTIONS)}; got {sorted(unknown)}")
        max_length = token_index.get("max_length", 256)
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2
        ):
            raise ValueError(f"token_index max_length must be an integer >= 2 or None, got {max_length!r}")
        return dict(token_index)
    raise ValueError(f"token_index must be True, False or a dict of token index options, got {token_index!r}")


def _attach_token_index(store: HierStore, options: Mapping[str, Any], model: str | None) -> None:
    """Give ``store`` a token index if it has none (tokenizing the nodes it holds)."""
    existing = store.extension(TokenIndexExtension.name)
    if isinstance(existing, TokenIndexExtension):
        if "model" in options and existing.model != options["model"]:
            logger.warning(
                "%s has a token index built with %r; keeping it (token_index asked for %r)",
                store.path,
                existing.model,
                options["model"],
            )
        return
    tokenizer = options.get("model") or model or (store.encoder.model_name if store.encoder else DEFAULT_MODEL)
    logger.info("adding a token index (tokenizer %s) to %s", tokenizer, store.path)
    store.add_extension(TokenIndexExtension(model=str(tokenizer), max_length=options.get("max_length", 256)))


def _close_and_remove(store: HierStore, tmpdir: str | None) -> None:
    with contextlib.suppress(Exception):
        store.close()
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


class RagHierVectorStore(BasePydanticVectorStore):
    """A rag-hier store as a LlamaIndex vector store: nodes, metadata and vectors in one directory.

    The store keeps the text and the full node (``stores_text=True``), so a ``VectorStoreIndex`` needs no
    docstore, and every write is committed to disk atomically when it returns. Filters (``MetadataFilters``
    with nested conditions, ``doc_ids``, ``node_ids``) are applied *before* the vector search, so a filtered
    query returns ``similarity_top_k`` nodes whenever that many match. Node ids map to FAISS ids that are
    never reused, so deleting and adding nodes never mixes them up.

    With ``token_index=True`` the store also keeps SVDR's binary token index of every node (built by
    tokenization alone), searched with the query text in ``VectorStoreQueryMode.SPARSE`` (``sparse_mode``:
    β, β+rerank, full, α or model-free lexical search) and fused with the dense search in
    ``VectorStoreQueryMode.HYBRID`` (relative-score fusion weighted by the query's ``alpha``). With
    ``dense=False`` the store keeps no dense vectors at all: node embeddings are ignored, retrievers pass
    only the query text (``is_embedding_query`` is false), and the default query mode searches the token
    index.

    Args:
        path: The store directory (opened if it holds a store, created otherwise). ``None`` keeps the store
            in a temporary directory removed with this object; :meth:`persist` copies it somewhere lasting.
        similarity: ``"cosine"`` (vectors and queries are L2-normalized, as ``SimpleVectorStore`` scores) or
            ``"dot_product"`` (vectors are searched as given). Recorded when the store is created; ``None``
            uses the recorded choice (``"cosine"`` for a new store).
        model: A sentence-transformers model for the store's own encoder, used for nodes that arrive
            without an embedding and for text queries (e.g. by ``HierarchicalRetriever``); ``None`` for a
            store fed only with vectors from a LlamaIndex embedding model. An existing store uses the encoder
            it was created with unless ``model`` (or ``encoder``) names another one of the same dimension.
        index: FAISS index kind for a new store: ``"flat"`` (exact), ``"ivf"``, ``"hnsw"``, or an index
            configuration dict (see ``rag_hier.IndexConfig``).
        store: Wrap an already open :class:`rag_hier.HierStore` instead (``path`` and ``model`` are then
            taken from it).
        encoder: A ready :class:`rag_hier.DenseEncoder` (to choose a device, say) instead of ``model``.
        token_index: Keep SVDR's binary token index (``True``, or a dict with ``model``, whose tokenizer
            defines the vocabulary, and ``max_length``, tokens per node, default 256; the tokenizer defaults
            to ``model``, else the offline all-MiniLM-L6-v2's). Added to an existing store that lacks one.
        dense: Keep dense vectors (default). ``False``: a token-index-only store (needs ``token_index``);
            ``model`` then only names the tokenizer and the default vocabulary encoder. Recorded when the
            store is created; ``None`` uses the recorded choice.
        sparse_mode: SVDR mode of ``SPARSE`` (and ``HYBRID``) queries: ``"beta-rerank"`` (default),
            ``"beta"``, ``"full"``, ``"alpha"`` or ``"lexical"`` (idf-weighted token overlap, no model).
        vocab_model: The vocabulary encoder (a ``rag-hier train svdr`` output or any BERT-family model);
            default: the store's model, else its token index's tokenizer model.
        rerank_m: Candidates re-ranked by ``"beta-rerank"``.

    Example:
        >>> from llama_index.core import StorageContext, VectorStoreIndex
        >>> store = RagHierVectorStore(path="./my-collection")  # doctest: +SKIP
        >>> index = VectorStoreIndex.from_documents(  # doctest: +SKIP
        ...     docs, storage_context=StorageContext.from_defaults(vector_store=store)
        ... )

    """

    stores_text: bool = True

    path: str | None = Field(default=None, description="Store directory (None: a temporary one).")
    similarity: str = Field(default="cosine", description="'cosine' or 'dot_product'.")
    model: str | None = Field(default=None, description="Model of the store's own encoder, if any.")
    index: str | dict[str, Any] = Field(default="flat", description="FAISS index kind or configuration.")
    dense: bool = Field(default=True, description="Whether the store keeps dense vectors.")
    token_index: bool = Field(default=False, description="Whether the store keeps a binary token index.")
    sparse_mode: str = Field(default="beta-rerank", description="SVDR mode of SPARSE and HYBRID queries.")
    vocab_model: str | None = Field(default=None, description="Vocabulary encoder of SVDR queries.")
    rerank_m: int = Field(default=100, description="Candidates re-ranked by beta-rerank.")

    _store: HierStore = PrivateAttr()
    _svdr: SvdrRetriever | None = PrivateAttr(default=None)
    _lock: threading.RLock = PrivateAttr(default_factory=threading.RLock)
    _view: tuple[int, np.ndarray, list[dict[str, Any]]] | None = PrivateAttr(default=None)
    _finalizer: weakref.finalize = PrivateAttr()

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        similarity: Similarity | None = None,
        model: str | None = None,
        index: str | Mapping[str, Any] = "flat",
        store: HierStore | None = None,
        encoder: DenseEncoder | None = None,
        token_index: bool | Mapping[str, Any] = False,
        dense: bool | None = None,
        sparse_mode: SvdrMode = "beta-rerank",
        vocab_model: str | None = None,
        rerank_m: int = 100,
        **kwargs: Any,
    ) -> None:
        if similarity is not None and similarity not in _SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(_SIMILARITIES)}; got {similarity!r}")
        if sparse_mode not in _SVDR_MODES:
            raise ValueError(f"sparse_mode must be one of {', '.join(_SVDR_MODES)}; got {sparse_mode!r}")
        if isinstance(rerank_m, bool) or not isinstance(rerank_m, int) or rerank_m < 1:
            raise ValueError(f"rerank_m must be an integer >= 1, got {rerank_m!r}")
        if dense is not None and not isinstance(dense, bool):
            raise ValueError(f"dense must be True, False or None, got {dense!r}")
        token_options = _token_options(token_index)
        kwargs.pop("is_embedding_query", None)  # follows ``dense`` (present in to_dict() output)
        opened_here = store is None
        tmpdir: str | None = None
        if store is None:
            if path is None:
                tmpdir = tempfile.mkdtemp(prefix="rag-hier-llama-index-")
                root = Path(tmpdir) / "store"
            else:
                root = Path(path)
            if (root / MANIFEST).exists():
                if encoder is None and model is not None and dense is not False:  # e.g. text queries
                    encoder = DenseEncoder(model)
                store = HierStore.open(root, encoder=encoder)
            else:
                keep_dense = dense is not False
                store = HierStore.create(
                    root,
                    model=model if keep_dense else None,
                    encoder=encoder if keep_dense else None,
                    index=index if isinstance(index, str) else dict(index),
                    corpus={_CONFIG_KEY: {"similarity": similarity or "cosine", "dense": keep_dense}},
                )
        try:
            if token_options is not None:
                _attach_token_index(store, token_options, model)
            resolved_dense = dense if dense is not None else store.corpus_info.get(_CONFIG_KEY, {}).get("dense", True)
            has_tokens = store.extension(TokenIndexExtension.name) is not None
            if not resolved_dense and not has_tokens:
                raise ValueError(
                    f"dense=False needs a token index to search, and the store at {store.path} has none; "
                    "pass token_index=True"
                )
        except BaseException:
            if opened_here:
                store.close()
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        recorded = store.corpus_info.get(_CONFIG_KEY, {}).get("similarity")
        if similarity is not None and recorded is not None and similarity != recorded:
            raise StoreError(f"similarity={similarity!r} but the store at {store.path} was created with {recorded!r}")
        # A store built by the engine itself records nothing: its vectors are searched as they are.
        resolved = similarity or recorded or "dot_product"
        super().__init__(  # type: ignore[call-arg]  # pydantic fields of this class
            path=None if tmpdir is not None else str(store.path),
            similarity=resolved,
            model=store.encoder.model_name if store.encoder is not None else None,
            index=store.index_config.to_dict(),
            dense=bool(resolved_dense),
            token_index=has_tokens,
            sparse_mode=sparse_mode,
            vocab_model=vocab_model,
            rerank_m=rerank_m,
            is_embedding_query=bool(resolved_dense),
            **kwargs,
        )
        self._store = store
        self._lock = threading.RLock()
        self._view = None
        self._svdr = None
        self._finalizer = weakref.finalize(self, _close_and_remove, store, tmpdir)

    @classmethod
    def class_name(cls) -> str:
        """Name used by LlamaIndex serialization."""
        return "RagHierVectorStore"

    # -- loading --------------------------------------------------------------------------------------
    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path = DEFAULT_PERSIST_DIR,
        namespace: str = DEFAULT_NAMESPACE,
        fs: fsspec.AbstractFileSystem | None = None,
        **kwargs: Any,
    ) -> RagHierVectorStore:
        """Open the store that ``StorageContext.persist(persist_dir)`` wrote (``<dir>/<namespace>__vector_store/``)."""
        return cls.from_persist_path(Path(persist_dir) / f"{namespace}{_PERSIST_SUFFIX}.json", fs=fs, **kwargs)

    @classmethod
    def from_persist_path(
        cls, persist_path: str | Path, fs: fsspec.AbstractFileSystem | None = None, **kwargs: Any
    ) -> RagHierVectorStore:
        """Open the store that :meth:`persist` wrote for ``persist_path``."""
        _check_local(fs)
        root = _store_dir_for(persist_path)
        if not (root / MANIFEST).is_file():
            raise StoreError(f"no rag-hier store at {root} (written by RagHierVectorStore.persist({persist_path!r}))")
        return cls(root, **kwargs)

    # -- properties -----------------------------------------------------------------------------------
    @property
    def client(self) -> HierStore:
        """The underlying :class:`rag_hier.HierStore`."""
        return self._store

    @property
    def store_path(self) -> Path:
        """The directory holding the store (a temporary one when created with ``path=None``)."""
        return self._store.path

    def close(self) -> None:
        """Close the store (and remove it if it lives in a temporary directory)."""
        self._finalizer()

    # -- writing --------------------------------------------------------------------------------------
    def _vectors(self, nodes: Sequence[BaseNode]) -> list[np.ndarray | None]:
        """A vector per node (``None``: stored without one, found through the token index)."""
        if not self.dense:
            return [None] * len(nodes)
        missing = [i for i, n in enumerate(nodes) if n.embedding is None]
        if missing and self._store.encoder is None and self.token_index:
            missing = []  # nodes without an embedding are found through the token index only
        elif missing and self._store.encoder is None:
            raise ValueError(
                f"node {nodes[missing[0]].node_id!r} has no embedding and the store at {self._store.path} has no "
                "encoder; embed the nodes first (e.g. through VectorStoreIndex with an embed_model) or create "
                "the store with model=..."
            )
        rows: list[np.ndarray | None] = [
            None if n.embedding is None else np.asarray(n.embedding, dtype=np.float32) for n in nodes
        ]
        if missing:
            encoder = self._store.encoder
            assert encoder is not None
            texts = [nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in missing]
            encoded = encoder.encode_documents(texts)
            for j, i in enumerate(missing):
                rows[i] = encoded[j]
        dims = {int(r.shape[0]) for r in rows if r is not None}
        if len(dims) > 1:
            raise ValueError(f"nodes carry embeddings of different dimensions: {sorted(dims)}")
        present = [(i, r) for i, r in enumerate(rows) if r is not None]
        if not present:
            return rows
        mat = np.stack([r for _, r in present]).astype(np.float32, copy=False)
        if self.similarity == "cosine":
            mat = _normalize_rows(mat)
        for j, (i, _) in enumerate(present):
            rows[i] = mat[j]
        return rows

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add (or replace, by node id) nodes with their embeddings; returns their ids."""
        nodes = list(nodes)
        if not nodes:
            return []
        vectors = self._vectors(nodes)
        with self._lock:
            # position = order of the node within its document, after the passages already stored
            next_pos: dict[str, int] = {}
            passages = []
            for node in nodes:
                doc_id = node.ref_doc_id if node.ref_doc_id is not None else node.node_id
                if doc_id not in next_pos:
                    info = self._store.get_document(doc_id)
                    next_pos[doc_id] = len(info["passage_ids"]) if info else 0
                passages.append(node_to_passage(node, next_pos[doc_id]))
                next_pos[doc_id] += 1
            self._store.add_passages(passages, vectors, policy="upsert")
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose SOURCE document is ``ref_doc_id``."""
        with self._lock:
            self._store.delete_documents([ref_doc_id])

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete nodes by id, by metadata filters, or both (ids that also match the filters).

        Without ids and filters nothing is deleted (use :meth:`clear` to empty the store).
        """
        if node_ids is None and (filters is None or not filters.filters):
            return
        predicate = build_predicate(filters)
        with self._lock:
            if node_ids is None:
                assert predicate is not None
                self._store.delete_by_filter(predicate)
                return
            ids = list(node_ids)
            if predicate is not None:
                ids = [r["id"] for r in self._records_of(ids) if predicate(r)]
            self._store.delete_passages(ids)

    def clear(self) -> None:
        """Delete every node (FAISS ids are still never reused)."""
        with self._lock:
            self._store.delete_all()

    # -- reading --------------------------------------------------------------------------------------
    def _records_of(self, node_ids: Sequence[str]) -> list[dict[str, Any]]:
        return [
            {"id": p.id, "doc_id": p.doc_id, "content": p.text, "meta": dict(p.meta), "extra": dict(p.extra)}
            for p in self._store.get_passages(node_ids)
        ]

    def get_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
    ) -> list[BaseNode]:
        """Nodes by id (in the order asked) and/or matching filters (in insertion order); all without either."""
        predicate = build_predicate(filters)
        with self._lock:
            if node_ids is not None:
                records = self._records_of(list(node_ids))
                return [record_to_node(r) for r in records if predicate is None or predicate(r)]
            passages = self._store.filter_passages(predicate)
        return [
            record_to_node({"id": p.id, "doc_id": p.doc_id, "content": p.text, "meta": p.meta, "extra": p.extra})
            for p in passages
        ]

    def _query_vector(self, query: VectorStoreQuery) -> np.ndarray:
        if query.query_embedding is not None:
            vec = np.asarray(query.query_embedding, dtype=np.float32)[None, :]
        elif query.query_str is not None and self._store.encoder is not None:
            vec = self._store.encode_queries([query.query_str])
        else:
            raise ValueError(
                "VectorStoreQuery has no query_embedding and the store has no encoder to embed query_str; "
                "pass an embedding or create the store with model=..."
            )
        return _normalize_rows(vec) if self.similarity == "cosine" else vec

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Search the store in the query's mode, after the filters, ``doc_ids`` and ``node_ids`` restrictions.

        Modes:

        - ``DEFAULT``: nearest nodes to ``query_embedding`` (``similarity_top_k``). Similarities are inner
          products (cosine similarities for a ``"cosine"`` store). On a ``dense=False`` store, ``DEFAULT``
          is the ``SPARSE`` search below (retrievers send it the query text only).
        - ``SPARSE``: SVDR search (``sparse_mode``) of ``query_str`` over the token index; ``sparse_top_k``
          (else ``similarity_top_k``) nodes, scored by the engine's ``SvdrRetriever``.
        - ``HYBRID``: the dense top ``similarity_top_k`` and the sparse top ``sparse_top_k`` (else
          ``similarity_top_k``) fused by :func:`relative_score_fusion` with weight ``alpha`` (default 0.5;
          1 = dense only, 0 = sparse only); ``hybrid_top_k`` (else ``similarity_top_k``) nodes.

        Higher similarities are better. An empty ``node_ids`` or ``doc_ids`` list means no restriction
        (``VectorStoreIndex.as_retriever()`` sends ``node_ids=[]``).

        Raises:
            ValueError: An unsupported mode, a sparse or hybrid query on a store without a token index or
                without ``query_str``, a hybrid query on a ``dense=False`` store, or ``alpha`` outside [0, 1].

        """
        mode = query.mode
        if mode == VectorStoreQueryMode.DEFAULT and not self.dense:
            mode = VectorStoreQueryMode.SPARSE
        if mode == VectorStoreQueryMode.DEFAULT:
            return self._dense_query(query, int(query.similarity_top_k or 0))
        if mode == VectorStoreQueryMode.SPARSE:
            return self._sparse_query(query, int(query.sparse_top_k or query.similarity_top_k or 0))
        if mode == VectorStoreQueryMode.HYBRID:
            return self._hybrid_query(query)
        raise ValueError(
            f"RagHierVectorStore supports the 'default', 'sparse' and 'hybrid' query modes; got {mode.value!r}"
        )

    def _dense_query(self, query: VectorStoreQuery, top_k: int) -> VectorStoreQueryResult:
        if top_k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vec = self._query_vector(query)
        with self._lock:
            index = self._store.index
            if index is None:  # nothing written yet
                return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
            allowed = self._allowed_rowids(query.filters, query.doc_ids, query.node_ids)
            scores, rowids = index.search(vec, top_k, allowed_ids=allowed)
            records = self._store.records(rowids[0].tolist())
        nodes, sims, ids = [], [], []
        for score, rowid in zip(scores[0].tolist(), rowids[0].tolist(), strict=True):
            rec = records.get(rowid)
            if rec is None:  # -1 padding: fewer matches than top_k
                continue
            nodes.append(record_to_node(rec))
            sims.append(score)
            ids.append(rec["id"])
        return VectorStoreQueryResult(nodes=nodes, similarities=sims, ids=ids)

    # -- SVDR search over the token index -------------------------------------------------------------
    def _svdr_retriever(self) -> SvdrRetriever:
        """The SVDR retriever of this store (kept with its loaded encoder)."""
        if self._svdr is None:
            mode: SvdrMode = self.sparse_mode  # type: ignore[assignment]  # validated in __init__
            encoder: Any = None
            if mode != "lexical" and (self.vocab_model is not None or mode != "alpha"):
                # α with complete stored vectors needs no model: leave the encoder to the engine then
                encoder = self.vocab_model or default_vocab_model(self._store)
            self._svdr = SvdrRetriever(self._store, mode, encoder=encoder, rerank_m=self.rerank_m)
        return self._svdr

    def _sparse_predicate(self, query: VectorStoreQuery) -> Predicate | None:
        """Metadata filters, ``doc_ids`` and ``node_ids`` as one predicate over passage records."""
        predicate = build_predicate(query.filters)
        node_ids = set(query.node_ids) if query.node_ids else None
        doc_ids = set(query.doc_ids) if query.doc_ids else None
        if node_ids is None and doc_ids is None:
            return predicate

        def restricted(record: Mapping[str, Any]) -> bool:
            if node_ids is not None and record["id"] not in node_ids:
                return False
            if doc_ids is not None and record["doc_id"] not in doc_ids:
                return False
            return predicate is None or predicate(record)

        return restricted

    def _sparse_hits(self, query: VectorStoreQuery, top_k: int) -> list[Hit]:
        if not query.query_str or not query.query_str.strip():
            raise ValueError("a sparse or hybrid query needs query_str (the text searched in the token index)")
        if self.sparse_mode in _TOKEN_MODES and self._store.extension(TokenIndexExtension.name) is None:
            raise ValueError(
                f"{self.sparse_mode!r} search needs a token index and the store at {self._store.path} has none; "
                "create the RagHierVectorStore with token_index=True"
            )
        if top_k < 1:
            return []
        with self._lock:
            if self._store.count_passages() == 0:
                return []
            return self._svdr_retriever().search(query.query_str, top_k=top_k, filters=self._sparse_predicate(query))

    def _sparse_query(self, query: VectorStoreQuery, top_k: int) -> VectorStoreQueryResult:
        hits = self._sparse_hits(query, top_k)
        return self._result([h.passage_id for h in hits], [h.score for h in hits])

    def _result(self, ids: list[str], scores: list[float]) -> VectorStoreQueryResult:
        with self._lock:
            records = {r["id"]: r for r in self._records_of(ids)}
        kept = [(i, s) for i, s in zip(ids, scores, strict=True) if i in records]
        return VectorStoreQueryResult(
            nodes=[record_to_node(records[i]) for i, _ in kept],
            similarities=[s for _, s in kept],
            ids=[i for i, _ in kept],
        )

    def _hybrid_query(self, query: VectorStoreQuery) -> VectorStoreQueryResult:
        if not self.dense:
            raise ValueError(
                f"the store at {self._store.path} keeps no dense vectors (dense=False); use the sparse mode"
            )
        alpha = 0.5 if query.alpha is None else float(query.alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 (sparse only) and 1 (dense only), got {query.alpha!r}")
        top_k = int(query.hybrid_top_k or query.similarity_top_k or 0)
        hits = self._sparse_hits(query, int(query.sparse_top_k or query.similarity_top_k or 0))
        dense = self._dense_query(query, int(query.similarity_top_k or 0))
        fused = relative_score_fusion(
            list(zip(dense.ids or [], dense.similarities or [], strict=True)),
            [(h.passage_id, h.score) for h in hits],
            alpha,
            top_k,
        )
        return self._result([i for i, _ in fused], [s for _, s in fused])

    def _allowed_rowids(
        self, filters: MetadataFilters | None, doc_ids: list[str] | None, node_ids: list[str] | None
    ) -> np.ndarray | None:
        """FAISS ids the search may return (``None``: all); id restrictions go through SQLite indexes."""
        predicate = build_predicate(filters)
        if node_ids or doc_ids:
            candidates = self._store.rowids_of(passage_ids=node_ids or None, doc_ids=doc_ids or None)
            if predicate is None:
                return candidates
            by_rowid = self._store.records(candidates.tolist())
            return np.asarray([r for r in candidates.tolist() if predicate(by_rowid[r])], dtype=np.int64)
        if predicate is None:
            return None
        rowids, records = self._filter_view()
        mask = np.fromiter((predicate(r) for r in records), dtype=np.bool_, count=len(records))
        return rowids[mask]

    def _filter_view(self) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """What metadata filters look at, for every passage with a vector, kept while the store is unchanged.

        Parsing every stored row for each filtered query costs seconds at 100k nodes; this view (ids,
        document, metadata, node class and SOURCE id: no text, no node JSON) is read once per store
        generation, so repeated filtered queries only run the predicate. Any write makes a new generation.
        """
        generation = self._store.manifest["generation"]
        if self._view is None or self._view[0] != generation:
            records: list[dict[str, Any]] = []

            def collect(rec: Mapping[str, Any]) -> bool:  # one pass over the rows, keeping what filters need
                payload = rec["extra"].get(NODE_KEY)
                extra = {} if payload is None else {NODE_KEY: _payload_for_filters(payload)}
                records.append({"id": rec["id"], "doc_id": rec["doc_id"], "meta": rec["meta"], "extra": extra})
                return True

            rowids = self._store.allowed_rowids(collect)
            assert rowids is not None and len(rowids) == len(records)
            self._view = (generation, rowids, records)
        return self._view[1], self._view[2]

    # -- persistence ----------------------------------------------------------------------------------
    def persist(self, persist_path: str, fs: fsspec.AbstractFileSystem | None = None) -> None:
        """Make the store available at ``persist_path`` (a directory; a ``.json`` suffix is dropped).

        ``StorageContext.persist(d)`` calls this with ``d/default__vector_store.json``, so the store lands in
        ``d/default__vector_store/``; load it with :meth:`from_persist_dir`. Writes are already durable, so
        when the store lives at that directory nothing is copied; otherwise the store files are copied
        (a consistent snapshot, verified before it replaces an older copy). No pickle is involved.
        """
        _check_local(fs)
        target = _store_dir_for(persist_path)
        if target.exists() and (not target.is_dir() or (not (target / MANIFEST).exists() and any(target.iterdir()))):
            raise StoreError(f"cannot persist to {target}: it exists and does not hold a rag-hier store")
        with self._lock:
            source = self._store.path
            if target.exists() and target.resolve() == source.resolve():
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
            staging.mkdir()
            try:
                # every file the committed manifest lists (SQLite, FAISS), then the manifest itself
                listed = json.loads((source / MANIFEST).read_text(encoding="utf-8")).get("files", {})
                for name in [*listed, MANIFEST]:
                    shutil.copy2(source / name, staging / name)
                HierStore.open(staging, read_only=True).close()  # verify counts and checksums
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.replace(old)
        staging.replace(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    # -- async twins: the sync work runs in a worker thread (SQLite + FAISS calls block) ------------------
    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """:meth:`add` in a worker thread."""
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """:meth:`delete` in a worker thread."""
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """:meth:`delete_nodes` in a worker thread."""
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aget_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
    ) -> list[BaseNode]:
        """:meth:`get_nodes` in a worker thread."""
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aclear(self) -> None:
        """:meth:`clear` in a worker thread."""
        await asyncio.to_thread(self.clear)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """:meth:`query` in a worker thread."""
        return await asyncio.to_thread(self.query, query, **kwargs)


def _check_local(fs: fsspec.AbstractFileSystem | None) -> None:
    if fs is None:
        return
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if not {"file", "local"} & set(protocol):
        raise NotImplementedError(
            f"RagHierVectorStore persists to the local file system only; got fs with protocol {fs.protocol!r}"
        )
