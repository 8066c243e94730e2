"""RagHierDocumentStore: a Haystack document store backed by a rag-hier store (a directory, or a Milvus collection).

The store converts Haystack objects to the engine's passages and hits and back, and calls only the engine's
public API: the store contract (:class:`rag_hier.store.contract.StoreBackend`) for reads and writes (filters are
Haystack's reference matcher run over the engine's records, on those a pushed-down translation selects:
:mod:`._pushdown`), ``ensure_extension`` for extra indexes, and the strategy registry
(:mod:`rag_hier.retrieval.registry`) for every kind of search. Its handles are the engine's
:class:`rag_hier.store.session.StoreSession` (opened or created on first use, read-only until the first write).
All handles on one directory in a process share one engine (the engine's doing, not this module's), and each
handle sees other processes' commits at its next read. With ``uri=`` the same class works on the engine's Milvus
backend (a Milvus Lite file or a server).

The class is put together by job: this module holds its configuration, handles, filters and the DocumentStore
protocol's reads; writes and deletes are :mod:`._writes`, metadata aggregates :mod:`._aggregates`, searches
:mod:`._search`, the async twins :mod:`._async`, score scaling :mod:`._scores`, the session :mod:`._lifecycle`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DocumentStoreError
from haystack.utils import ComponentDevice, Secret
from haystack.utils.filters import document_matches_filter
from haystack_integrations.components.embedders.rag_hier._backend import resolve_device
from haystack_integrations.document_stores.rag_hier._aggregates import MetadataAggregates
from haystack_integrations.document_stores.rag_hier._async import AsyncTwins
from haystack_integrations.document_stores.rag_hier._convert import (
    document_meta,
    filter_roots,
    passage_to_document,
    record_view,
    validate_filters,
)
from haystack_integrations.document_stores.rag_hier._lifecycle import (
    _EMBEDDED_BY,
    MILVUS_TOKEN_ENV,
    _engine_errors,
    parse_index,
    store_session,
)
from haystack_integrations.document_stores.rag_hier._lifecycle import (
    SPARSE_EMBEDDING_KEY as SPARSE_EMBEDDING_KEY,
)
from haystack_integrations.document_stores.rag_hier._pushdown import translate_filter
from haystack_integrations.document_stores.rag_hier._scores import (
    BM25_SCALE as BM25_SCALE,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    BM25_SCALING_FACTOR as BM25_SCALING_FACTOR,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    DOT_PRODUCT_SCALING_FACTOR as DOT_PRODUCT_SCALING_FACTOR,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    SIMILARITY_SCALE as SIMILARITY_SCALE,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    check_scale_score as check_scale_score,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    scaled_score as scaled_score,
)
from haystack_integrations.document_stores.rag_hier._scores import (
    score_scale as score_scale,
)
from haystack_integrations.document_stores.rag_hier._search import StrategySearch, _CachedRetriever
from haystack_integrations.document_stores.rag_hier._writes import (
    UNIT_NORM_TOLERANCE as UNIT_NORM_TOLERANCE,
)
from haystack_integrations.document_stores.rag_hier._writes import DocumentWrites

from rag_hier.corpus.model import Passage
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.retrieval.base import RetrieverParams
from rag_hier.store.contract import SIMILARITIES, StoreBackend
from rag_hier.store.filters import Predicate, Refined
from rag_hier.store.hit_table import HitRowsMode
from rag_hier.store.records import ModelSwitch
from rag_hier.store.session import token_index_options

logger = logging.getLogger(__name__)

__all__ = ["RagHierDocumentStore"]

Store = StoreBackend
"""A handle on the store: a local directory or a Milvus collection, through the store contract."""


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


class RagHierDocumentStore(StrategySearch, MetadataAggregates, DocumentWrites, AsyncTwins):
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
            store. On an existing store it must be the store's model: a model the store encoded with before
            (its base, before ``tune`` adopted a tuned one) gives way to the store's current model, so a saved
            pipeline follows the store; any other model is refused unless ``allow_other_model=True``.
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
        hit_rows: Where a dense search reads the rows of its hits (their text and metadata): ``"sqlite"``
            (default: the store's database, one statement per search) or ``"memory"`` (a local store keeps
            the hit rows of every vector in memory, caught up with every commit, including other processes':
            no SQL on the search path, for more memory; see ``rag_hier.store.hit_table``). The same
            Documents either way. A Milvus collection reads its hits from Milvus (``"sqlite"`` only).
        allow_other_model: Encode with ``model`` even when the existing store's vectors come from another
            model (a warning names both); by default that is refused with one line naming both.

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
        hit_rows: HitRowsMode = "sqlite",
        allow_other_model: bool = False,
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
        from rag_hier.store.milvus.client import check_connection_options  # Milvus code loads on use

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
        if not isinstance(allow_other_model, bool):
            raise ValueError(f"allow_other_model must be True or False, got {allow_other_model!r}")
        if similarity is not None and similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)} or None, got {similarity!r}")
        self._index_config = parse_index(index)
        self._token_options = token_index_options(token_index)
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
        self.hit_rows: HitRowsMode = hit_rows  # checked by the store session (below)
        self.allow_other_model = allow_other_model
        self._lock = threading.RLock()
        self._encoder: DenseEncoder | None = None
        self._query_encoder: tuple[dict[str, Any], DenseEncoder] | None = None  # the embedder's model, recorded
        self._retrievers: dict[tuple[str, RetrieverParams], _CachedRetriever] = {}
        self._session = store_session(self, self._token_options)

    # ------------------------------------------------------------------------------------------------
    # handles: the engine's store session (read-only until the first write)
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

    def _check_recorded(self, store: Store) -> None:
        """Compare what the store recorded with this instance's options."""
        if self.similarity is not None and store.similarity != self.similarity:
            raise StoreError(
                f"the store at {store.location} records similarity {store.similarity!r}, not {self.similarity!r}; "
                "leave similarity=None to use the recorded one (it is fixed when a store is created)"
            )

    @property
    def _reader(self) -> Store | None:
        """The read-only handle, if one is open."""
        return self._session.open_reader

    @property
    def _writer(self) -> Store | None:
        """The read-write handle, if one is open."""
        return self._session.open_writer

    def _read_handle(self) -> Store:
        """The handle reads use: read-only until this instance writes (then its read-write handle)."""
        try:  # not _engine_errors(): every read asks, and a context manager costs more than the answer
            return self._session.reader()
        except StoreError as exc:
            raise DocumentStoreError(str(exc)) from exc

    def _write_handle(self, dimension_hint: int | None = None) -> Store:
        """The read-write handle, opened on first use (with the configured extensions ensured).

        ``dimension_hint``: the size of the embeddings about to be written, for a Milvus collection created now.
        """
        try:
            return self._session.writer(dimension_hint)
        except StoreError as exc:
            raise DocumentStoreError(str(exc)) from exc

    def _ensure_extension(self, store: Store, name: str) -> Any:
        """The store's extension ``name``, built with this store's configuration when it has none.

        The one place this adapter adds extensions; a read-only handle refuses to (``StoreError``).
        """
        return self._session.ensure_extension(name, store)

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

    def query_encoder(self) -> DenseEncoder:
        """The model that encodes query text for this store now.

        Its own model (the tuned one after ``tune``), else the one that embedded its documents
        (:class:`RagHierDocumentEmbedder`'s). ``RagHierTextEmbedder(document_store=...)`` encodes with it.

        Raises:
            DocumentStoreError: The store has no model to encode query text with.

        """
        store = self._read_handle()
        with _engine_errors(), store.reading():
            encoder = store.encoder or self._embedder_model(store)
        if encoder is None:
            raise DocumentStoreError(
                f"the store at {self.location} has no model to encode query text with: create it with model=..., "
                "or give the text embedder the model that embedded the documents (model=...)"
            )
        return encoder

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

    def close(self) -> None:
        """Release this instance's handles; the store reopens on next use."""
        with self._lock:
            self._retrievers.clear()
        self._session.close()

    async def close_async(self) -> None:
        """Asynchronous :meth:`close`."""
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """Serialize this store's configuration (the directory path or Milvus URI, never its data) to a dictionary.

        ``token_index``, ``dense``, ``similarity``, ``dimension`` and ``hit_rows`` are written only when set (not at
        their defaults), so pipelines saved before these options existed serialize exactly as they did. A Milvus
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
        if self.hit_rows != "sqlite":
            options["hit_rows"] = self.hit_rows
        if self.allow_other_model:
            options["allow_other_model"] = True
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

    def count_documents_by_filter(self, filters: dict[str, Any]) -> int:
        """Return the number of documents matching ``filters`` (all documents for an empty filter)."""
        with _engine_errors():
            store = self._read_handle()
            if self._id_lookup(filters) is not None:
                return len(self._matching_passages(filters, store))
            return store.count_passages(self._predicate(filters, store))

    # ------------------------------------------------------------------------------------------------
    # rag-hier specific: tuning the store's model
    # ------------------------------------------------------------------------------------------------
    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune the store's model on judged queries; adopt it only when it measures better.

        :meth:`rag_hier.HierStore.tune` on this store (``queries``: a file or ``{query id: text}``; ``qrels``:
        a file or ``{query id: {document id: grade}}``; ``options``: :class:`rag_hier.TuneConfig` fields). Once
        adopted, the retrievers that take query text (``HierarchicalRetriever``, ``RagHierRetriever``) encode
        with the tuned model from the next query on, and so does ``RagHierTextEmbedder(document_store=...)``; a
        ``RagHierTextEmbedder(model=...)`` of the old model is refused by the retriever. Without judged queries, pass
        ``generator=``: a Haystack ChatGenerator (asked for questions about each sampled passage, see
        :func:`chat_generator_questions`) or any callable ``(passage text) -> list[str]``. Returns the
        :class:`rag_hier.TuneReport`.
        """
        generator = options.get("generator")
        if generator is not None and not callable(generator) and hasattr(generator, "run"):
            options["generator"] = chat_generator_questions(generator)
        with _engine_errors():
            return self._write_handle().tune(queries, qrels, **options)

    def rollback_model(self, to: str = "previous") -> ModelSwitch:
        """Return the store to the model it encoded with before the last tuning (re-encodes every passage).

        ``to="original"``: to the model the store was built with. Returns a :class:`rag_hier.ModelSwitch`: the
        committed ``generation``, the ``model`` now current, the ``previous`` one left and the ``direction``
        (``"back"``, ``"forward"``, ``"original"``); ``print()`` it for one line.
        """
        with _engine_errors():
            return self._write_handle().rollback_model(to=to)
