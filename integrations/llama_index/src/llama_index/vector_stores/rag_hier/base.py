"""RagHierVectorStore: a rag-hier store (SQLite + FAISS directory, or a Milvus collection) as a LlamaIndex vector store.

A thin adapter: it turns nodes into passages (:mod:`._nodes`), LlamaIndex filters into a predicate over
passage records (:mod:`._filters`) and the engine's hits back into nodes; everything else is the engine's
public API. Queries run the registered strategies (``dense``, ``svdr-*``, ``bm25``, ``fusion``); filters
become candidate rowids through ``HierStore.matching_rowids``; ``persist`` is ``HierStore.snapshot``; the token
index and the BM25 index are ``HierStore.ensure_extension("token-index")`` and ``ensure_extension("bm25")``.
Reads go through a read-only handle; the first write opens a read-write handle on the same directory (both are
the engine's ``StoreSession``, opened by :mod:`._lifecycle`), and both share the store's one engine (one
consistent view, which also follows other processes' commits). With ``uri=`` the store is a collection on the
engine's Milvus backend (a Milvus Lite file or a server); everything above works there the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

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
from llama_index.vector_stores.rag_hier._filters import build_filter, build_predicate
from llama_index.vector_stores.rag_hier._lifecycle import MILVUS_TOKEN_ENV as MILVUS_TOKEN_ENV
from llama_index.vector_stores.rag_hier._lifecycle import (
    bm25_options,
    close_session,
    milvus_options,
    open_session,
)
from llama_index.vector_stores.rag_hier._nodes import hit_to_node, node_to_passage, passage_record, record_to_node

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.encoders.identity import other_store_model
from rag_hier.errors import InvalidInputError, StoreError
from rag_hier.retrieval.base import Queries, Retriever
from rag_hier.retrieval.fusion import FUSIONS, FusionRetriever
from rag_hier.retrieval.hit import Hit
from rag_hier.retrieval.registry import build_retriever
from rag_hier.retrieval.svdr import SvdrMode
from rag_hier.store.contract import StoreBackend
from rag_hier.store.extensions.bm25 import BM25Extension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.filters import Predicate
from rag_hier.store.hit_table import HitRowsMode, check_hit_rows
from rag_hier.store.records import ModelSwitch
from rag_hier.store.session import StoreSession, token_index_options
from rag_hier.store.state import MANIFEST

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_NAMESPACE", "RagHierVectorStore", "Similarity", "SparseMode"]

Similarity = Literal["cosine", "dot_product"]
SparseMode = Literal[SvdrMode, "bm25"]
"""What ``SPARSE`` and ``HYBRID`` queries search: an SVDR mode, or ``"bm25"`` (the ``bm25`` strategy)."""
_SIMILARITIES: tuple[str, ...] = ("cosine", "dot_product")
_SVDR_MODES: tuple[str, ...] = get_args(SvdrMode)
_BM25_MODE = "bm25"
_SPARSE_MODES: tuple[str, ...] = (*_SVDR_MODES, _BM25_MODE)
_TOKEN_MODES = frozenset({"beta", "beta-rerank", "lexical"})
_TOKEN_INDEX = TokenIndexExtension.name
_BM25 = BM25Extension.name
DEFAULT_NAMESPACE = "default"
_PERSIST_SUFFIX = "__vector_store"
_MILVUS_POINTER = "rag_hier_milvus"
"""The key of the JSON file :meth:`RagHierVectorStore.persist` writes for a Milvus store (where it lives)."""

Store = StoreBackend
"""A handle on the store: a local directory or a Milvus collection, through the store contract."""


def _store_filter(
    store: Store,
    filters: MetadataFilters | None,
    *,
    doc_ids: list[str] | None = None,
    node_ids: list[str] | None = None,
) -> Predicate | None:
    """The engine filter of LlamaIndex filters on ``store``: the predicate, with the coarse part it can push down."""
    pushdown = store.filter_pushdown
    return build_filter(
        filters, doc_ids=doc_ids, node_ids=node_ids, numbers=pushdown.numbers, max_members=pushdown.max_members
    )


NO_QUERY_EMBEDDING = (
    "the query has no embedding (query_embedding) and the store at {location} has no encoder to embed its text; "
    "supply one of: QueryBundle.embedding (VectorStoreQuery.query_embedding), an embed_model= on the retriever "
    "(RagHierRetriever / HierarchicalRetriever, or the index's embed model through from_index() / "
    "index.as_retriever()), or the store's own model (RagHierVectorStore(path, model=...))"
)
"""The error for a dense query without a vector: it names every way to supply one."""


def _normalize_rows(mat: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)


def check_vector(values: Any, what: str) -> np.ndarray:
    """``values`` as a real, finite, non-empty float32 vector (``InvalidInputError``, a ``ValueError``, otherwise).

    Values too large for float32 count as infinite.
    """
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not a vector of numbers ({exc})") from exc
    kind = arr.dtype.kind
    if kind not in "fiub":
        if kind == "c":
            raise InvalidInputError(f"{what} holds complex numbers; vectors must be real")
        raise InvalidInputError(f"{what} is not a vector of numbers (dtype {arr.dtype})")
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InvalidInputError(f"{what} must be a non-empty flat list of numbers, got shape {arr.shape}")
    with np.errstate(over="ignore"):
        vec = arr.astype(np.float32)
    if not np.isfinite(vec).all():
        raise InvalidInputError(f"{what} contains NaN or infinite values (or values beyond float32's range)")
    return vec


_F32_MAX_SQUARED = float(np.finfo(np.float32).max) ** 2


def _query_row(values: Any, what: str, *, unit: bool) -> np.ndarray:
    """``values`` as one ``(1, dimension)`` float32 row, scaled to unit length when ``unit`` (a zero vector stays zero).

    The checks of :func:`check_vector` (the same errors), with one dot product for the finiteness and range checks
    and the norm: a query's vector takes this path on every query.
    """
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what} is not a vector of numbers ({exc})") from exc
    if arr.dtype != np.float64 or arr.ndim != 1 or arr.shape[0] == 0:
        return _checked_row(arr, what, unit=unit)
    with np.errstate(over="ignore"):  # NaN or inf if any value is, or if a square overflows
        squares = float(np.dot(arr, arr))
    if not squares <= _F32_MAX_SQUARED:  # then some value may not be finite in float32: the exact checks say which
        return _checked_row(arr, what, unit=unit)
    vec = arr.astype(np.float32)
    if unit and squares > 0:  # in float32 as np.linalg.norm computes it: the engine's own queries round alike
        norm = np.sqrt(np.add.reduce(vec * vec))
        return (vec / norm if norm > 0 else np.zeros_like(vec))[None, :]
    return vec[None, :]


def _checked_row(values: Any, what: str, *, unit: bool) -> np.ndarray:
    """:func:`_query_row` for any input: :func:`check_vector`, then scaled in float32."""
    vec = check_vector(values, what)[None, :]
    return _normalize_rows(vec) if unit else vec


def _store_dir_for(persist_path: str | Path) -> Path:
    """The store directory for a persist path: ``d/default__vector_store.json`` → ``d/default__vector_store``."""
    p = Path(persist_path)
    return p.with_suffix("") if p.suffix == ".json" else p


def llm_questions(llm: Any, *, prompt: str | None = None, num_questions: int = 2) -> Callable[[str], list[str]]:
    """A question generator for ``tune(generator=...)`` from a LlamaIndex ``LLM`` (as ``generate_qa_embedding_pairs``).

    Each passage is sent with ``llm.complete`` (``prompt``, with ``{context}`` and ``{num_questions}``; default:
    :data:`rag_hier.tuning.generate.DEFAULT_PROMPT`); the reply's lines are the questions.
    """
    from rag_hier.tuning.generate import DEFAULT_PROMPT, questions_from_reply

    template = prompt or DEFAULT_PROMPT

    def ask(text: str) -> list[str]:
        return questions_from_reply(llm.complete(template.format(context=text, num_questions=num_questions)).text)

    ask.name = f"llama-index:{type(llm).__module__}.{type(llm).__qualname__}"  # type: ignore[attr-defined]
    return ask


def _check_node_ids(node_ids: Any, method: str) -> None:
    """A single id string is a ``TypeError`` (it would be read as one id per character and match nothing)."""
    if isinstance(node_ids, str | bytes):
        raise TypeError(
            f"{method}() takes a list of node ids, got the string {node_ids!r:.80}: pass [{node_ids!r:.80}]"
        )


class RagHierVectorStore(BasePydanticVectorStore):
    """A rag-hier store as a LlamaIndex vector store: nodes, metadata and vectors in one directory.

    The store keeps the text and the full node (``stores_text=True``), so a ``VectorStoreIndex`` needs no
    docstore, and every write is committed to disk atomically when it returns. Filters (``MetadataFilters``
    with nested conditions, ``doc_ids``, ``node_ids``) are applied *before* the vector search, so a filtered
    query returns ``similarity_top_k`` nodes whenever that many match. Node ids map to FAISS ids that are
    never reused, so deleting and adding nodes never mixes them up.

    Reads use a read-only handle on the directory (opening it never touches a file); the first write opens a
    read-write handle. Every ``RagHierVectorStore`` (and ``HierStore``) on one directory in a process shares one
    engine, so they all see one view, and a write by another process is seen at the next query.

    With ``token_index=True`` the store also keeps SVDR's binary token index of every node (built by
    tokenization alone), searched with the query text in ``VectorStoreQueryMode.SPARSE`` (``sparse_mode``:
    β, β+rerank, full, α or model-free lexical search) and fused with the dense search in
    ``VectorStoreQueryMode.HYBRID`` (the engine's ``fusion`` strategy: ``hybrid_fusion``, by default relative-score
    fusion, weighted by the query's ``alpha``). With ``bm25=True`` it keeps a BM25 index of every node (the
    ``bm25`` store extension: term frequencies, no model), searched the same ways with ``sparse_mode="bm25"``.
    With ``dense=False`` the store keeps no dense vectors at all: node embeddings are ignored, retrievers pass
    only the query text (``is_embedding_query`` is false), and the default query mode is the sparse search.

    Args:
        path: The store directory (opened if it holds a store, created otherwise). ``None`` keeps the store
            in a temporary directory removed with this object; :meth:`persist` copies it somewhere lasting.
        uri: Instead of ``path``, a Milvus collection (opened if it exists, created otherwise): a Milvus Lite
            file (``./collection.db``; ``pip install 'rag-hier[milvus]'``) or a server (``http://host:19530``);
            a ``#name`` suffix names the collection (default ``rag_hier``). See ``docs/milvus.md``.
        token: Milvus credentials (``"user:password"`` or an API key); default: the environment variable
            ``RAG_HIER_MILVUS_TOKEN``. Never serialized (``to_dict``/``persist`` leave it out; a loaded store
            reads the variable again, or takes ``token=`` from ``from_dict(data, token=...)``).
        db_name: The Milvus database (servers; ``""``: the server's default).
        timeout: Seconds per Milvus call.
        client_options: Passed to pymilvus' ``MilvusClient`` as given (TLS: ``secure``, ``server_pem_path``,
            ``server_name``, ``ca_pem_path``, ``client_pem_path``, ``client_key_path``); credentials are refused
            here (use ``token``).
        dimension: The vector dimension of a new store without a model. A Milvus collection fixes it when it
            is created, so a new collection needs ``dimension`` or ``model``; a local store learns it from the
            first vectors written.
        similarity: ``"cosine"`` (vectors and queries are L2-normalized, as ``SimpleVectorStore`` scores) or
            ``"dot_product"`` (vectors are searched as given). Recorded when the store is created; ``None``
            uses the recorded choice (``"cosine"`` for a new store; for a store made by the engine or the
            Haystack adapter, the similarity it records, ``HierStore.similarity``).
        model: A sentence-transformers model for the store's own encoder, used for nodes that arrive
            without an embedding and for text queries (e.g. by ``HierarchicalRetriever``); ``None`` for a
            store fed only with vectors from a LlamaIndex embedding model. On an existing store ``model`` (or
            ``encoder``) must be the store's model: a model the store encoded with before (its base, before
            ``tune`` adopted a tuned one) gives way to the store's current model; another one is refused unless
            ``allow_other_model=True``.
        index: FAISS index kind for a new store: ``"flat"`` (exact), ``"ivf"``, ``"hnsw"``, or an index
            configuration dict (see ``rag_hier.IndexConfig``).
        store: Wrap an already open :class:`rag_hier.HierStore` instead (``path`` and ``model`` are then
            taken from it; it serves reads and writes as it is).
        encoder: A ready :class:`rag_hier.DenseEncoder` (to choose a device, say) instead of ``model``.
        token_index: Keep SVDR's binary token index (``True``, or a dict with ``model``, whose tokenizer
            defines the vocabulary, and ``max_length``, tokens per node, default 256; the tokenizer defaults
            to ``model``, else the offline all-MiniLM-L6-v2's). Added to an existing store that lacks one.
        bm25: Keep a BM25 index (the ``bm25`` store extension: per node, the term frequencies of its text after
            bm25s's tokenization; ``True``, or a dict with ``stopwords``, a bm25s stopword list, default
            ``"en"``, or ``None``, and ``stemmer``, a PyStemmer algorithm, default ``"english"``, or ``None``).
            Added to an existing store that lacks one (tokenizing the nodes it holds); it follows every add and
            delete. Searched by ``sparse_mode="bm25"``.
        dense: Keep dense vectors (default). ``False``: a store without dense vectors (needs ``token_index`` or
            ``bm25``); ``model`` then only names the tokenizer and the default vocabulary encoder. Recorded when
            the store is created; ``None`` uses the recorded choice.
        sparse_mode: What ``SPARSE`` (and ``HYBRID``) queries search: an SVDR mode over the token index,
            ``"beta-rerank"``, ``"beta"``, ``"full"``, ``"alpha"`` or ``"lexical"`` (idf-weighted token overlap,
            no model), or ``"bm25"`` (Lucene's BM25 over the BM25 index, no model). ``None`` (default):
            ``"bm25"`` when the store has a BM25 index and no token index, else ``"beta-rerank"``.
        vocab_model: The vocabulary encoder (a ``rag-hier train svdr`` output or any BERT-family model);
            default: the store's model, else its token index's tokenizer model.
        rerank_m: Candidates re-ranked by ``"beta-rerank"``.
        hybrid_fusion: The fusion function of ``HYBRID`` queries, a name in the engine's fusion registry
            (``rag_hier.retrieval.fusion.FUSIONS``): ``"relative_score"`` (default, LlamaIndex's own),
            ``"rrf"``, ``"dbsf"``, ``"convex"``, or one added with ``rag_hier.retrieval.register_fusion``
            (the counterpart of Qdrant's ``hybrid_fusion_fn``). Weights are ``(alpha, 1 - alpha)``.
        allow_other_model: Encode with ``model`` / ``encoder`` even when the existing store's vectors come from
            another model (a warning names both); by default that is refused with one line naming both.

    Example:
        >>> from llama_index.core import StorageContext, VectorStoreIndex
        >>> store = RagHierVectorStore(path="./my-collection")  # doctest: +SKIP
        >>> index = VectorStoreIndex.from_documents(  # doctest: +SKIP
        ...     docs, storage_context=StorageContext.from_defaults(vector_store=store)
        ... )

    """

    stores_text: bool = True

    path: str | None = Field(default=None, description="Store directory (None: a temporary one, or uri).")
    uri: str | None = Field(default=None, description="Milvus URI of the collection (instead of path).")
    db_name: str = Field(default="", description="Milvus database.")
    timeout: float | None = Field(default=30.0, description="Seconds per Milvus call.")
    client_options: dict[str, Any] | None = Field(default=None, description="pymilvus MilvusClient options.")
    similarity: str = Field(default="cosine", description="'cosine' or 'dot_product'.")
    model: str | None = Field(default=None, description="Model of the store's own encoder, if any.")
    index: str | dict[str, Any] = Field(default="flat", description="FAISS index kind or configuration.")
    dense: bool = Field(default=True, description="Whether the store keeps dense vectors.")
    token_index: bool = Field(default=False, description="Whether the store keeps a binary token index.")
    bm25: bool = Field(default=False, description="Whether the store keeps a BM25 index.")
    sparse_mode: str = Field(default="beta-rerank", description="What SPARSE and HYBRID queries search.")
    vocab_model: str | None = Field(default=None, description="Vocabulary encoder of SVDR queries.")
    rerank_m: int = Field(default=100, description="Candidates re-ranked by beta-rerank.")
    hybrid_fusion: str = Field(default="relative_score", description="Fusion function of HYBRID queries.")
    hit_rows: str = Field(default="sqlite", description="Where dense hits' rows are read: 'sqlite' or 'memory'.")
    allow_other_model: bool = Field(
        default=False, description="Encode with model=/encoder= even when the store's vectors come from another model."
    )

    _root: Path | None = PrivateAttr(default=None)
    _milvus: dict[str, Any] | None = PrivateAttr(default=None)
    _session: StoreSession = PrivateAttr()
    _reader: Store = PrivateAttr()
    _sparse: Retriever[Any] | None = PrivateAttr(default=None)
    _dense: Retriever[Any] | None = PrivateAttr(default=None)
    _finalizer: weakref.finalize = PrivateAttr()

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        uri: str | None = None,
        token: str | None = None,
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: Mapping[str, Any] | None = None,
        dimension: int | None = None,
        similarity: Similarity | None = None,
        model: str | None = None,
        index: str | Mapping[str, Any] = "flat",
        store: Store | None = None,
        encoder: DenseEncoder | None = None,
        token_index: bool | Mapping[str, Any] = False,
        bm25: bool | Mapping[str, Any] = False,
        dense: bool | None = None,
        sparse_mode: SparseMode | None = None,
        vocab_model: str | None = None,
        rerank_m: int = 100,
        hybrid_fusion: str = "relative_score",
        hit_rows: HitRowsMode = "sqlite",
        allow_other_model: bool = False,
        **kwargs: Any,
    ) -> None:
        if similarity is not None and similarity not in _SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(_SIMILARITIES)}; got {similarity!r}")
        if sparse_mode is not None and sparse_mode not in _SPARSE_MODES:
            raise ValueError(f"sparse_mode must be one of {', '.join(_SPARSE_MODES)} or None; got {sparse_mode!r}")
        if isinstance(rerank_m, bool) or not isinstance(rerank_m, int) or rerank_m < 1:
            raise ValueError(f"rerank_m must be an integer >= 1, got {rerank_m!r}")
        if not isinstance(hybrid_fusion, str) or hybrid_fusion not in FUSIONS:
            raise ValueError(
                f"hybrid_fusion must be a registered fusion function ({', '.join(sorted(FUSIONS))}); "
                f"got {hybrid_fusion!r}"
            )
        if dense is not None and not isinstance(dense, bool):
            raise ValueError(f"dense must be True, False or None, got {dense!r}")
        tokens, bm25_config = token_index_options(token_index), bm25_options(bm25)
        kwargs.pop("is_embedding_query", None)  # follows ``dense`` (present in to_dict() output)
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive integer or None, got {dimension!r}")
        milvus = milvus_options(path, uri, token, db_name, timeout, client_options) if uri is not None else None
        if store is not None and (path is not None or uri is not None):
            raise ValueError("give one of path, uri and store")
        check_hit_rows(hit_rows)
        if store is not None and hit_rows != "sqlite":
            raise ValueError("hit_rows applies to a store this vector store opens; with store=, open it with hit_rows")
        opened = open_session(
            path,
            uri=uri,
            milvus=milvus,
            store=store,
            encoder=encoder,
            model=model,
            dimension=dimension,
            similarity=similarity,
            index=index,
            dense=dense,
            tokens=tokens,
            bm25=bm25_config,
            hit_rows=hit_rows,
            allow_other_model=allow_other_model,
        )
        fields, opts = opened.fields, opened.milvus or {}
        super().__init__(  # type: ignore[call-arg]  # pydantic fields of this class
            path=None if opened.tmpdir is not None or opened.root is None else str(opened.root),
            uri=opened.uri,
            db_name=opts.get("db_name", ""),
            timeout=opts.get("timeout", 30.0),
            client_options=opts.get("client_options") or None,
            similarity=fields["similarity"],
            model=fields["model"],
            index=fields["index"],
            dense=fields["dense"],
            token_index=fields["token_index"],
            bm25=fields["bm25"],
            sparse_mode=sparse_mode or fields["default_sparse_mode"],
            vocab_model=vocab_model,
            rerank_m=rerank_m,
            hybrid_fusion=hybrid_fusion,
            hit_rows=hit_rows,
            allow_other_model=allow_other_model,
            is_embedding_query=fields["dense"],
            **kwargs,
        )
        self._root = opened.root
        self._milvus = opened.milvus
        self._session = opened.session
        self._reader = opened.reader
        self._sparse = None
        self._finalizer = weakref.finalize(self, close_session, opened.session, opened.tmpdir)

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
        pointer = Path(persist_path)
        if not (root / MANIFEST).is_file() and pointer.suffix == ".json" and pointer.is_file():
            try:
                where = json.loads(pointer.read_text(encoding="utf-8"))[_MILVUS_POINTER]
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{pointer} is not a rag-hier Milvus store pointer ({exc})") from exc
            return cls(**{**where, **kwargs})
        if not (root / MANIFEST).is_file():
            raise StoreError(f"no rag-hier store at {root} (written by RagHierVectorStore.persist({persist_path!r}))")
        return cls(root, **kwargs)

    # -- handles --------------------------------------------------------------------------------------
    @property
    def reader(self) -> Store:
        """The handle queries read through (read-only unless the store was given as ``store=``)."""
        return self._reader

    @property
    def client(self) -> Store:
        """The underlying store, writable (the read-write handle is opened on first use).

        A :class:`rag_hier.HierStore` for a directory, a :class:`rag_hier.store.milvus.MilvusStore` for a
        ``uri`` (the same store contract).

        It shares the engine of :attr:`reader`, so a write through it (``client.add_extension(...)``,
        ``client.update_meta(...)``) is seen by the next query at once.
        """
        return self._writable()

    @property
    def _writer(self) -> Store | None:
        """The read-write handle, if one is open."""
        return self._session.open_writer

    def _writable(self) -> Store:
        """The read-write handle, opened on the first write (it shares the reader's engine)."""
        return self._session.writer()

    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune the store's model on judged queries; adopt it only when it measures better.

        :meth:`rag_hier.HierStore.tune` on this store (``queries``: a file or ``{query id: text}``; ``qrels``:
        a file or ``{query id: {document id: grade}}``; ``options``: :class:`rag_hier.TuneConfig` fields). Once
        adopted, queries given as text (``RagHierRetriever``, or a query without an embedding) are encoded with
        the tuned model from the next query on, and so does ``RagHierEmbedding(vector_store=...)``; a
        ``RagHierEmbedding`` of the old model is refused by :meth:`query`. Without judged queries, pass ``generator=``:
        a LlamaIndex ``LLM`` (asked for questions about each sampled passage, see :func:`llm_questions`) or any
        callable ``(passage text) -> list[str]``. Returns the :class:`rag_hier.TuneReport`.
        """
        generator = options.get("generator")
        if generator is not None and not callable(generator) and hasattr(generator, "complete"):
            options["generator"] = llm_questions(generator)
        return self._writable().tune(queries, qrels, **options)

    def rollback_model(self, to: str = "previous") -> ModelSwitch:
        """Return the store to the model it encoded with before the last tuning (re-encodes every passage).

        ``to="original"``: to the model the store was built with. Returns a :class:`rag_hier.ModelSwitch`: the
        committed ``generation``, the ``model`` now current, the ``previous`` one left and the ``direction``
        (``"back"``, ``"forward"``, ``"original"``); ``print()`` it for one line.
        """
        return self._writable().rollback_model(to=to)

    @property
    def store_path(self) -> Path:
        """The directory holding the store (a temporary one when created with ``path=None``).

        Raises:
            StoreError: The store is a Milvus collection (it has no directory; see :attr:`location`).

        """
        if self._root is None:
            raise StoreError(f"the store is the Milvus collection {self.location}, not a directory")
        return self._root

    @property
    def location(self) -> str:
        """Where the store lives, for messages: its directory, or its Milvus ``URI#collection``."""
        return str(self._root) if self._root is not None else self._reader.location

    def close(self) -> None:
        """Close the store's handles (and remove the store if it lives in a temporary directory)."""
        self._finalizer()

    # -- writing --------------------------------------------------------------------------------------
    def _vectors(self, nodes: Sequence[BaseNode]) -> list[np.ndarray | None]:
        """A vector per node (``None``: stored without one, found through the token index)."""
        if not self.dense:
            return [None] * len(nodes)
        rows: list[np.ndarray | None] = [
            None if n.embedding is None else check_vector(n.embedding, f"the embedding of node {n.node_id!r}")
            for n in nodes
        ]
        missing = [i for i, r in enumerate(rows) if r is None]
        encoder = self._reader.encoder
        if missing and encoder is None and self._has_sparse_index():
            missing = []  # nodes without an embedding are found through the token or BM25 index only
        elif missing and encoder is None:
            raise ValueError(
                f"node {nodes[missing[0]].node_id!r} has no embedding and the store at {self.location} has no "
                "encoder; embed the nodes first (e.g. through VectorStoreIndex with an embed_model) or create "
                "the store with model=..."
            )
        if missing:
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
        store = self._writable()
        with store.batch():  # one commit; positions read inside it see exactly what is stored
            # position = order of the node within its document, after the stored passages this add keeps
            # (a node re-added under its id replaces its passage, so it does not count as kept)
            replaced = {n.node_id for n in nodes}
            next_pos: dict[str, int] = {}
            passages = []
            for node in nodes:
                doc_id = node.ref_doc_id if node.ref_doc_id is not None else node.node_id
                if doc_id not in next_pos:
                    info = store.get_document(doc_id)
                    kept = [pid for pid in info["passage_ids"] if pid not in replaced] if info else []
                    next_pos[doc_id] = len(kept)
                passages.append(node_to_passage(node, next_pos[doc_id]))
                next_pos[doc_id] += 1
            store.add_passages(passages, vectors, policy="upsert", allow_moves=True)  # a node id, whatever its parent
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose SOURCE document is ``ref_doc_id``."""
        self._writable().delete_documents([ref_doc_id])

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete nodes by id, by metadata filters, or both (ids that also match the filters).

        Without ids and filters nothing is deleted (use :meth:`clear` to empty the store).
        """
        _check_node_ids(node_ids, "delete_nodes")
        if node_ids is None and (filters is None or not filters.filters):
            return
        predicate = build_predicate(filters)
        store = self._writable()
        if node_ids is None:
            refined = _store_filter(store, filters)
            assert refined is not None
            store.delete_by_filter(refined)
            return
        ids = list(node_ids)
        with store.batch():  # the ids matching the filters are read and deleted in one commit
            if predicate is not None:
                ids = [p.id for p in store.get_passages(ids) if predicate(passage_record(p))]
            store.delete_passages(ids)

    def clear(self) -> None:
        """Delete every node (FAISS ids are still never reused)."""
        self._writable().delete_all()

    # -- reading --------------------------------------------------------------------------------------
    def get_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
    ) -> list[BaseNode]:
        """Nodes by id (in the order asked) and/or matching filters (in insertion order); all without either."""
        _check_node_ids(node_ids, "get_nodes")
        predicate = build_predicate(filters)
        if node_ids is not None:
            records = [passage_record(p) for p in self._reader.get_passages(list(node_ids))]
            return [record_to_node(r) for r in records if predicate is None or predicate(r)]
        passages = self._reader.filter_passages(_store_filter(self._reader, filters))
        return [record_to_node(passage_record(p)) for p in passages]

    def query_encoder(self) -> DenseEncoder:
        """The model that encodes queries for this store now (its current one, the tuned one after ``tune``).

        ``RagHierEmbedding(vector_store=store)`` embeds with it.

        Raises:
            ValueError: The store has no model of its own (it is fed with vectors from an embedding model).

        """
        with self._reader.reading():
            encoder = self._reader.encoder
        if encoder is None:
            raise ValueError(
                f"the store at {self.location} has no model of its own: embed queries with the embedding model "
                "that embedded its nodes"
            )
        return encoder

    def _check_query_model(self, embedding: Any) -> None:
        """Refuse a query embedding that names another model than the one the store's vectors come from.

        Only an embedding that names its weights (``RagHierEmbedding``'s) can be checked; a plain list cannot.
        """
        theirs = other_store_model(self._reader, getattr(embedding, "weights_sha256", None))
        if theirs is None:
            return
        line = (
            f"the query embedding comes from model {getattr(embedding, 'model', None)!r}, but the vectors of the "
            f"store at {self.location} come from {theirs!r}: queries and passages would come from "
            "different models. Embed queries with RagHierEmbedding(vector_store=store), which follows the store's "
            "model, or retrieve with RagHierRetriever (query text)"
        )
        if not self.allow_other_model:
            raise ValueError(line + ", or open the store with allow_other_model=True to search anyway")
        logger.warning("%s (allow_other_model=True: searching anyway)", line)

    def query_vector(self, query_str: str | None = None, embedding: Sequence[float] | None = None) -> np.ndarray:
        """The ``(1, dimension)`` dense query vector, L2-normalized for a ``"cosine"`` store.

        It is ``embedding`` when given, else the store's encoder applied to ``query_str``.

        Raises:
            ValueError: No embedding and no store encoder (the message names every way to supply one), or an
                embedding that is not a real, finite vector.

        """
        if embedding is not None:
            self._check_query_model(embedding)
            return _query_row(embedding, "the query embedding", unit=self.similarity == "cosine")
        if query_str is not None and self._reader.encoder is not None:
            vec = self._reader.encode_queries([query_str])
        else:
            raise ValueError(NO_QUERY_EMBEDDING.format(location=self.location))
        return _normalize_rows(vec) if self.similarity == "cosine" else vec

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Search the store in the query's mode, after the filters, ``doc_ids`` and ``node_ids`` restrictions.

        Modes (each one of the engine's registered strategies):

        - ``DEFAULT``: the ``dense`` strategy, nearest nodes to ``query_embedding`` (``similarity_top_k``).
          Similarities are inner products (cosine similarities for a ``"cosine"`` store). On a
          ``dense=False`` store, ``DEFAULT`` is the ``SPARSE`` search below (retrievers send it the query
          text only).
        - ``SPARSE``: the ``svdr-<sparse_mode>`` strategy over the token index with ``query_str``, or with
          ``sparse_mode="bm25"`` the ``bm25`` strategy over the BM25 index; ``sparse_top_k`` (else
          ``similarity_top_k``) nodes, with the SVDR or BM25 scores.
        - ``HYBRID``: the ``fusion`` strategy over those two: the dense top ``similarity_top_k`` and the
          sparse top ``sparse_top_k`` (else ``similarity_top_k``) fused by ``hybrid_fusion`` (default: relative
          score) with weights ``(alpha, 1 - alpha)`` (``alpha`` default 0.5; 1 = dense only, 0 = sparse only);
          ``hybrid_top_k`` (else ``similarity_top_k``) nodes.

        Higher similarities are better. An empty ``node_ids`` or ``doc_ids`` list means no restriction
        (``VectorStoreIndex.as_retriever()`` sends ``node_ids=[]``).

        Raises:
            ValueError: An unsupported mode, no query embedding (naming how to supply one), a NaN, infinite
                or complex query embedding, a sparse or hybrid query on a store without the index its
                ``sparse_mode`` searches (token index, BM25 index) or without ``query_str``, a hybrid query on a
                ``dense=False`` store, or ``alpha`` outside [0, 1].

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

    def _predicate(self, query: VectorStoreQuery) -> Predicate | None:
        return _store_filter(self._reader, query.filters, doc_ids=query.doc_ids, node_ids=query.node_ids)

    @staticmethod
    def _result(hits: Sequence[Hit]) -> VectorStoreQueryResult:
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h) for h in hits],
            similarities=[h.score for h in hits],
            ids=[h.passage_id for h in hits],
        )

    def _dense_query(self, query: VectorStoreQuery, top_k: int) -> VectorStoreQueryResult:
        if top_k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vec = self.query_vector(query.query_str, query.query_embedding)
        # no filters and empty id lists (what VectorStoreIndex retrievers send): no predicate to build
        restricted = query.filters is not None or query.doc_ids or query.node_ids
        predicate = self._predicate(query) if restricted else None
        return self._result(self._dense_retriever().search_vectors(vec, top_k, predicate)[0])

    def _dense_retriever(self) -> Retriever[Any]:
        """The ``dense`` strategy's retriever, built once per handle (it holds no other state)."""
        dense = self._dense
        if dense is None:  # the reader is the handle's for its whole life
            dense = self._dense = build_retriever("dense", self._reader)
        return dense

    # -- sparse search: SVDR over the token index, or BM25 over the BM25 index ---------------------------
    def _has_sparse_index(self) -> bool:
        """Whether the store has an index that finds nodes without a dense vector (token index, BM25 index)."""
        return self._reader.extension(_TOKEN_INDEX) is not None or self._reader.extension(_BM25) is not None

    def _sparse_retriever(self) -> Retriever[Any]:
        """The retriever of ``sparse_mode``: ``bm25``, or ``svdr-<sparse_mode>`` (kept with its encoder and cache)."""
        if self._sparse is None:
            if self.sparse_mode == _BM25_MODE:
                self._sparse = build_retriever(_BM25_MODE, self._reader)
            else:
                self._sparse = build_retriever(
                    f"svdr-{self.sparse_mode}", self._reader, rerank_m=self.rerank_m, vocab_model=self.vocab_model
                )
        return self._sparse

    def _check_sparse(self, query: VectorStoreQuery) -> str:
        """The query text of a sparse or hybrid query (errors when it cannot run)."""
        index = "BM25 index" if self.sparse_mode == _BM25_MODE else "token index"
        if not query.query_str or not query.query_str.strip():
            raise ValueError(f"a sparse or hybrid query needs query_str (the text searched in the {index})")
        if self.sparse_mode in _TOKEN_MODES and self._reader.extension(_TOKEN_INDEX) is None:
            raise ValueError(
                f"{self.sparse_mode!r} search needs a token index and the store at {self.location} has none; "
                "create the RagHierVectorStore with token_index=True"
            )
        if self.sparse_mode == _BM25_MODE and self._reader.extension(_BM25) is None:
            raise ValueError(
                f"sparse_mode='bm25' searches the store's BM25 index and the store at {self.location} has none; "
                "open the RagHierVectorStore with bm25=True (it indexes the nodes already stored, and every later "
                "add and delete keeps it current), or add it once with `vector_store.client.ensure_extension('bm25')`"
            )
        return query.query_str

    def _sparse_query(self, query: VectorStoreQuery, top_k: int) -> VectorStoreQueryResult:
        text = self._check_sparse(query)
        if top_k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        result = self._sparse_retriever().run(Queries(texts=[text]), top_k, self._predicate(query))[0]
        return self._result(result.hits)

    def _hybrid_query(self, query: VectorStoreQuery) -> VectorStoreQueryResult:
        if not self.dense:
            raise ValueError(f"the store at {self.location} keeps no dense vectors (dense=False); use the sparse mode")
        alpha = 0.5 if query.alpha is None else float(query.alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 (sparse only) and 1 (dense only), got {query.alpha!r}")
        text = self._check_sparse(query)
        top_k = int(query.hybrid_top_k or query.similarity_top_k or 0)
        if top_k < 1:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        vec = self.query_vector(query.query_str, query.query_embedding)
        dense_k = max(1, int(query.similarity_top_k or 0))
        sparse_k = max(1, int(query.sparse_top_k or query.similarity_top_k or 0))
        fusion = FusionRetriever(
            self._reader,
            components=[self._dense_retriever(), self._sparse_retriever()],
            method=self.hybrid_fusion,
            weights=(alpha, 1.0 - alpha),
            depths=(dense_k, sparse_k),
            keep_zero_scores=True,  # the sparse list is its top sparse_k as ranked (zeros scale it from 0)
        )
        result = fusion.run(Queries(texts=[text], vectors=vec), top_k, self._predicate(query))[0]
        return self._result(result.hits)

    # -- persistence ----------------------------------------------------------------------------------
    def persist(self, persist_path: str, fs: fsspec.AbstractFileSystem | None = None) -> None:
        """Make the store available at ``persist_path`` (a directory; a ``.json`` suffix is dropped).

        ``StorageContext.persist(d)`` calls this with ``d/default__vector_store.json``, so the store lands in
        ``d/default__vector_store/``; load it with :meth:`from_persist_dir`. Writes are already durable, so
        when the store lives at that directory nothing is copied; otherwise the engine's
        ``HierStore.snapshot`` copies one committed generation (only the files the store's committed state
        lists, checked by name, verified by opening the copy) before it replaces an older copy. No pickle is
        involved.

        A Milvus store's data is already durable in Milvus, so nothing is copied: ``persist_path`` (a JSON file)
        records where the collection lives (its URI and connection options, never the token), and
        :meth:`from_persist_dir` / :meth:`from_persist_path` reopen the collection from it.
        """
        _check_local(fs)
        if self._root is None:
            self._persist_pointer(Path(persist_path))
            return
        target = _store_dir_for(persist_path)
        if target.exists() and (not target.is_dir() or (not (target / MANIFEST).exists() and any(target.iterdir()))):
            raise StoreError(f"cannot persist to {target}: it exists and does not hold a rag-hier store")
        if target.exists() and target.resolve() == self._root.resolve():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = self._reader.snapshot(target.parent / f".{target.name}.new-{uuid.uuid4().hex[:8]}")
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.replace(old)
        fresh.replace(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _persist_pointer(self, persist_path: Path) -> None:
        """For a Milvus store: write where it lives (never the token) as JSON at ``persist_path``."""
        if persist_path.exists() and (persist_path.is_dir() or _MILVUS_POINTER not in persist_path.read_text()):
            raise StoreError(f"cannot persist to {persist_path}: it exists and is not a rag-hier Milvus store pointer")
        where = {
            "uri": self.location,
            "db_name": self.db_name,
            "timeout": self.timeout,
            "client_options": self.client_options,
        }
        persist_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = persist_path.with_name(f".{persist_path.name}.new-{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps({_MILVUS_POINTER: where}, indent=2) + "\n", encoding="utf-8")
        tmp.replace(persist_path)

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
