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
from typing import Any, Literal

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

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.store.store import MANIFEST, HierStore

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_NAMESPACE", "RagHierVectorStore", "Similarity"]

Similarity = Literal["cosine", "dot_product"]
_SIMILARITIES: tuple[str, ...] = ("cosine", "dot_product")
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

    _store: HierStore = PrivateAttr()
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
        **kwargs: Any,
    ) -> None:
        if similarity is not None and similarity not in _SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(_SIMILARITIES)}; got {similarity!r}")
        tmpdir: str | None = None
        if store is None:
            if path is None:
                tmpdir = tempfile.mkdtemp(prefix="rag-hier-llama-index-")
                root = Path(tmpdir) / "store"
            else:
                root = Path(path)
            if (root / MANIFEST).exists():
                if encoder is None and model is not None:  # e.g. text queries on a store fed with vectors
                    encoder = DenseEncoder(model)
                store = HierStore.open(root, encoder=encoder)
            else:
                store = HierStore.create(
                    root,
                    model=model,
                    encoder=encoder,
                    index=index if isinstance(index, str) else dict(index),
                    corpus={_CONFIG_KEY: {"similarity": similarity or "cosine"}},
                )
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
            **kwargs,
        )
        self._store = store
        self._lock = threading.RLock()
        self._view = None
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
    def _vectors(self, nodes: Sequence[BaseNode]) -> np.ndarray:
        missing = [i for i, n in enumerate(nodes) if n.embedding is None]
        if missing and self._store.encoder is None:
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
        mat = np.stack([r for r in rows if r is not None]).astype(np.float32, copy=False)
        return _normalize_rows(mat) if self.similarity == "cosine" else mat

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
        """Nearest nodes to the query embedding, after the filters, ``doc_ids`` and ``node_ids`` restrictions.

        Only ``VectorStoreQueryMode.DEFAULT`` is supported. Similarities are inner products (cosine
        similarities for a ``"cosine"`` store), higher is better. An empty ``node_ids`` or ``doc_ids``
        list means no restriction (``VectorStoreIndex.as_retriever()`` sends ``node_ids=[]``).
        """
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise ValueError(f"RagHierVectorStore supports the 'default' query mode only; got {query.mode.value!r}")
        top_k = int(query.similarity_top_k or 0)
        if top_k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vec = self._query_vector(query)
        with self._lock:
            index = self._store.index
            if index is None:  # nothing written yet
                return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
            allowed = self._allowed_rowids(query.filters, query.doc_ids, query.node_ids)
            scores, rowids = index.search(vec, top_k, allowed_ids=allowed)
            records = self._store.records_by_rowid(rowids[0].tolist())
        nodes, sims, ids = [], [], []
        for score, rowid in zip(scores[0].tolist(), rowids[0].tolist(), strict=True):
            rec = records.get(rowid)
            if rec is None:  # -1 padding: fewer matches than top_k
                continue
            nodes.append(record_to_node(rec))
            sims.append(score)
            ids.append(rec["id"])
        return VectorStoreQueryResult(nodes=nodes, similarities=sims, ids=ids)

    def _allowed_rowids(
        self, filters: MetadataFilters | None, doc_ids: list[str] | None, node_ids: list[str] | None
    ) -> np.ndarray | None:
        """FAISS ids the search may return (``None``: all); id restrictions go through SQLite indexes."""
        predicate = build_predicate(filters)
        if node_ids or doc_ids:
            candidates = self._store.rowids_of(passage_ids=node_ids or None, doc_ids=doc_ids or None)
            if predicate is None:
                return candidates
            by_rowid = self._store.records_by_rowid(candidates.tolist())
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
