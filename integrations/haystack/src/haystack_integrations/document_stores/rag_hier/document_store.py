"""RagHierDocumentStore: a Haystack document store backed by a rag-hier store directory (SQLite + FAISS)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from haystack import Document, default_from_dict, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from haystack.utils import ComponentDevice
from haystack.utils.filters import document_matches_filter
from haystack_integrations.components.embedders.rag_hier._backend import resolve_device
from haystack_integrations.document_stores.rag_hier._convert import (
    EXTRA_KEY,
    document_meta,
    document_to_passage,
    filter_roots,
    passage_to_document,
    record_view,
    to_plain_json,
    validate_filters,
)

from rag_hier.corpus.model import Document as CorpusDocument
from rag_hier.corpus.model import Passage
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DuplicateIdError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.store.extensions.sparse_embeddings import SparseEmbeddingExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.retrieval.svdr import SVDR_MODES, SvdrMode, SvdrRetriever, default_vocab_model
from rag_hier.store.filters import Predicate
from rag_hier.store.store import DATABASE, MANIFEST, HierStore, WriteSummary

logger = logging.getLogger(__name__)

__all__ = ["RagHierDocumentStore"]

T = TypeVar("T")

DOT_PRODUCT_SCALING_FACTOR = 100
"""``scale_score`` maps a dot product ``s`` to ``sigmoid(s / 100)``, as Haystack's InMemory store does."""

SPARSE_EMBEDDING_KEY = (EXTRA_KEY, "sparse_embedding")
"""Where a Document's ``sparse_embedding`` lives in ``Passage.extra`` (read by the ``sparse-embeddings`` extension)."""

_TOKEN_INDEX_OPTIONS = frozenset({"model", "max_length"})

_ENGINE_POLICY = {
    DuplicatePolicy.FAIL: "fail",
    DuplicatePolicy.SKIP: "skip",
    DuplicatePolicy.OVERWRITE: "upsert",
}


class _SharedHandle:
    """The open :class:`HierStore` of one directory, shared by the RagHierDocumentStores of a process on it.

    Pipelines loaded from YAML give every component its own store instance; sharing the handle (like
    InMemoryDocumentStore's shared storage) makes a writer's documents visible to a retriever at once, and
    serializes access to the directory (one lock, one worker thread for the async methods).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.store: HierStore | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.users = 0


_HANDLES: dict[str, _SharedHandle] = {}
_HANDLES_LOCK = threading.Lock()


def _acquire_handle(key: str) -> _SharedHandle:
    with _HANDLES_LOCK:
        handle = _HANDLES.get(key)
        if handle is None:
            handle = _HANDLES[key] = _SharedHandle()
        handle.users += 1
        return handle


def _release_handle(key: str, handle: _SharedHandle) -> None:
    """Drop one user of ``handle``; the last one closes the store and its worker thread."""
    with _HANDLES_LOCK:
        handle.users -= 1
        if handle.users > 0:
            return
        if _HANDLES.get(key) is handle:
            del _HANDLES[key]
    with handle.lock:
        if handle.store is not None:
            handle.store.close()
            handle.store = None
        if handle.executor is not None:
            handle.executor.shutdown(wait=False)
            handle.executor = None


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _hashable(value: Any) -> Any:
    """A hashable stand-in for a metadata value (lists, tuples and dicts included), for distinct counts."""
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_hashable(k), _hashable(v)) for k, v in value.items()))
    return value


def _meta_key(field: str) -> str:
    return field.removeprefix("meta.")


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    """Report engine errors as Haystack document-store errors."""
    try:
        yield
    except DuplicateIdError as exc:
        raise DuplicateDocumentError(str(exc)) from exc
    except StoreError as exc:
        raise DocumentStoreError(str(exc)) from exc


class RagHierDocumentStore:
    """A Haystack document store kept in a rag-hier store directory (SQLite + FAISS, atomic writes).

    Each Haystack ``Document`` is one passage of the store: its embedding is indexed by FAISS (vectors
    come back bit-exact), its metadata is kept exactly as written, and filters (Haystack's filter syntax,
    evaluated by Haystack's own reference matcher) are applied *before* the vector search, so a filtered
    search returns ``top_k`` documents whenever that many match. Passages are grouped into the engine's
    documents by ``meta["__parent_id"]`` (HierarchicalDocumentSplitter) or ``meta["source_id"]``
    (DocumentSplitter), which later hierarchical strategies use.

    With ``token_index=True`` the store also keeps SVDR's binary token index of every document (built by
    tokenization alone, no model), which ``RagHierSvdrRetriever`` searches with query text (β, β+rerank,
    lexical; α and full search use learned passage vectors the store fills in). With ``dense=False`` it
    never computes dense vectors: documents can be written without embeddings and are found through the
    token index. Documents written with a ``sparse_embedding`` keep it (JSON, no pickle) and are searched by
    ``RagHierSparseEmbeddingRetriever`` (exact inner product over the stored sparse embeddings).

    The directory is opened (or created) on first use, not in ``__init__``; it holds the data, the
    init parameters only say where it is. Every write is atomic and durable when it returns. All
    instances on one directory in a process share one open store (pipelines loaded from YAML build a
    store per component); another process's writes become visible after :meth:`close`.

    Usage example:
    ```python
    from haystack import Document
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection")
    store.write_documents([Document(content="Tides follow the moon.", embedding=[0.1, 0.2, 0.3])])
    store.filter_documents({"field": "content", "operator": "==", "value": "Tides follow the moon."})
    ```

    Args:
        path: The store directory (created on first use when it does not exist).
        index: Index kind used when the store is created: ``"flat"`` (exact), ``"ivf"`` or ``"hnsw"``, or a
            dict of ``rag_hier.IndexConfig`` options. An existing store keeps the index it was created with.
        model: A sentence-transformers model (name or path) the store encodes with: documents written
            without an embedding are encoded with it, and ``HierarchicalRetriever`` encodes query text
            with it. ``None``: the store only receives vectors from outside (an embedder), or uses the
            model recorded in an existing store.
        device: Device for the store's model (``"cpu"``, ``"cuda:0"``, ...); ``None`` picks CUDA when
            available. A device the machine lacks falls back to the CPU with a warning, so a saved pipeline
            loads anywhere.
        strict_datetime_comparison: Passed to Haystack's filter matcher: if true, timezone-naive and
            timezone-aware datetimes never match each other.
        token_index: Keep SVDR's binary token index (``True``, or a dict with ``model``, whose tokenizer
            defines the vocabulary, and ``max_length``, tokens per document, default 256). The tokenizer
            defaults to ``model``, else the offline all-MiniLM-L6-v2's. Added to an existing store that lacks
            one (tokenizing what it holds); the token index follows every write.
        dense: Compute dense vectors with ``model`` for documents written without an embedding (default).
            ``False``: never encode; ``model`` then only names the token index's tokenizer and the default
            vocabulary encoder of ``RagHierSvdrRetriever``, and documents keep whatever embedding they bring.

    """

    def __init__(
        self,
        path: str,
        *,
        index: str | dict[str, Any] = "flat",
        model: str | None = None,
        device: str | None = None,
        strict_datetime_comparison: bool = False,
        token_index: bool | dict[str, Any] = False,
        dense: bool = True,
    ) -> None:
        if isinstance(path, Path):
            path = str(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty string (the store directory), got {path!r}")
        if not isinstance(dense, bool):
            raise ValueError(f"dense must be True or False, got {dense!r}")
        self._index_config = self._parse_index(index)
        self._token_options = self._parse_token_index(token_index)
        self.path = path
        self.index = index
        self.model = model
        self.device = device
        self.strict_datetime_comparison = strict_datetime_comparison
        self.token_index = token_index
        self.dense = dense
        self._svdr_retrievers: dict[tuple[str, int, str | None], SvdrRetriever] = {}
        self._vocab_encoders: dict[str, Any] = {}  # model -> VocabEncoder, shared by the SVDR modes
        self._handle: _SharedHandle | None = None
        self._release: weakref.finalize | None = None
        self._handle_lock = threading.Lock()

    @staticmethod
    def _parse_index(index: str | dict[str, Any]) -> IndexConfig:
        if isinstance(index, str):
            return IndexConfig(kind=index)  # type: ignore[arg-type]
        if isinstance(index, Mapping):
            return IndexConfig.from_dict(dict(index))
        raise ValueError(f"index must be 'flat', 'ivf', 'hnsw' or a dict of index options, got {index!r}")

    @staticmethod
    def _parse_token_index(token_index: bool | dict[str, Any]) -> dict[str, Any] | None:
        if isinstance(token_index, bool):
            return {} if token_index else None
        if isinstance(token_index, Mapping):
            unknown = set(token_index) - _TOKEN_INDEX_OPTIONS
            if unknown:
                raise ValueError(
                    f"token_index options must be among {sorted(_TOKEN_INDEX_OPTIONS)}; got {sorted(unknown)}"
                )
            max_length = token_index.get("max_length", 256)
            if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
                raise ValueError(f"token_index max_length must be an integer >= 2 or None, got {max_length!r}")
            return dict(token_index)
        raise ValueError(f"token_index must be True, False or a dict of token index options, got {token_index!r}")

    # ------------------------------------------------------------------------------------------------
    # lifecycle and serialization
    # ------------------------------------------------------------------------------------------------
    def _shared(self) -> _SharedHandle:
        with self._handle_lock:
            if self._handle is None:
                key = os.path.realpath(self.path)
                self._handle = _acquire_handle(key)
                self._release = weakref.finalize(self, _release_handle, key, self._handle)
            return self._handle

    @property
    def _lock(self) -> threading.RLock:
        """The lock of this directory's shared handle (held around every store operation)."""
        return self._shared().lock

    def _hier(self) -> HierStore:
        handle = self._shared()
        with handle.lock:
            if handle.store is None:
                handle.store = self._open()
            return handle.store

    def _open(self) -> HierStore:
        root = Path(self.path)
        device = self._device()
        encoder = DenseEncoder(self.model, device=device) if self.model and self.dense else None
        with _engine_errors():
            if (root / MANIFEST).is_file():
                store = HierStore.open(root, encoder=encoder, device=device)
                recorded = (store.manifest.get("encoder") or {}).get("model")
                if self.model and self.dense and recorded and recorded != self.model:
                    logger.warning(
                        "%s was built with model %r; encoding with model=%r instead", root, recorded, self.model
                    )
            else:
                logger.info("creating a rag-hier store in %s", root)
                store = HierStore.create(root, model=None, encoder=encoder, index=self._index_config)
            try:
                self._attach_token_index(store)
            except BaseException:
                store.close()
                raise
            return store

    def _device(self) -> str | None:
        # a device this machine lacks (a store saved with "cuda" loaded on a CPU-only machine) falls back to the CPU
        return resolve_device(ComponentDevice.from_str(self.device)) if self.device else None

    def _attach_token_index(self, store: HierStore) -> None:
        """Give the store the configured token index if it has none (tokenizing the documents it holds)."""
        options = self._token_options
        if options is None:
            return
        model = options.get("model") or self.model or DEFAULT_MODEL
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
        if store.read_only:
            raise StoreError(f"{store.path} has no token index and is read-only")
        logger.info("adding a token index (tokenizer %s) to %s", model, store.path)
        store.add_extension(TokenIndexExtension(model=str(model), max_length=options.get("max_length", 256)))

    @property
    def hier_store(self) -> HierStore:
        """The underlying :class:`rag_hier.HierStore` (opened or created on first access)."""
        return self._hier()

    def warm_up(self) -> None:
        """Open the store and load its model, if it has one (idempotent and cheap once done)."""
        store = self._hier()
        if store.encoder is not None:
            _ = store.encoder.model

    def close(self) -> None:
        """Release the store; the last instance on a directory closes its files. The store reopens on next use.

        Other processes' writes become visible after a reopen (one process should write to a directory).
        """
        with self._handle_lock:
            release, self._release, self._handle = self._release, None, None
        if release is not None:
            release()

    async def close_async(self) -> None:
        """Asynchronous :meth:`close`."""
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """Serialize this store's configuration (the directory path, never its data) to a dictionary.

        ``token_index`` and ``dense`` are written only when set (not at their defaults), so pipelines saved
        before these options existed serialize exactly as they did.
        """
        options: dict[str, Any] = {}
        if self.token_index is not False:
            options["token_index"] = self.token_index
        if self.dense is not True:
            options["dense"] = self.dense
        return default_to_dict(
            self,
            path=self.path,
            index=self.index,
            model=self.model,
            device=self.device,
            strict_datetime_comparison=self.strict_datetime_comparison,
            **options,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierDocumentStore:
        """Deserialize a store from the output of :meth:`to_dict`."""
        return default_from_dict(cls, data)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={self.path!r}, model={self.model!r}, "
            f"token_index={self.token_index!r}, dense={self.dense!r})"
        )

    # ------------------------------------------------------------------------------------------------
    # filters
    # ------------------------------------------------------------------------------------------------
    def _predicate(self, filters: dict[str, Any] | None, store: HierStore) -> Predicate | None:
        """A predicate over engine passage records that applies Haystack's reference filter semantics."""
        if not filters:
            return None
        validate_filters(filters)
        roots = filter_roots(filters)
        strict = self.strict_datetime_comparison

        def embedding_of(record: Mapping[str, Any]) -> list[float] | None:
            (vector,) = store.get_embeddings([record["id"]])
            return None if vector is None else vector.tolist()

        def predicate(record: Mapping[str, Any]) -> bool:
            embedding = embedding_of(record) if "embedding" in roots else None
            view = record_view(record, roots, embedding)
            return document_matches_filter(filters, cast(Document, view), strict_datetime_comparison=strict)

        return predicate

    @staticmethod
    def _id_lookup(filters: dict[str, Any] | None) -> str | None:
        """The id of a plain ``id == "<id>"`` filter (answered by a key lookup), else ``None``."""
        if (
            isinstance(filters, dict)
            and set(filters) == {"field", "operator", "value"}
            and filters["field"] == "id"
            and filters["operator"] == "=="
            and isinstance(filters["value"], str)
        ):
            return filters["value"]
        return None

    def _matching_passages(self, filters: dict[str, Any] | None, store: HierStore) -> list[Passage]:
        doc_id = self._id_lookup(filters)
        if doc_id is not None:
            return store.get_passages([doc_id])
        return store.filter_passages(self._predicate(filters, store))

    def _matching_metas(self, filters: dict[str, Any] | None) -> list[dict[str, Any]]:
        with self._lock:
            passages = self._matching_passages(filters, self._hier())
        return [document_meta(p.meta, p.extra, p.doc_id, p.position, p.title_path) for p in passages]

    # ------------------------------------------------------------------------------------------------
    # the DocumentStore protocol
    # ------------------------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """Return the number of documents in the store."""
        with self._lock:
            return self._hier().count_passages()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Return the documents that match ``filters``, in insertion order, with their embeddings.

        A document overwritten with ``DuplicatePolicy.OVERWRITE`` moves to the end, as in Haystack's
        ``InMemoryDocumentStore``.

        Args:
            filters: A Haystack filter (see https://docs.haystack.deepset.ai/docs/metadata-filtering);
                ``None`` or ``{}`` returns every document.

        Raises:
            FilterError: The filter is malformed or compares incompatible values.

        """
        with self._lock:
            store = self._hier()
            passages = self._matching_passages(filters, store)
            embeddings = store.get_embeddings([p.id for p in passages])
        return [passage_to_document(p, e) for p, e in zip(passages, embeddings, strict=True)]

    @staticmethod
    def _check_documents(documents: Any) -> list[Document]:
        if isinstance(documents, str | bytes) or not isinstance(documents, Iterable):
            raise ValueError(f"Please provide a list of Documents, got {type(documents).__name__}.")
        docs = list(documents)
        for doc in docs:
            if not isinstance(doc, Document):
                raise ValueError(f"Please provide a list of Documents; got an item of type {type(doc).__name__}.")
        return docs

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Write documents atomically (all or nothing); returns how many were written.

        Documents without an embedding are encoded with the store's model when it has one (and have
        content) unless the store was created with ``dense=False``; otherwise they are stored without a
        vector (found by filters, the token index or their sparse embedding, not by dense vector search).
        A ``sparse_embedding`` is kept as written and indexed for ``sparse_embedding_retrieval``.

        Args:
            documents: The documents.
            policy: ``NONE`` (same as ``FAIL``), ``FAIL`` (raise if an id is stored or repeated in the
                input), ``SKIP`` (keep stored documents; the first of repeated ids wins) or ``OVERWRITE``
                (replace stored documents; the last of repeated ids wins).

        Raises:
            ValueError: ``documents`` is not a list of Documents.
            DuplicateDocumentError: Under ``FAIL``, an id already stored or repeated in the input.
            DocumentStoreError: Embeddings of different dimensions, metadata the store cannot keep, or a
                sparse embedding with negative indices or non-finite values.

        """
        docs = self._check_documents(documents)
        if policy == DuplicatePolicy.NONE:
            policy = DuplicatePolicy.FAIL
        if policy not in _ENGINE_POLICY:
            raise ValueError(f"unknown duplicate policy {policy!r}")
        if not docs:
            return 0
        if policy == DuplicatePolicy.FAIL:
            seen: set[str] = set()
            for doc in docs:
                if doc.id in seen:
                    raise DuplicateDocumentError(f"ID '{doc.id}' appears more than once in the documents written.")
                seen.add(doc.id)
        passages = [document_to_passage(doc) for doc in docs]
        with self._lock, _engine_errors():
            store = self._hier()
            vectors: list[Any] = [doc.embedding for doc in docs]
            if self.dense:
                self._encode_missing(store, docs, vectors, skip_stored=policy == DuplicatePolicy.SKIP)
            try:
                with store.batch():
                    if any(doc.sparse_embedding is not None for doc in docs):
                        self._sparse_extension(store)
                    summary = store.add_passages(passages, embeddings=vectors, policy=_ENGINE_POLICY[policy])  # type: ignore[arg-type]
            except ValueError as exc:
                if isinstance(exc, StoreError):
                    raise
                raise DocumentStoreError(f"cannot write documents to {self.path}: {exc}") from exc
        if policy == DuplicatePolicy.SKIP:
            return summary.passages_added
        return len(docs)

    @staticmethod
    def _encode_missing(store: HierStore, docs: list[Document], vectors: list[Any], *, skip_stored: bool) -> None:
        encoder = store.encoder
        if encoder is None:
            return
        todo = [i for i, doc in enumerate(docs) if doc.embedding is None and doc.content]
        if skip_stored and todo:
            stored = {p.id for p in store.get_passages([docs[i].id for i in todo])}
            todo = [i for i in todo if docs[i].id not in stored]
        if not todo:
            return
        encoded = encoder.encode_documents([cast(str, docs[i].content) for i in todo])
        for row, i in enumerate(todo):
            vectors[i] = encoded[row]

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete documents by id; unknown ids are ignored."""
        if isinstance(document_ids, str):
            raise ValueError("document_ids must be a list of ids, not a single string")
        with self._lock, _engine_errors():
            self._hier().delete_passages(list(document_ids))

    # ------------------------------------------------------------------------------------------------
    # optional methods exercised by Haystack's shared store tests
    # ------------------------------------------------------------------------------------------------
    def delete_all_documents(self, recreate_index: bool = False) -> None:
        """Delete every document.

        Args:
            recreate_index: Also recreate the store from scratch (same index kind, model, token index and
                document index): the vector dimension is forgotten, so documents with embeddings of another
                size can be written next. Only the files the store recorded in its manifest are removed.

        """
        with self._lock, _engine_errors():
            store = self._hier()
            if not recreate_index:
                store.delete_all()
                return
            root = store.path
            files = {*store.manifest.get("files", {}), MANIFEST, DATABASE, f"{DATABASE}-journal"}
            config, encoder = store.index_config, store.encoder
            token = store.extension(TokenIndexExtension.name)
            token_config = token.config() if isinstance(token, TokenIndexExtension) else None
            doc_index = store.extension("doc-index")  # DHR's document index: kept (empty), same settings
            store.close()
            handle = self._shared()
            handle.store = None
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    (root / name).unlink()
            for stray in root.glob("*.tmp"):
                stray.unlink()
            handle.store = HierStore.create(root, model=None, encoder=encoder, index=config)
            if token_config is not None:  # the same tokenizer (and fingerprint) as before
                handle.store.add_extension(TokenIndexExtension(**token_config))
            if doc_index is not None:
                handle.store.add_extension(type(doc_index).from_config(doc_index.config()))

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents matching ``filters``; returns how many were deleted."""
        if not filters:
            raise FilterError("delete_by_filter() needs a non-empty filter; use delete_all_documents() to delete all")
        with self._lock, _engine_errors():
            store = self._hier()
            doc_id = self._id_lookup(filters)
            if doc_id is not None:
                return store.delete_passages([doc_id])
            return store.delete_by_filter(cast(Predicate, self._predicate(filters, store)))

    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merge ``meta`` into the metadata of the documents matching ``filters``; returns how many.

        The new values are stored in their JSON form (a tuple comes back as a list).
        """
        if not filters:
            raise FilterError("update_by_filter() needs a non-empty filter")
        if not isinstance(meta, dict):
            raise ValueError(f"meta must be a dict, got {type(meta).__name__}")
        try:
            payload = to_plain_json(meta)
        except (TypeError, ValueError) as exc:
            raise DocumentStoreError(f"update_by_filter(): meta is not JSON serializable ({exc})") from exc
        with self._lock, _engine_errors():
            store = self._hier()
            return store.update_by_filter(cast(Predicate, self._predicate(filters, store)), payload)

    def count_documents_by_filter(self, filters: dict[str, Any]) -> int:
        """Return the number of documents matching ``filters`` (all documents for an empty filter)."""
        with self._lock:
            store = self._hier()
            if self._id_lookup(filters) is not None:
                return len(self._matching_passages(filters, store))
            return store.count_passages(self._predicate(filters, store))

    def count_unique_metadata_by_filter(self, filters: dict[str, Any], metadata_fields: list[str]) -> dict[str, int]:
        """Return, per metadata field, the number of distinct non-null values among matching documents.

        Args:
            filters: A Haystack filter; ``{}`` means every document.
            metadata_fields: Field names, with or without the ``meta.`` prefix.

        Returns:
            ``{field (without "meta."): number of distinct values}``.

        """
        metas = self._matching_metas(filters)
        result: dict[str, int] = {}
        for name in metadata_fields:
            key = _meta_key(name)
            result[key] = len({_hashable(m[key]) for m in metas if m.get(key) is not None})
        return result

    def get_metadata_fields_info(self) -> dict[str, dict[str, str]]:
        """Return the metadata fields in use with their type (``keyword``, ``int``, ``float`` or ``boolean``)."""
        types: dict[str, str] = {}
        for meta in self._matching_metas(None):
            for key, value in meta.items():
                if value is None:
                    continue
                if isinstance(value, bool):
                    types[key] = "boolean"
                elif isinstance(value, int):
                    types[key] = "int"
                elif isinstance(value, float):
                    types[key] = "float"
                else:
                    types[key] = "keyword"
        return {key: {"type": kind} for key, kind in types.items()}

    def get_metadata_field_min_max(self, metadata_field: str) -> dict[str, Any]:
        """Return ``{"min", "max"}`` of a metadata field (``None`` for both when it has no comparable values)."""
        key = _meta_key(metadata_field)
        values = [
            m[key]
            for m in self._matching_metas(None)
            if m.get(key) is not None and isinstance(m[key], int | float | str)
        ]
        if not values:
            return {"min": None, "max": None}
        try:
            return {"min": min(values), "max": max(values)}
        except TypeError:
            return {"min": None, "max": None}

    def get_metadata_field_unique_values(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Return a page of the distinct values of a metadata field, and how many there are.

        Args:
            metadata_field: The field, with or without the ``meta.`` prefix.
            search_term: Keep values containing this text (case-insensitive).
            from_: Offset of the page in the sorted distinct values.
            size: Page size.
            filters: Restrict to documents matching this filter.

        Returns:
            ``(values, total)``; values keep their type (``1``, ``1.0``, ``"1"`` and ``True`` are distinct).

        """
        key = _meta_key(metadata_field)
        unique: dict[tuple[str, Any], Any] = {}
        for meta in self._matching_metas(filters):
            value = meta.get(key)
            if value is not None:
                unique.setdefault((type(value).__name__, _hashable(value)), value)
        if search_term:
            needle = search_term.lower()
            unique = {k: v for k, v in unique.items() if needle in str(v).lower()}
        ordered = sorted(unique, key=lambda k: (str(unique[k]), k[0]))
        return [unique[k] for k in ordered[from_ : from_ + size]], len(ordered)

    # ------------------------------------------------------------------------------------------------
    # rag-hier specific
    # ------------------------------------------------------------------------------------------------
    def write_corpus(
        self,
        documents: Iterable[CorpusDocument],
        *,
        max_passage_words: int | None = None,
        policy: DuplicatePolicy = DuplicatePolicy.OVERWRITE,
        show_progress_bar: bool = False,
    ) -> WriteSummary:
        """Add structured corpus documents (``rag_hier.corpus.read_corpus``) with the engine's splitter.

        Passages never cross a section boundary, are encoded with their title path (as DHR does) by the
        store's model, and read back as Documents whose meta has ``source_id`` (the document id),
        ``split_id`` (the passage's position) and ``title_path``. Needs a store with a model.

        Args:
            documents: ``rag_hier.corpus.Document`` objects.
            max_passage_words: Passage length in words (``0``: one passage per paragraph); default: 100.
            policy: ``OVERWRITE`` replaces a stored document's passages (unchanged ones are not re-encoded),
                ``SKIP`` keeps stored documents, ``FAIL``/``NONE`` raise if one is stored.
            show_progress_bar: Show a progress bar while encoding.

        """
        engine_policy = _ENGINE_POLICY[DuplicatePolicy.FAIL if policy == DuplicatePolicy.NONE else policy]
        with self._lock, _engine_errors():
            return self._hier().add_documents(
                documents,
                max_passage_words=max_passage_words,
                policy=engine_policy,  # type: ignore[arg-type]
                show_progress_bar=show_progress_bar,
            )

    def _scale(self, store: HierStore, scores: list[float]) -> list[float]:
        encoder = store.manifest.get("encoder") or {}
        if encoder.get("normalize_embeddings"):  # cosine similarity
            return [(s + 1.0) / 2.0 for s in scores]
        return [_sigmoid(s / DOT_PRODUCT_SCALING_FACTOR) for s in scores]

    def _search(
        self,
        store: HierStore,
        query: np.ndarray,
        filters: dict[str, Any] | None,
        top_k: int,
        scale_score: bool,
        return_embedding: bool,
    ) -> list[Document]:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if top_k == 0 or store.index is None or store.dimension is None:
            return []
        if query.shape[1] != store.dimension:
            raise DocumentStoreError(
                f"the query embedding has {query.shape[1]} dimensions; the documents in {self.path} have "
                f"{store.dimension}. Embed queries with the model that embedded the documents."
            )
        predicate = self._predicate(filters, store)
        hits = DenseRetriever(store).search_vectors(query, top_k=top_k, filters=predicate)[0]
        ids = [h.passage_id for h in hits]
        passages = store.get_passages(ids)
        embeddings = store.get_embeddings(ids) if return_embedding else [None] * len(ids)
        scores = [h.score for h in hits]
        if scale_score:
            scores = self._scale(store, scores)
        return [passage_to_document(p, e, s) for p, e, s in zip(passages, embeddings, scores, strict=True)]

    def embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Return the ``top_k`` documents with the largest inner product with ``query_embedding``.

        Args:
            query_embedding: The query vector.
            filters: A Haystack filter applied before the search (exact ``top_k`` among the matches).
            top_k: How many documents to return (``0``: none).
            scale_score: Map scores to [0, 1]: ``(s + 1) / 2`` for a store whose model normalizes (cosine),
                else ``sigmoid(s / 100)`` (dot product), as Haystack's InMemory store does.
            return_embedding: Include the documents' embeddings.

        Returns:
            Documents with ``score`` set, best first.

        """
        if query_embedding is None or len(query_embedding) == 0:
            raise ValueError("query_embedding should be a non-empty list of floats.")
        query = np.asarray(query_embedding, dtype=np.float32)
        if query.ndim != 1:
            raise ValueError(f"query_embedding must be a flat list of floats, got shape {query.shape}")
        with self._lock, _engine_errors():
            return self._search(self._hier(), query[None, :], filters, top_k, scale_score, return_embedding)

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
        store = self._hier()
        encoder = store.encoder
        if encoder is None:
            raise DocumentStoreError(
                f"the store at {self.path} has no model to encode query text; create the "
                "RagHierDocumentStore with model=... or embed queries and use RagHierEmbeddingRetriever"
            )
        vector = encoder.encode_queries([query])
        with self._lock, _engine_errors():
            return self._search(self._hier(), vector, filters, top_k, scale_score, return_embedding)

    # ------------------------------------------------------------------------------------------------
    # SVDR (token index) and sparse embedding retrieval
    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _documents_for(store: HierStore, ids: list[str], scores: list[float], return_embedding: bool) -> list[Document]:
        passages = store.get_passages(ids)
        embeddings = store.get_embeddings(ids) if return_embedding else [None] * len(ids)
        return [passage_to_document(p, e, s) for p, e, s in zip(passages, embeddings, scores, strict=True)]

    def _svdr_retriever(
        self, store: HierStore, mode: SvdrMode, rerank_m: int, vocab_model: str | None
    ) -> SvdrRetriever:
        """The SVDR retriever for these settings, kept (with its loaded encoder) while the store stays open."""
        if mode not in SVDR_MODES:
            raise ValueError(f"mode must be one of {', '.join(SVDR_MODES)}; got {mode!r}")
        if not isinstance(rerank_m, int) or rerank_m < 1:
            raise ValueError(f"rerank_m must be an integer >= 1, got {rerank_m!r}")
        key = (mode, rerank_m, vocab_model)
        retriever = self._svdr_retrievers.get(key)
        if retriever is None or retriever.store is not store:
            encoder: Any = None
            if mode != "lexical" and (vocab_model is not None or mode != "alpha"):
                # α with complete stored vectors needs no model: leave the encoder to the engine then
                from rag_hier.encoders.vocab import VocabEncoder

                name = vocab_model or default_vocab_model(store)
                encoder = self._vocab_encoders.get(name)
                if encoder is None:
                    encoder = self._vocab_encoders[name] = VocabEncoder(name, device=self._device())
            retriever = SvdrRetriever(store, mode, encoder=encoder, rerank_m=rerank_m)
            self._svdr_retrievers[key] = retriever
        return retriever

    def warm_up_svdr(self, mode: SvdrMode = "beta-rerank", rerank_m: int = 100, vocab_model: str | None = None) -> None:
        """Open the store and load what SVDR search in ``mode`` needs (idempotent and cheap once done)."""
        with self._lock, _engine_errors():
            store = self._hier()
            retriever = self._svdr_retriever(store, mode, rerank_m, vocab_model)
            if mode in ("beta", "beta-rerank", "lexical"):
                tok = TokenIndexExtension.of(store)
                _ = tok.index.binarizer
            if mode in ("full", "beta", "beta-rerank"):
                _ = retriever.encoder.module

    def svdr_retrieval(
        self,
        query: str,
        mode: SvdrMode = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
    ) -> list[Document]:
        """SVDR search with query text over the token index (see ``rag_hier.retrieval.svdr.SvdrRetriever``).

        Args:
            query: The query text.
            mode: ``"beta"`` ⟨E(q), T(d)⟩, ``"beta-rerank"`` (β, then the top ``rerank_m`` re-scored by
                ⟨E(q), E(d)⟩), ``"full"`` ⟨E(q), E(d)⟩, ``"alpha"`` ⟨T(q), E(d)⟩ or ``"lexical"`` (idf-weighted
                token overlap, no model). β, β+rerank and lexical need the token index; full and α encode the
                E(d) they lack on first use. Every E(d) computed is kept in the store.
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
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        with self._lock, _engine_errors():
            store = self._hier()
            retriever = self._svdr_retriever(store, mode, rerank_m, vocab_model)
            if top_k == 0 or store.count_passages() == 0:
                return []
            hits = retriever.search(query, top_k=top_k, filters=self._predicate(filters, store))
            return self._documents_for(store, [h.passage_id for h in hits], [h.score for h in hits], return_embedding)

    def _sparse_extension(self, store: HierStore) -> SparseEmbeddingExtension:
        """The store's index of sparse embeddings, added (and filled from the stored documents) when missing."""
        ext = SparseEmbeddingExtension.of(store)
        if ext is None:
            ext = SparseEmbeddingExtension(key=SPARSE_EMBEDDING_KEY)
            store.add_extension(ext)
        elif ext.key != SPARSE_EMBEDDING_KEY:
            raise StoreError(
                f"{store.path} indexes sparse embeddings stored at {list(ext.key)}, not Haystack's; "
                "remove its 'sparse-embeddings' extension"
            )
        return ext

    def _allowed_rowids(self, store: HierStore, filters: dict[str, Any] | None) -> np.ndarray | None:
        """Rowids of every document (with or without a dense vector) matching ``filters``; ``None``: all."""
        predicate = self._predicate(filters, store)
        if predicate is None:
            return None
        rowids = store.passage_rowids()
        out: list[int] = []
        for start in range(0, rowids.shape[0], 4096):
            records = store.records(rowids[start : start + 4096].tolist())
            out.extend(r for r, rec in records.items() if predicate(rec))
        return np.asarray(sorted(out), dtype=np.int64)

    def sparse_embedding_retrieval(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Return the documents whose stored ``sparse_embedding`` has the largest inner product with the query's.

        Documents without a sparse embedding, and those sharing no index with the query (score 0), are never
        returned. Scores are the raw inner products (float32), best first; ties by insertion order.

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
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        with self._lock, _engine_errors():
            store = self._hier()
            if top_k == 0 or store.count_passages() == 0:
                return []
            if SparseEmbeddingExtension.of(store) is None and store.read_only:
                return []
            ext = self._sparse_extension(store)
            allowed = self._allowed_rowids(store, filters)
            if allowed is not None and allowed.size == 0:
                return []
            scores, rowids = ext.search(
                query_sparse_embedding.indices, query_sparse_embedding.values, top_k, allowed_ids=allowed
            )
            records = store.records(rowids.tolist())
            ids = [records[r]["id"] for r in rowids.tolist()]
            return self._documents_for(store, ids, [float(x) for x in scores.tolist()], return_embedding)

    # ------------------------------------------------------------------------------------------------
    # async twins: the sync work runs on the store's own worker thread
    # ------------------------------------------------------------------------------------------------
    async def _in_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        handle = self._shared()
        with handle.lock:
            if handle.executor is None:
                handle.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-hier-store")
            executor = handle.executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))

    async def count_documents_async(self) -> int:
        """Asynchronous :meth:`count_documents`."""
        return await self._in_worker(self.count_documents)

    async def filter_documents_async(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Asynchronous :meth:`filter_documents`."""
        return await self._in_worker(self.filter_documents, filters)

    async def write_documents_async(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Asynchronous :meth:`write_documents`."""
        return await self._in_worker(self.write_documents, documents, policy)

    async def delete_documents_async(self, document_ids: list[str]) -> None:
        """Asynchronous :meth:`delete_documents`."""
        await self._in_worker(self.delete_documents, document_ids)

    async def delete_all_documents_async(self, recreate_index: bool = False) -> None:
        """Asynchronous :meth:`delete_all_documents`."""
        await self._in_worker(self.delete_all_documents, recreate_index)

    async def delete_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`delete_by_filter`."""
        return await self._in_worker(self.delete_by_filter, filters)

    async def update_by_filter_async(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Asynchronous :meth:`update_by_filter`."""
        return await self._in_worker(self.update_by_filter, filters, meta)

    async def count_documents_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`count_documents_by_filter`."""
        return await self._in_worker(self.count_documents_by_filter, filters)

    async def count_unique_metadata_by_filter_async(
        self, filters: dict[str, Any], metadata_fields: list[str]
    ) -> dict[str, int]:
        """Asynchronous :meth:`count_unique_metadata_by_filter`."""
        return await self._in_worker(self.count_unique_metadata_by_filter, filters, metadata_fields)

    async def get_metadata_fields_info_async(self) -> dict[str, dict[str, str]]:
        """Asynchronous :meth:`get_metadata_fields_info`."""
        return await self._in_worker(self.get_metadata_fields_info)

    async def get_metadata_field_min_max_async(self, metadata_field: str) -> dict[str, Any]:
        """Asynchronous :meth:`get_metadata_field_min_max`."""
        return await self._in_worker(self.get_metadata_field_min_max, metadata_field)

    async def get_metadata_field_unique_values_async(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Asynchronous :meth:`get_metadata_field_unique_values`."""
        return await self._in_worker(
            self.get_metadata_field_unique_values, metadata_field, search_term, from_, size, filters
        )

    async def embedding_retrieval_async(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`embedding_retrieval`."""
        return await self._in_worker(
            self.embedding_retrieval, query_embedding, filters, top_k, scale_score, return_embedding
        )

    async def svdr_retrieval_async(
        self,
        query: str,
        mode: SvdrMode = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`svdr_retrieval`."""
        return await self._in_worker(
            self.svdr_retrieval, query, mode, filters, top_k, rerank_m, vocab_model, return_embedding
        )

    async def sparse_embedding_retrieval_async(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`sparse_embedding_retrieval`."""
        return await self._in_worker(
            self.sparse_embedding_retrieval, query_sparse_embedding, filters, top_k, return_embedding
        )

    async def text_retrieval_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`text_retrieval`."""
        return await self._in_worker(self.text_retrieval, query, filters, top_k, scale_score, return_embedding)

    # ------------------------------------------------------------------------------------------------
    # DHR: documents first, then their passages (rag_hier.retrieval.hierarchical)
    # ------------------------------------------------------------------------------------------------
    def _require_document_index(self, store: HierStore, auto_document_index: bool) -> None:
        """Check that ``store`` has a document index; add one when ``auto_document_index`` is true."""
        from rag_hier.store.extensions.doc_index import DocumentIndex

        existing = store.extension(DocumentIndex.name)
        if isinstance(existing, DocumentIndex):
            return
        if existing is not None:
            raise DocumentStoreError(f"the {DocumentIndex.name!r} extension of {self.path} is not a DocumentIndex")
        if not auto_document_index:
            raise DocumentStoreError(
                f"the store at {self.path} has no document index, which hierarchical (DHR) retrieval needs. "
                "Pass auto_document_index=True to HierarchicalRetriever (it builds the index on first use; "
                "every later write keeps it current), or add it once with "
                "`document_store.hier_store.add_extension(rag_hier.store.extensions.doc_index.DocumentIndex())`, or index with "
                "`rag-hier index --hierarchical`; mode='flat' searches all passages without it"
            )
        if store.read_only:
            raise DocumentStoreError(f"the store at {self.path} has no document index and is read-only")
        logger.info("adding a document index (DHR) to %s", store.path)
        store.add_extension(DocumentIndex())

    def hierarchical_retrieval(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        *,
        k1: int = 500,
        lambda_: float = 0.0,
        mode: str = "serial",
        auto_document_index: bool = False,
    ) -> list[Document]:
        """Dense Hierarchical Retrieval with query text: the top-``k1`` documents, then their passages.

        Runs the engine's ``rag_hier.retrieval.HierarchicalRetriever`` over the store's document index
        (extension ``"doc-index"``). Each returned Document is a passage with ``score`` = the fused score
        ``passage + lambda_ * document`` (scaled by ``scale_score`` like :meth:`embedding_retrieval`),
        ``meta["scores"] = {"passage", "document", "fused"}`` (raw scores) and ``meta["parent_document"] =
        {"id", "title", "title_path", "meta"}`` (the engine document the passage belongs to; see the class
        docstring for how Documents are grouped into documents). These two keys replace any keys of the same
        name in the stored meta, in the returned copy only.

        Args:
            query: The query text (encoded by the store's model).
            filters: A Haystack filter on passages, applied before the search; only documents with a
                matching passage are ranked.
            top_k: How many passages to return (``0``: none).
            scale_score: Map the fused score to [0, 1] as :meth:`embedding_retrieval` does (exactly so when
                ``lambda_`` is 0).
            return_embedding: Include the passages' embeddings.
            k1: Documents kept by the first stage (``mode="serial"``).
            lambda_: Weight of the document score in the fused score.
            mode: ``"serial"`` (passages of the top-``k1`` documents only) or ``"parallel"`` (every passage,
                fused with its document's score).
            auto_document_index: Build the document index when the store has none (it then follows every
                write); otherwise a store without one raises.

        Raises:
            ValueError: ``query`` is empty, ``top_k`` is negative, or ``k1``/``lambda_``/``mode`` are invalid.
            DocumentStoreError: The store has no model, or no document index and ``auto_document_index`` is
                false.

        """
        from rag_hier.retrieval.hierarchical import HierarchicalRetriever as DHRRetriever

        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        if not self.dense:
            raise DocumentStoreError(
                f"the store at {self.path} keeps no dense vectors (dense=False), which hierarchical (DHR) "
                "retrieval needs; search it with RagHierSvdrRetriever"
            )
        store = self._hier()
        options: dict[str, Any] = {"k1": k1, "lambda_": lambda_, "mode": mode}
        DHRRetriever(store, **options)  # validates k1, lambda_ and mode
        if store.encoder is None:
            raise DocumentStoreError(
                f"the store at {self.path} has no model to encode query text; create the "
                "RagHierDocumentStore with model=... or embed queries and use RagHierEmbeddingRetriever"
            )
        with self._lock, _engine_errors():
            self._require_document_index(store, auto_document_index)
        if top_k == 0:
            return []
        with _engine_errors():  # encoding runs outside the lock, as in text_retrieval
            passage_q, doc_q = DHRRetriever(store, **options).encode_queries([query])
        with self._lock, _engine_errors():
            store = self._hier()
            retriever = DHRRetriever(store, **options)
            hits = retriever.search_vectors(
                passage_q, top_k=top_k, filters=self._predicate(filters, store), doc_vectors=doc_q
            )[0]
            ids = [h.passage_id for h in hits]
            passages = {p.id: p for p in store.get_passages(ids)}
            embeddings = store.get_embeddings(ids) if return_embedding else [None] * len(ids)
            parents = {d: store.get_document(d) for d in dict.fromkeys(h.doc_id for h in hits)}
        scores = [h.score for h in hits]
        if scale_score:
            scores = self._scale(store, scores)
        out: list[Document] = []
        for hit, embedding, score in zip(hits, embeddings, scores, strict=True):
            passage = passages.get(hit.passage_id)
            if passage is None:  # pragma: no cover - read under the same lock as the search
                continue
            doc = passage_to_document(passage, embedding, score)
            parent = parents.get(hit.doc_id) or {}
            doc.meta["scores"] = dict(hit.scores)
            doc.meta["parent_document"] = {
                "id": hit.doc_id,
                "title": parent.get("title", ""),
                "title_path": list(hit.title_path),
                "meta": dict(parent.get("meta") or {}),
            }
            out.append(doc)
        return out

    async def hierarchical_retrieval_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        *,
        k1: int = 500,
        lambda_: float = 0.0,
        mode: str = "serial",
        auto_document_index: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`hierarchical_retrieval` (on the store's worker thread)."""
        return await self._in_worker(
            self.hierarchical_retrieval,
            query,
            filters,
            top_k,
            scale_score,
            return_embedding,
            k1=k1,
            lambda_=lambda_,
            mode=mode,
            auto_document_index=auto_document_index,
        )
