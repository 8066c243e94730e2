"""RagHierDocumentStore: a Haystack document store backed by a rag-hier store (a directory, or a Milvus collection).

The store converts Haystack objects to the engine's passages and hits and back, and calls only the engine's
public API: :class:`rag_hier.HierStore` for reads and writes (filters are Haystack's reference matcher run
over the engine's records, on those a pushed-down translation selects: :mod:`._pushdown`),
:meth:`HierStore.ensure_extension` for extra indexes, and the strategy registry
(:mod:`rag_hier.retrieval.registry`) for every kind of search. All handles on one directory in a process share
one engine (the engine's doing, not this module's), and each handle sees other processes' commits at its
next read. With ``uri=`` the same class works on the engine's Milvus backend (a Milvus Lite file or a server).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from haystack import Document, default_from_dict, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from haystack.utils import ComponentDevice, Secret
from haystack.utils.filters import document_matches_filter
from haystack_integrations.components.embedders.rag_hier._backend import EmbeddedBy, resolve_device
from haystack_integrations.document_stores.rag_hier._convert import (
    EXTRA_KEY,
    document_meta,
    document_to_passage,
    filter_roots,
    hit_to_document,
    passage_to_document,
    record_view,
    to_plain_json,
    validate_filters,
)
from haystack_integrations.document_stores.rag_hier._pushdown import translate_filter

from rag_hier.corpus.model import Document as CorpusDocument
from rag_hier.corpus.model import Passage
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DuplicateIdError, InvalidInputError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.retrieval.base import Queries, Retriever, RetrieverParams
from rag_hier.retrieval.bm25 import BM25Retriever
from rag_hier.retrieval.hit import Hit
from rag_hier.retrieval.registry import StrategyEntry, strategy
from rag_hier.store.contract import SIMILARITIES, StoreExtension
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.filters import Predicate, Refined
from rag_hier.store.meta_stats import check_field, check_fields
from rag_hier.store.milvus.client import check_connection_options
from rag_hier.store.milvus.store import MilvusStore
from rag_hier.store.store import MANIFEST, HierStore, WriteSummary

logger = logging.getLogger(__name__)

__all__ = ["RagHierDocumentStore"]

T = TypeVar("T")

Store = HierStore | MilvusStore
"""A handle on the store: a local directory (:class:`HierStore`) or a Milvus collection (:class:`MilvusStore`)."""

MILVUS_TOKEN_ENV = "RAG_HIER_MILVUS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
"""The environment variable the Milvus token is read from by default (the CLI reads the same one)."""

"""``client_options`` keys refused: credentials go in ``token`` (a ``Secret``), never in clear in a pipeline file."""

DOT_PRODUCT_SCALING_FACTOR = 100
"""``scale_score`` maps a dot product ``s`` to ``sigmoid(s / 100)``, as Haystack's InMemory store does."""
BM25_SCALING_FACTOR = 8
"""``scale_score`` maps a BM25 score ``s`` to ``sigmoid(s / 8)``, as Haystack's InMemory store (and its Elasticsearch
and OpenSearch integrations, whose scores are Lucene's, as ours) do."""

SPARSE_EMBEDDING_KEY = (EXTRA_KEY, "sparse_embedding")
"""Where a Document's ``sparse_embedding`` lives in ``Passage.extra`` (read by the ``sparse-embeddings`` extension)."""

_TOKEN_INDEX_OPTIONS = frozenset({"model", "max_length"})
_EMBEDDED_BY = "embedded_by"
"""The corpus fact naming the model that embedded a model-less store's documents (RagHierDocumentEmbedder's)."""

_ENGINE_POLICY = {
    DuplicatePolicy.FAIL: "fail",
    DuplicatePolicy.SKIP: "skip",
    DuplicatePolicy.OVERWRITE: "upsert",
}

_OPEN_LOCK = threading.Lock()
"""Serializes creating and opening store directories in this process (two instances may race on a new path)."""


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


BM25_SCALE = "bm25"
"""What :func:`score_scale` returns for a strategy that ranks by BM25 (``scaled_score`` then uses ``sigmoid(s/8)``)."""
SIMILARITY_SCALE = "similarity"
"""What :func:`score_scale` returns for a strategy ranking dense inner products (scaled by the store's similarity)."""


def scaled_score(score: float, similarity: str) -> float:
    """Map a score to [0, 1] as Haystack's InMemory store does.

    ``similarity`` says what the score is: a dense inner product in a ``"cosine"`` store, ``(s+1)/2``, or in a
    ``"dot_product"`` one, ``sigmoid(s/100)``; or a ``"bm25"`` score, ``sigmoid(s/8)`` (``expit(s / 8)`` in
    ``InMemoryDocumentStore.bm25_retrieval``).
    """
    if similarity == "cosine":
        return (score + 1.0) / 2.0
    if similarity == BM25_SCALE:
        return _sigmoid(score / BM25_SCALING_FACTOR)
    return _sigmoid(score / DOT_PRODUCT_SCALING_FACTOR)


def score_scale(entry: StrategyEntry) -> str | None:
    """How ``scale_score`` maps the scores of a strategy to [0, 1], as InMemoryDocumentStore does for that kind.

    :data:`SIMILARITY_SCALE` for dense inner products (``dense``, ``hierarchical``, ``tree``...: by the store's
    similarity), :data:`BM25_SCALE` for BM25 (``bm25``: ``sigmoid(s / 8)``), ``None`` when its scores are neither
    (SVDR, sparse embeddings, fusion): those are not scaled.
    """
    retriever = entry.retriever
    if retriever.over_vectors:
        return SIMILARITY_SCALE
    if issubclass(retriever, BM25Retriever):
        return BM25_SCALE
    return None


def check_scale_score(entry: StrategyEntry, scale_score: bool) -> None:
    """Refuse ``scale_score`` for a strategy whose scores :func:`score_scale` cannot map."""
    if scale_score and score_scale(entry) is None:
        raise ValueError(
            "scale_score maps inner products of dense vectors (by the store's similarity) and BM25 scores "
            f"(sigmoid(s / 8)) to [0, 1]; the {entry.name!r} strategy's scores are neither: leave scale_score off"
        )


UNIT_NORM_TOLERANCE = 1e-3
"""How far from 1 the norm of an embedding written to a cosine store may be (float32 rounding, half precision)."""


def _check_unit_vectors(docs: Sequence[Document], path: str) -> None:
    """Refuse embeddings that are not unit vectors in a cosine store (its scores are inner products).

    InMemoryDocumentStore normalizes every vector when it scores; this store's index ranks by inner product,
    which is the cosine only for unit vectors, so a longer or shorter one would be ranked and scaled wrongly.
    """
    for doc in docs:
        if doc.embedding is None:
            continue
        try:
            norm = math.sqrt(math.fsum(float(x) * float(x) for x in doc.embedding))
        except (TypeError, ValueError):
            continue  # not numbers: the engine's check names the problem
        if not math.isfinite(norm):
            continue  # NaN or infinite values: the engine's check names the problem
        if not abs(norm - 1.0) <= UNIT_NORM_TOLERANCE:
            raise DocumentStoreError(
                f"document {doc.id!r}: its embedding has norm {norm:.6g}, but the store at {path} records "
                "similarity 'cosine' and holds unit vectors. Normalize the embeddings (e.g. "
                "SentenceTransformersDocumentEmbedder(normalize_embeddings=True)), or create the store with "
                "similarity='dot_product'."
            )


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
    # a field that is not a string is left as it is: check_field names it
    return field.removeprefix("meta.") if isinstance(field, str) else field


_ADDED_KEYS = frozenset({"source_id", "split_id", "title_path"})
"""Keys :func:`document_meta` adds to the meta of passages the engine wrote (not Haystack)."""
_PAYLOAD_PATHS = ((EXTRA_KEY,), (EXTRA_KEY, "meta_exact"))
"""Paths into a passage's ``extra``: the Haystack payload, and the exact values it keeps beside the JSON form."""


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    """Report engine errors as Haystack document-store errors."""
    try:
        yield
    except DuplicateIdError as exc:
        raise DuplicateDocumentError(str(exc)) from exc
    except StoreError as exc:
        raise DocumentStoreError(str(exc)) from exc


def _check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0, got {top_k!r}")
    return top_k


_NUMBERS = frozenset({float, int})


def _query_vector(query_embedding: Any) -> list[float]:
    # an embedder's list of Python floats: one type check per item, not an ABC isinstance (6x slower at 384-d)
    if type(query_embedding) is list and query_embedding and set(map(type, query_embedding)) <= _NUMBERS:
        return list(query_embedding)
    if isinstance(query_embedding, str | bytes) or not isinstance(query_embedding, Sequence) or not query_embedding:
        raise ValueError("query_embedding should be a non-empty list of floats.")
    if any(isinstance(x, Sequence) for x in query_embedding):
        raise ValueError("query_embedding must be a flat list of floats")
    return list(query_embedding)


class _CachedRetriever:
    """An engine retriever kept between queries (with what it loaded), and a lock serializing its use."""

    def __init__(self, retriever: Retriever[Any]) -> None:
        self.retriever = retriever
        self.lock = threading.Lock()


def chat_generator_questions(
    chat_generator: Any, *, prompt: str | None = None, num_questions: int = 2
) -> Callable[[str], list[str]]:
    """A question generator for ``tune(generator=...)`` from a Haystack ChatGenerator.

    Each passage is sent as one user message (``prompt``, with ``{context}`` and ``{num_questions}``; default:
    :data:`rag_hier.tuning.generate.DEFAULT_PROMPT`); the reply's lines are the questions.
    """
    from haystack.dataclasses import ChatMessage

    from rag_hier.tuning.generate import DEFAULT_PROMPT, questions_from_reply

    template = prompt or DEFAULT_PROMPT

    def ask(text: str) -> list[str]:
        message = ChatMessage.from_user(template.format(context=text, num_questions=num_questions))
        replies = chat_generator.run(messages=[message])["replies"]
        return questions_from_reply(replies[0].text or "") if replies else []

    ask.name = f"haystack:{type(chat_generator).__module__}.{type(chat_generator).__qualname__}"  # type: ignore[attr-defined]
    return ask


class RagHierDocumentStore:
    """A Haystack document store kept in a rag-hier store directory (SQLite + FAISS, atomic writes).

    Each Haystack ``Document`` is one passage of the store: its embedding is indexed by FAISS (vectors
    come back bit-exact), its metadata is kept exactly as written, and filters (Haystack's filter syntax,
    evaluated by Haystack's own reference matcher) are applied *before* the search, so a filtered search
    returns ``top_k`` documents whenever that many match. Passages are grouped into the engine's documents by
    ``meta["__parent_id"]`` (HierarchicalDocumentSplitter) or ``meta["source_id"]`` (DocumentSplitter), which
    hierarchical strategies use.

    Every search strategy registered with the engine (``rag_hier.retrieval.registry``: dense, hierarchical,
    tree, svdr-*, sparse-embedding, fusion, ...) is available through :meth:`retrieve` and the
    ``RagHierRetriever`` component. With ``token_index=True`` the store also keeps SVDR's binary token index
    of every document (built by tokenization alone, no model). With ``dense=False`` it never computes dense
    vectors. Documents written with a ``sparse_embedding`` keep it (JSON, no pickle) and are searched by the
    ``sparse-embedding`` strategy.

    The same store lives in Milvus when given ``uri=`` instead of ``path``: a Milvus Lite file
    (``"./collection.db"``, ``"./collection.db#name"`` picks the collection) or a server
    (``"http://host:19530#name"``), through the engine's Milvus backend (see ``docs/milvus.md``): every
    method and strategy works as on a directory; filters are still Haystack's reference matcher (run
    client-side, on the rows the translatable part of the filter selects inside Milvus, else on every record),
    and a collection's vector dimension is fixed when it is created.

    The directory (or collection) is opened (or created) on first use, not in ``__init__``; it holds the data,
    the init parameters only say where it is. Reads use a read-only handle until this instance first writes (a
    read-only handle never renames or deletes a file, so readers cannot disturb another process's writes);
    the first write opens a read-write handle. Every write is atomic and durable when it returns. All
    instances on one directory in a process see one view, and other processes' writes are seen at the next
    read.

    Usage example:
    ```python
    from haystack import Document
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./my-collection")  # or uri="./collection.db", uri="http://host:19530"
    store.write_documents([Document(content="Tides follow the moon.", embedding=[0.1, 0.2, 0.3])])
    store.filter_documents({"field": "content", "operator": "==", "value": "Tides follow the moon."})
    ```

    Args:
        path: The store directory (created on first use when it does not exist). Give ``path`` or ``uri``.
        uri: Instead of ``path``, a Milvus collection: a Milvus Lite file (``./collection.db``; Linux and
            macOS, ``pip install 'rag-hier[milvus]'``) or a server URI (``http://host:19530``); a ``#name``
            suffix names the collection (default ``rag_hier``). Created on first use when it does not exist.
        token: Milvus credentials (``"user:password"`` or an API key) as a Haystack ``Secret``; by default the
            environment variable ``RAG_HIER_MILVUS_TOKEN`` when set (as the CLI). Serialized as the name of
            its environment variable, never in clear (a ``Secret.from_token`` refuses to serialize).
        db_name: The Milvus database (servers; ``""``: the server's default).
        timeout: Seconds per Milvus call.
        client_options: Passed to pymilvus' ``MilvusClient`` as given, e.g. TLS: ``secure``,
            ``server_pem_path``, ``server_name``, ``ca_pem_path``, ``client_pem_path``, ``client_key_path``.
            Credentials are refused here (they would be written in clear to a pipeline file): use ``token``.
        dimension: The vector dimension of a new store. A Milvus collection fixes it at creation, so a new
            collection without ``model`` needs it, unless its first write carries embeddings (their size is
            used). A local store learns it from the first vectors written when it is not given.
        index: Index kind used when the store is created: ``"flat"`` (exact), ``"ivf"`` or ``"hnsw"``, or a
            dict of ``rag_hier.IndexConfig`` options. An existing store keeps the index it was created with.
        model: A sentence-transformers model (name or path) the store encodes with: documents written
            without an embedding are encoded with it, and retrievers encode query text with it. ``None``: the
            store only receives vectors from outside (an embedder), or uses the model recorded in an existing
            store.
        device: Device for the store's model (``"cpu"``, ``"cuda:0"``, ...); ``None`` picks CUDA when
            available. A device the machine lacks falls back to the CPU with a warning, so a saved pipeline
            loads anywhere.
        strict_datetime_comparison: Passed to Haystack's filter matcher: if true, timezone-naive and
            timezone-aware datetimes never match each other.
        token_index: Keep SVDR's binary token index (``True``, or a dict with ``model``, whose tokenizer
            defines the vocabulary, and ``max_length``, tokens per document, default 256). The tokenizer
            defaults to ``model``, else the offline all-MiniLM-L6-v2's. Added to an existing store that lacks
            one at its first write or search (tokenizing what it holds); the token index follows every write.
        dense: Compute dense vectors with ``model`` for documents written without an embedding (default).
            ``False``: never encode; ``model`` then only names the token index's tokenizer and the default
            vocabulary encoder of SVDR search, and documents keep whatever embedding they bring.
        similarity: How dense scores compare vectors, recorded when the store is created: ``"dot_product"``
            or ``"cosine"`` (unit vectors). ``None``: what an existing store recorded; for a new store,
            ``"cosine"`` with a normalizing model, else ``"dot_product"`` (InMemoryDocumentStore's default).
            ``scale_score`` follows it, as in InMemoryDocumentStore.

    """

    def __init__(
        self,
        path: str | None = None,
        *,
        uri: str | None = None,
        token: Secret | None = Secret.from_env_var(MILVUS_TOKEN_ENV, strict=False),  # noqa: B008
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: dict[str, Any] | None = None,
        dimension: int | None = None,
        index: str | dict[str, Any] = "flat",
        model: str | None = None,
        device: str | None = None,
        strict_datetime_comparison: bool = False,
        token_index: bool | dict[str, Any] = False,
        dense: bool = True,
        similarity: str | None = None,
    ) -> None:
        if isinstance(path, Path):
            path = str(path)
        if isinstance(uri, Path):
            uri = str(uri)
        if (path is None) == (uri is None):
            raise ValueError(
                "give either path (a store directory) or uri (a Milvus Lite file or server), "
                f"not {'both' if path is not None else 'neither'}"
            )
        if path is not None and (not isinstance(path, str) or not path):
            raise ValueError(f"path must be a non-empty string (the store directory), got {path!r}")
        check_connection_options(
            uri,
            timeout,
            client_options,
            credentials_hint="they would be saved in clear with the pipeline; pass token=Secret.from_env_var(...) "
            "instead",
        )
        if token is not None and not isinstance(token, Secret):
            raise ValueError(
                "token must be a haystack.utils.Secret (Secret.from_env_var(...) keeps it out of saved pipelines), "
                f"got {type(token).__name__}"
            )
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive integer or None, got {dimension!r}")
        if not isinstance(dense, bool):
            raise ValueError(f"dense must be True or False, got {dense!r}")
        if similarity is not None and similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)} or None, got {similarity!r}")
        self._index_config = self._parse_index(index)
        self._token_options = self._parse_token_index(token_index)
        self.path = path
        self.uri = uri
        self.token = token
        self.db_name = db_name
        self.timeout = timeout
        self.client_options = dict(client_options) if client_options is not None else None
        self.dimension = dimension
        self.index = index
        self.model = model
        self.device = device
        self.strict_datetime_comparison = strict_datetime_comparison
        self.token_index = token_index
        self.dense = dense
        self.similarity = similarity
        self._lock = threading.RLock()
        self._reader: Store | None = None
        self._writer: Store | None = None
        self._encoder: DenseEncoder | None = None
        self._query_encoder: tuple[dict[str, Any], DenseEncoder] | None = None  # the embedder's model, recorded
        self._retrievers: dict[tuple[str, RetrieverParams], _CachedRetriever] = {}

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
    # handles: read-only until the first write
    # ------------------------------------------------------------------------------------------------
    def _device(self) -> str | None:
        # a device this machine lacks (a store saved with "cuda" loaded on a CPU-only machine) falls back to the CPU
        return resolve_device(ComponentDevice.from_str(self.device)) if self.device else None

    def _dense_encoder(self) -> DenseEncoder | None:
        """The model of this instance (one object for both handles), when it encodes."""
        if self._encoder is None and self.model and self.dense:
            self._encoder = DenseEncoder(self.model, device=self._device())
        return self._encoder

    @property
    def location(self) -> str:
        """Where the store lives: the directory path, or the Milvus URI."""
        return cast(str, self.path if self.path is not None else self.uri)

    def _milvus_options(self) -> dict[str, Any]:
        """The connection options of a Milvus store (the token resolved from its ``Secret`` now)."""
        token = self.token.resolve_value() if self.token is not None else None
        return {
            "token": token or "",
            "db_name": self.db_name,
            "timeout": self.timeout,
            "client_options": dict(self.client_options or {}),
        }

    def _exists(self) -> bool:
        """Whether the directory (or Milvus collection) holds a store."""
        if self.uri is None:
            return (Path(cast(str, self.path)) / MANIFEST).is_file()
        with _engine_errors():
            return MilvusStore.exists(self.uri, **self._milvus_options())

    def _create(self, dimension_hint: int | None) -> Store:
        """A new store at ``path`` or ``uri`` (with the dimension a Milvus collection needs up front)."""
        encoder = self._dense_encoder()
        logger.info("creating a rag-hier store in %s", self.location)
        if self.uri is None:
            return HierStore.create(
                cast(str, self.path),
                model=None,
                encoder=encoder,
                dimension=self.dimension,
                index=self._index_config,
                similarity=self.similarity,  # type: ignore[arg-type]
            )
        dimension = self.dimension
        if dimension is None and encoder is None:
            dimension = dimension_hint
        if dimension is None and encoder is None:
            why = (
                "this store computes no vectors (dense=False)"
                if not self.dense
                else "this store has no model to take it from"
            )
            raise StoreError(
                f"cannot create the Milvus collection {self.uri}: Milvus fixes the vector dimension when a "
                f"collection is created and {why}; pass dimension=... (or model=...), or write documents with "
                "embeddings first"
            )
        return HierStore.create(
            uri=self.uri,
            model=None,
            encoder=encoder,
            dimension=dimension,
            index=self._index_config,
            similarity=self.similarity,
            **self._milvus_options(),
        )

    def _open(self, *, write: bool, dimension_hint: int | None = None) -> Store:
        """A new handle on the store (creating the store when there is none: that is a write)."""
        with _OPEN_LOCK, _engine_errors():
            if not self._exists():
                return self._create(dimension_hint)
            store: Store
            if self.uri is None:
                # an explicit model= is the user's choice: used even when the store was built with another
                # (the store logs a warning naming both)
                store = HierStore.open(
                    cast(str, self.path),
                    encoder=self._dense_encoder(),
                    device=self._device(),
                    read_only=not write,
                    allow_other_model=True,
                )
            else:
                store = HierStore.open(
                    uri=self.uri,
                    encoder=self._dense_encoder(),
                    device=self._device(),
                    read_only=not write,
                    allow_other_model=True,
                    **self._milvus_options(),
                )
            try:
                self._check_recorded(store)
            except BaseException:
                store.close()
                raise
            return store

    def _check_recorded(self, store: Store) -> None:
        """Compare what the store recorded with this instance's options."""
        if self.similarity is not None and store.similarity != self.similarity:
            raise StoreError(
                f"the store at {store.location} records similarity {store.similarity!r}, not {self.similarity!r}; "
                "leave similarity=None to use the recorded one (it is fixed when a store is created)"
            )

    def _read_handle(self) -> Store:
        """The handle reads use: read-only until this instance writes (then its read-write handle)."""
        with self._lock:
            if self._writer is not None:
                return self._writer
            if self._reader is None:
                if not self._exists():
                    return self._write_handle()  # nothing to read yet: create the store
                self._reader = self._open(write=False)
            return self._reader

    def _write_handle(self, dimension_hint: int | None = None) -> Store:
        """The read-write handle, opened on first use (with the configured extensions ensured).

        ``dimension_hint``: the size of the embeddings about to be written, for a Milvus collection created now.
        """
        with self._lock:
            if self._writer is None:
                store = self._open(write=True, dimension_hint=dimension_hint)
                try:
                    if self._token_options is not None:
                        with _engine_errors():
                            self._ensure_extension(store, "token-index")
                except BaseException:
                    store.close()
                    raise
                self._writer = store
            return self._writer

    def _extension_config(self, name: str) -> dict[str, Any]:
        """How this store builds extension ``name`` when it adds one."""
        if name == "token-index":
            options = self._token_options or {}
            return {
                "model": str(options.get("model") or self.model or DEFAULT_MODEL),
                "max_length": options.get("max_length", 256),
            }
        if name == "sparse-embeddings":
            return {"key": list(SPARSE_EMBEDDING_KEY)}
        return {}

    def _ensure_extension(self, store: Store, name: str) -> StoreExtension:
        """The store's extension ``name``, built with this store's configuration when it has none.

        The one place this adapter adds extensions; a read-only handle refuses to (``StoreError``).
        """
        ext = store.ensure_extension(name, **self._extension_config(name))
        if name == "sparse-embeddings" and tuple(getattr(ext, "key", ())) != SPARSE_EMBEDDING_KEY:
            raise StoreError(
                f"{store.location} indexes sparse embeddings stored at {list(getattr(ext, 'key', ()))}, "
                "not Haystack's; remove its 'sparse-embeddings' extension"
            )
        asked = (self._token_options or {}).get("model")
        if name == "token-index" and asked and getattr(ext, "model", asked) != asked:
            logger.warning(
                "%s has a token index built with %r; keeping it (token_index asked for %r)",
                store.location,
                getattr(ext, "model", None),
                asked,
            )
        return ext

    @property
    def hier_store(self) -> Store:
        """The underlying store, read-write (opened or created on first access).

        A :class:`rag_hier.HierStore` for a directory, a :class:`rag_hier.store.milvus.MilvusStore` for a
        ``uri`` (the same store contract).

        For what this class does not wrap, e.g. ``hier_store.add_extension(TreeExtension())``.
        """
        return self._write_handle()

    @property
    def embedding_similarity_function(self) -> str:
        """The similarity the store records (``"cosine"`` or ``"dot_product"``), read through the read-only handle.

        The counterpart of ``InMemoryDocumentStore.embedding_similarity_function``; ``similarity`` is the init
        parameter (``None``: use the recorded one). Asking creates the store when the directory holds none.
        """
        with _engine_errors():
            return self._read_handle().similarity

    def warm_up(self) -> None:
        """Open the store and load its model, if it has one (idempotent and cheap once done).

        A store without a model of its own loads the model that embedded its documents, when
        :class:`RagHierDocumentEmbedder` recorded it: the one it encodes query text with.
        """
        store = self._read_handle()
        encoder = store.encoder or self._embedder_model(store)
        if encoder is not None:
            _ = encoder.model

    def _embedder_model(self, store: Store) -> DenseEncoder | None:
        """The model that embedded the documents, recorded when a :class:`RagHierDocumentEmbedder`'s were written."""
        if not self.dense:
            return None
        recorded = store.corpus_info.get(_EMBEDDED_BY)
        if not isinstance(recorded, dict) or not isinstance(recorded.get("model"), str):
            return None
        with self._lock:
            if self._query_encoder is None or self._query_encoder[0] != recorded:
                logger.info(
                    "%s has no model of its own; encoding query text with %s, which embedded its documents",
                    self.location,
                    recorded["model"],
                )
                encoder = DenseEncoder(
                    recorded["model"],
                    device=self._device(),
                    normalize_embeddings=recorded.get("normalize_embeddings"),
                )
                self._query_encoder = (dict(recorded), encoder)
            return self._query_encoder[1]

    @staticmethod
    def _record_embedder_model(store: Store, docs: list[Document]) -> None:
        """Record the model that embedded these documents, for a store without one (inside the write's batch)."""
        if store.encoder is not None:
            return
        models = {
            (e.model, e.normalize_embeddings)
            for doc in docs
            if isinstance(e := doc.embedding, EmbeddedBy) and isinstance(e.model, str)
        }
        if len(models) != 1:
            return
        model, normalize = next(iter(models))
        entry = {"model": model, "normalize_embeddings": normalize}
        recorded = store.corpus_info.get(_EMBEDDED_BY)
        if recorded == entry:
            return
        if isinstance(recorded, dict) and recorded.get("model") != model:
            logger.warning(
                "%s holds documents embedded by %s; these were embedded by %s, which query text is encoded "
                "with from now on",
                store.location,
                recorded.get("model"),
                model,
            )
        store.update_corpus_info(**{_EMBEDDED_BY: entry})

    def close(self) -> None:
        """Release this instance's handles; the store reopens on next use."""
        with self._lock:
            handles, self._reader, self._writer = (self._writer, self._reader), None, None
            self._retrievers.clear()
        for handle in handles:
            if handle is not None:
                handle.close()

    async def close_async(self) -> None:
        """Asynchronous :meth:`close`."""
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """Serialize this store's configuration (the directory path or Milvus URI, never its data) to a dictionary.

        ``token_index``, ``dense``, ``similarity`` and ``dimension`` are written only when set (not at their
        defaults), so pipelines saved before these options existed serialize exactly as they did. A Milvus
        store writes its ``uri`` and connection options; the token as its ``Secret`` (the environment
        variable's name; a token given in clear refuses to serialize).

        Raises:
            ValueError: The token is a ``Secret.from_token`` (Haystack never writes a secret in clear).

        """
        location: dict[str, Any]
        if self.uri is not None:
            location = {"uri": self.uri, "token": self.token.to_dict() if self.token is not None else None}
            if self.db_name:
                location["db_name"] = self.db_name
            if self.timeout != 30.0:
                location["timeout"] = self.timeout
            if self.client_options:
                location["client_options"] = self.client_options
        else:
            location = {"path": self.path}
        options: dict[str, Any] = {}
        if self.dimension is not None:
            options["dimension"] = self.dimension
        if self.token_index is not False:
            options["token_index"] = self.token_index
        if self.dense is not True:
            options["dense"] = self.dense
        if self.similarity is not None:
            options["similarity"] = self.similarity
        return default_to_dict(
            self,
            **location,
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
            f"{type(self).__name__}({'path' if self.uri is None else 'uri'}={self.location!r}, model={self.model!r}, "
            f"token_index={self.token_index!r}, dense={self.dense!r})"
        )

    # ------------------------------------------------------------------------------------------------
    # filters
    # ------------------------------------------------------------------------------------------------
    def _predicate(self, filters: dict[str, Any] | None, store: Store) -> Predicate | None:
        """A predicate over engine passage records that applies Haystack's reference filter semantics.

        Where part of the filter translates to an engine filter selecting a superset (:mod:`._pushdown`), the
        predicate comes as a :class:`~rag_hier.store.filters.Refined` whose coarse part the store pushes down
        (SQLite, a Milvus expression): the reference matcher then reads only the rows that part selects.
        """
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

        pushdown = store.filter_pushdown
        coarse, exact = translate_filter(filters, numbers=pushdown.numbers, max_members=pushdown.max_members)
        return predicate if coarse is None else Refined(coarse, predicate, equivalent=exact)

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

    def _matching_passages(self, filters: dict[str, Any] | None, store: Store) -> list[Passage]:
        doc_id = self._id_lookup(filters)
        if doc_id is not None:
            return store.get_passages([doc_id])
        return store.filter_passages(self._predicate(filters, store))

    def _matching_metas(self, filters: dict[str, Any] | None) -> list[dict[str, Any]]:
        with _engine_errors():
            passages = self._matching_passages(filters, self._read_handle())
        return [document_meta(p.meta, p.extra, p.doc_id, p.position, p.title_path) for p in passages]

    # ------------------------------------------------------------------------------------------------
    # the DocumentStore protocol
    # ------------------------------------------------------------------------------------------------
    def count_documents(self) -> int:
        """Return the number of documents in the store."""
        with _engine_errors():
            return self._read_handle().count_passages()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Return the documents that match ``filters``, in insertion order, with their embeddings.

        A document overwritten with ``DuplicatePolicy.OVERWRITE`` moves to the end, as in Haystack's
        ``InMemoryDocumentStore``. The answer comes from one committed state of the store.

        Args:
            filters: A Haystack filter (see https://docs.haystack.deepset.ai/docs/metadata-filtering);
                ``None`` or ``{}`` returns every document.

        Raises:
            FilterError: The filter is malformed or compares incompatible values.

        """
        if filters:
            validate_filters(filters)
        with _engine_errors():
            store = self._read_handle()
            with store.reading():
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
        A ``sparse_embedding`` is kept as written and indexed for the ``sparse-embedding`` strategy.

        Args:
            documents: The documents.
            policy: ``NONE`` (same as ``FAIL``), ``FAIL`` (raise if an id is stored or repeated in the
                input), ``SKIP`` (keep stored documents; the first of repeated ids wins) or ``OVERWRITE``
                (replace stored documents; the last of repeated ids wins).

        Raises:
            ValueError: ``documents`` is not a list of Documents.
            DuplicateDocumentError: Under ``FAIL``, an id already stored or repeated in the input.
            DocumentStoreError: Embeddings of different dimensions, an embedding that is not a unit vector
                in a ``similarity="cosine"`` store, metadata the store cannot keep, or a sparse embedding with
                negative indices or non-finite values.

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
        try:
            passages = [document_to_passage(doc) for doc in docs]
        except InvalidInputError as exc:  # metadata or text the store cannot keep
            raise DocumentStoreError(f"cannot write documents to {self.location}: {exc}") from exc
        with _engine_errors():
            hint = next((len(e) for doc in docs if isinstance(e := doc.embedding, Sequence) and e), None)
            store = self._write_handle(hint)
            if store.similarity == "cosine":
                _check_unit_vectors(docs, self.location)
            vectors: list[Any] = [doc.embedding for doc in docs]
            if self.dense:
                self._encode_missing(store, docs, vectors, skip_stored=policy == DuplicatePolicy.SKIP)
            try:
                with store.batch():
                    if any(doc.sparse_embedding is not None for doc in docs):
                        self._ensure_extension(store, "sparse-embeddings")
                    summary = store.add_passages(
                        passages,
                        embeddings=vectors,
                        policy=_ENGINE_POLICY[policy],  # type: ignore[arg-type]
                        allow_moves=True,  # an id names a chunk, whatever its parent (Haystack's OVERWRITE)
                    )
                    self._record_embedder_model(store, docs)
            except (ValueError, TypeError) as exc:
                if isinstance(exc, StoreError):
                    raise
                raise DocumentStoreError(f"cannot write documents to {self.location}: {exc}") from exc
        if policy == DuplicatePolicy.SKIP:
            return summary.passages_added
        return len(docs)

    @staticmethod
    def _encode_missing(store: Store, docs: list[Document], vectors: list[Any], *, skip_stored: bool) -> None:
        """Vectors from the store's model for the documents with content and no embedding."""
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
        with _engine_errors():
            self._write_handle().delete_passages(list(document_ids))

    # ------------------------------------------------------------------------------------------------
    # optional methods exercised by Haystack's shared store tests
    # ------------------------------------------------------------------------------------------------
    def delete_all_documents(self, recreate_index: bool = False) -> None:
        """Delete every document.

        Args:
            recreate_index: Also forget the vector dimension (a store without a model), so documents with
                embeddings of another size can be written next. A Milvus collection keeps its dimension (Milvus
                fixes it at creation): it is emptied the same way, and embeddings of another size are refused
                with an error naming the dimension; use a new ``uri`` (``#name``) for them. The store keeps its
                index kind, model and extensions (token index, document index, ...; rebuilt empty with the same
                settings). Nothing but the store's own data is touched.

        """
        with _engine_errors():
            store = self._write_handle()
            forget = recreate_index and store.encoder is None and store.can_forget_dimension
            store.delete_all(forget_dimension=forget)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents matching ``filters``; returns how many were deleted."""
        if not filters:
            raise FilterError("delete_by_filter() needs a non-empty filter; use delete_all_documents() to delete all")
        with _engine_errors():
            store = self._write_handle()
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
        except (TypeError, ValueError, RecursionError) as exc:
            raise DocumentStoreError(f"update_by_filter(): meta is not JSON serializable ({exc})") from exc
        with _engine_errors():
            store = self._write_handle()
            return store.update_by_filter(cast(Predicate, self._predicate(filters, store)), payload)

    def count_documents_by_filter(self, filters: dict[str, Any]) -> int:
        """Return the number of documents matching ``filters`` (all documents for an empty filter)."""
        with _engine_errors():
            store = self._read_handle()
            if self._id_lookup(filters) is not None:
                return len(self._matching_passages(filters, store))
            return store.count_passages(self._predicate(filters, store))

    def _meta_is_stored_meta(self, store: Store, predicate: Predicate | None, keys: Iterable[str] | None) -> bool:
        """Whether the Documents' meta of the matching passages is their stored metadata, for ``keys`` (``None``: all).

        Then the store computes metadata aggregates itself (SQL, a Milvus query). It is not where a passage
        keeps exact values beside their JSON form (tuples, datetimes: ``meta_exact``), or where a passage the
        engine wrote gets ``source_id``/``split_id``/``title_path`` added (:func:`document_meta`) and a key
        asked for is one of those.
        """
        total, (haystack, exact) = store.count_with_extra(_PAYLOAD_PATHS, predicate)
        if exact:
            return False
        return haystack == total or (keys is not None and not _ADDED_KEYS.intersection(keys))

    def count_unique_metadata_by_filter(self, filters: dict[str, Any], metadata_fields: list[str]) -> dict[str, int]:
        """Return, per metadata field, the number of distinct non-null values among matching documents.

        Counted by the store (SQLite ``json_extract``, or over the rows a Milvus query filtered), not by reading
        every Document.

        Args:
            filters: A Haystack filter; ``{}`` means every document.
            metadata_fields: Field names, with or without the ``meta.`` prefix.

        Returns:
            ``{field (without "meta."): number of distinct values}``.

        """
        keys = check_fields([_meta_key(name) for name in metadata_fields], "metadata_fields")
        with _engine_errors():
            store = self._read_handle()
            predicate = self._predicate(filters, store)
            with store.reading():  # one generation; Milvus fetches the rows once for both calls
                if self._meta_is_stored_meta(store, predicate, keys):
                    return store.count_unique_meta(keys, predicate)
        metas = self._matching_metas(filters)
        result: dict[str, int] = {}
        for key in keys:
            result[key] = len({_hashable(m[key]) for m in metas if m.get(key) is not None})
        return result

    def get_metadata_fields_info(self) -> dict[str, dict[str, str]]:
        """Return the metadata fields in use with their type (``keyword``, ``int``, ``float`` or ``boolean``).

        A field's type is that of its value in the last document holding one; computed by the store.
        """
        with _engine_errors():
            store = self._read_handle()
            with store.reading():
                if self._meta_is_stored_meta(store, None, None):
                    return {key: {"type": kind} for key, kind in store.meta_field_types().items()}
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
        key = check_field(_meta_key(metadata_field), "metadata_field")
        with _engine_errors():
            store = self._read_handle()
            with store.reading():
                if self._meta_is_stored_meta(store, None, [key]):
                    low, high = store.meta_min_max(key)
                    return {"min": low, "max": high}
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
    # rag-hier specific: tuning the store's model
    # ------------------------------------------------------------------------------------------------
    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune the store's model on judged queries; adopt it only when it measures better.

        :meth:`rag_hier.HierStore.tune` on this store (``queries``: a file or ``{query id: text}``; ``qrels``:
        a file or ``{query id: {document id: grade}}``; ``options``: :class:`rag_hier.TuneConfig` fields). Once
        adopted, the retrievers that take query text (``HierarchicalRetriever``, ``RagHierRetriever``) encode
        with the tuned model from the next query on; a pipeline that embeds queries with its own text embedder
        must point it at the store's model (``hier_store.encoder.model_name``). Without judged queries, pass
        ``generator=``: a Haystack ChatGenerator (asked for questions about each sampled passage, see
        :func:`chat_generator_questions`) or any callable ``(passage text) -> list[str]``. Returns the
        :class:`rag_hier.TuneReport`.
        """
        generator = options.get("generator")
        if generator is not None and not callable(generator) and hasattr(generator, "run"):
            options["generator"] = chat_generator_questions(generator)
        with _engine_errors():
            return self._write_handle().tune(queries, qrels, **options)

    def rollback_model(self) -> int:
        """Return the store to the model it encoded with before the last tuning (re-encodes every passage)."""
        with _engine_errors():
            return int(self._write_handle().rollback_model())

    # ------------------------------------------------------------------------------------------------
    # rag-hier specific: corpus documents
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
        with _engine_errors():
            return self._write_handle().add_documents(
                documents,
                max_passage_words=max_passage_words,
                policy=engine_policy,  # type: ignore[arg-type]
                show_progress_bar=show_progress_bar,
            )

    # ------------------------------------------------------------------------------------------------
    # search: every registered strategy, one way
    # ------------------------------------------------------------------------------------------------
    def _engine_retriever(self, store: Store, entry: StrategyEntry, params: RetrieverParams) -> _CachedRetriever:
        """The engine retriever of ``entry`` with ``params`` over ``store``, kept (with what it loaded) while open."""
        key = (entry.name, params)
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
        names = list(entry.extensions)
        for component in getattr(params, "strategies", ()) or ():
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
            if not isinstance(strategy_params, entry.params):
                raise ValueError(
                    f"strategy_params for {entry.name!r} must be a {entry.params.__name__}, "
                    f"got {type(strategy_params).__name__}"
                )
            return strategy_params
        return entry.parse(strategy_params, where=f"strategy_params of {entry.name!r}")

    def _queries(
        self,
        entry: StrategyEntry,
        store: Store,
        query: str | None,
        query_embedding: Any,
        query_sparse_embedding: Any,
    ) -> Queries:
        """The engine's queries from Haystack's inputs (checked; clear errors for what cannot be searched)."""
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        vector: list[float] | None = None
        if query_embedding is not None:
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
        if entry.retriever.over_vectors and vector is None:
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
        if vector is not None:
            dim = store.dimension
            if dim is not None and len(vector) != dim:
                raise StoreError(
                    f"the query embedding has {len(vector)} dimensions; the documents in {self.location} have {dim}. "
                    "Embed queries with the model that embedded the documents."
                )
            if store.similarity == "cosine":  # as InMemoryDocumentStore: cosine of the query, whatever its norm
                norm = math.sqrt(math.fsum(float(x) * float(x) for x in vector))
                if norm > 0:
                    vector = [float(x) / norm for x in vector]
        return Queries(
            texts=None if query is None else [query],
            vectors=None if vector is None else np.asarray([vector], dtype=np.float32),
            sparse=sparse,
        )

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
        check_scale_score(entry, scale_score)
        if filters:
            validate_filters(filters)
        with _engine_errors():
            store = self._read_handle()
            queries = self._queries(entry, store, query, query_embedding, query_sparse_embedding)
            if top_k == 0:
                return []
            if self._needed_extensions(entry, params):  # without any, the engine answers an empty store itself
                if self._empty(store):
                    return []
                self._prepare_extensions(entry, params, auto_extensions)
                store = self._read_handle()  # the read-write handle if extensions were just built
            cached = self._engine_retriever(store, entry, params)
            try:
                with cached.lock:
                    result = cached.retriever.run(queries, top_k, self._predicate(filters, store))[0]
            except StoreError as exc:
                hint = self._missing_extension_hint(entry, params, auto_option)
                if hint:
                    raise StoreError(f"{exc}{hint}") from exc
                raise
            scale = score_scale(entry) if scale_score else None
            return self._documents(
                store,
                result.hits,
                scale=store.similarity if scale == SIMILARITY_SCALE else scale,
                return_embedding=return_embedding,
                component_scores=component_scores,
                parent_documents=parent_documents,
            )

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

    # ------------------------------------------------------------------------------------------------
    # async twins: the sync work runs in a worker thread, off the event loop
    # ------------------------------------------------------------------------------------------------
    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    async def count_documents_async(self) -> int:
        """Asynchronous :meth:`count_documents`."""
        return await self._off_loop(self.count_documents)

    async def filter_documents_async(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Asynchronous :meth:`filter_documents`."""
        return await self._off_loop(self.filter_documents, filters)

    async def write_documents_async(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Asynchronous :meth:`write_documents`."""
        return await self._off_loop(self.write_documents, documents, policy)

    async def delete_documents_async(self, document_ids: list[str]) -> None:
        """Asynchronous :meth:`delete_documents`."""
        await self._off_loop(self.delete_documents, document_ids)

    async def delete_all_documents_async(self, recreate_index: bool = False) -> None:
        """Asynchronous :meth:`delete_all_documents`."""
        await self._off_loop(self.delete_all_documents, recreate_index)

    async def delete_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`delete_by_filter`."""
        return await self._off_loop(self.delete_by_filter, filters)

    async def update_by_filter_async(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Asynchronous :meth:`update_by_filter`."""
        return await self._off_loop(self.update_by_filter, filters, meta)

    async def count_documents_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`count_documents_by_filter`."""
        return await self._off_loop(self.count_documents_by_filter, filters)

    async def count_unique_metadata_by_filter_async(
        self, filters: dict[str, Any], metadata_fields: list[str]
    ) -> dict[str, int]:
        """Asynchronous :meth:`count_unique_metadata_by_filter`."""
        return await self._off_loop(self.count_unique_metadata_by_filter, filters, metadata_fields)

    async def get_metadata_fields_info_async(self) -> dict[str, dict[str, str]]:
        """Asynchronous :meth:`get_metadata_fields_info`."""
        return await self._off_loop(self.get_metadata_fields_info)

    async def get_metadata_field_min_max_async(self, metadata_field: str) -> dict[str, Any]:
        """Asynchronous :meth:`get_metadata_field_min_max`."""
        return await self._off_loop(self.get_metadata_field_min_max, metadata_field)

    async def get_metadata_field_unique_values_async(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Asynchronous :meth:`get_metadata_field_unique_values`."""
        return await self._off_loop(
            self.get_metadata_field_unique_values, metadata_field, search_term, from_, size, filters
        )

    async def retrieve_async(
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
        """Asynchronous :meth:`retrieve`."""
        return await self._off_loop(
            self.retrieve,
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

    async def embedding_retrieval_async(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`embedding_retrieval`."""
        return await self._off_loop(
            self.embedding_retrieval, query_embedding, filters, top_k, scale_score, return_embedding
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
        return await self._off_loop(self.text_retrieval, query, filters, top_k, scale_score, return_embedding)

    async def svdr_retrieval_async(
        self,
        query: str,
        mode: str = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`svdr_retrieval`."""
        return await self._off_loop(
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
        return await self._off_loop(
            self.sparse_embedding_retrieval, query_sparse_embedding, filters, top_k, return_embedding
        )

    async def bm25_retrieval_async(
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
        """Asynchronous :meth:`bm25_retrieval`."""
        return await self._off_loop(
            self.bm25_retrieval,
            query,
            filters,
            top_k,
            scale_score,
            k1=k1,
            b=b,
            auto_extensions=auto_extensions,
        )

    async def hierarchical_retrieval_async(
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
        """Asynchronous :meth:`hierarchical_retrieval`."""
        return await self._off_loop(
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
            query_embedding=query_embedding,
        )
