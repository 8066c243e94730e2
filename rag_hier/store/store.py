"""HierStore: one directory = one collection (manifest + SQLite + FAISS index files).

Layout::

    my-collection/
      manifest.json   format version, encoder, dimension, index configuration, counts, checksums
      store.sqlite    documents, passages (text, title path, metadata), the committed state
      dense.faiss     passage vectors (FAISS ids = SQLite passage rowids, never reused)
      store.lock      the writer lock (empty)

This module is the front: creating and opening stores, and the public methods, each a thin call into the
part of the package that does the job — :mod:`~rag_hier.store.core` (the shared engine of a directory:
one consistent view across handles and processes, commit and recovery), :mod:`~rag_hier.store.writes`
(writes), :mod:`~rag_hier.store.records` (typed records), :mod:`~rag_hier.store.extensions` (extra indexes
that follow the store). Nothing is ever unpickled: FAISS, SQLite and JSON only.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import shutil
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast, overload

import numpy as np

from rag_hier._version import __version__
from rag_hier.corpus.model import Document, Passage
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DimensionMismatchError, StoreCorruptedError, StoreError
from rag_hier.index.dense import DenseIndex, IndexConfig
from rag_hier.store import meta_index, meta_stats
from rag_hier.store.contract import SIMILARITIES, FilterPushdown, Filters, Similarity, StoreExtension
from rag_hier.store.core import StoreCore, connect, copy_committed
from rag_hier.store.encoder_switch import EncodedPassages, check_extensions, encode_passages, switch_encoder
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.files import LOCK_FILE
from rag_hier.store.filters import Refined, compile_filter
from rag_hier.store.models import check_given_encoder, stored_model_dir
from rag_hier.store.records import (
    PassageRecord,
    WritePolicy,
    WriteSummary,
    hit_rows,
    hit_rows_if_current,
    iter_records,
    records_by_rowid,
)
from rag_hier.store.schema import SCHEMA, dumps, query_in, rows_in
from rag_hier.store.search_hook import DenseSearch, set_default_search
from rag_hier.store.sql_filters import select_matching
from rag_hier.store.state import DATABASE, DENSE_FILE, FORMAT_VERSION, MANIFEST
from rag_hier.store.writes import Writer, check_ids

if TYPE_CHECKING:
    from rag_hier.store.milvus.store import MilvusStore

logger = logging.getLogger(__name__)

__all__ = [
    "DATABASE",
    "FORMAT_VERSION",
    "MANIFEST",
    "HierStore",
    "WritePolicy",
    "WriteSummary",
    "set_default_search",
    "set_tuner",
]

FACTORY_MODULE = "rag_hier.store.factory"
"""Where :func:`~rag_hier.store.factory.open_store` / ``create_store`` live (they know every backend)."""

_TUNER: Callable[..., Any] | None = None
TUNER_MODULE = "rag_hier.tuning"
"""The module whose ``store_tune`` :meth:`HierStore.tune` runs (unless :func:`set_tuner` installed another)."""
_HASHES_SQL = "SELECT id, content_hash FROM passages WHERE id IN ({marks})"


def _unexpected(method: str, options: Mapping[str, Any]) -> TypeError:
    """The error for keywords that are neither a parameter nor (without ``uri=``) a Milvus option."""
    names = ", ".join(repr(k) for k in sorted(options))
    return TypeError(
        f"HierStore.{method}() got unexpected keyword argument(s) {names} (Milvus connection options are taken only "
        "with uri=)"
    )


def set_tuner(tuner: Callable[..., Any]) -> None:
    """Install what :meth:`HierStore.tune` runs instead of :mod:`rag_hier.tuning`'s ``store_tune``."""
    global _TUNER
    _TUNER = tuner


def _index_config(index: IndexConfig | str | Mapping[str, Any]) -> IndexConfig:
    if isinstance(index, IndexConfig):
        return index
    if isinstance(index, str):
        return IndexConfig(kind=index)  # type: ignore[arg-type]
    if isinstance(index, Mapping):
        return IndexConfig.from_dict(dict(index))
    raise ValueError(f"index must be 'flat', 'ivf', 'hnsw', an IndexConfig or a dict of options, got {index!r}")


class HierStore(DenseSearch):
    """A persistent collection of documents and passages with a FAISS vector index.

    Create one with :meth:`create` (or :meth:`open_or_create`), reopen it with :meth:`open`. Every write
    (:meth:`add_documents`, :meth:`add_passages`, deletes, metadata updates) is atomic and durable when it
    returns; group many writes into one commit with ``with store.batch(): ...``. Handles on one directory in
    a process share one engine (a write through one is seen by all at once); a handle sees other processes'
    commits at its next read, and every read answers from one committed generation.

    Example:
        >>> store = HierStore.create("my-collection")  # doctest: +SKIP
        >>> store.add_documents(read_corpus("docs/"))  # doctest: +SKIP
        >>> store.search("how do tides work?", top_k=5)  # doctest: +SKIP

    """

    filter_pushdown: ClassVar[FilterPushdown] = FilterPushdown(numbers=True, max_members=10_000)
    """Filters become one SQLite query: numeric comparisons too, and id or value lists up to 10,000 members."""
    can_forget_dimension: ClassVar[bool] = True
    """A store without a model can be emptied and take vectors of another dimension."""

    @property
    def connection_options(self) -> dict[str, Any]:
        """Nothing but the path reopens a local store: ``{}``."""
        return {}

    _core: StoreCore

    def __init__(self, path: Path, encoder: DenseEncoder | None, read_only: bool, device: str | None = None) -> None:
        self.path = path
        self.read_only = read_only
        self._encoder_arg = encoder
        self._device = device
        self._encoder_checked = False
        self._closer: weakref.finalize | None = None
        self._override_key: Any = None  # the recorded encoder an explicit encoder= was given for

    def _attach(self, core: StoreCore) -> None:
        self._core = core
        self._closer = weakref.finalize(self, core.release)

    # ------------------------------------------------------------------------------------------------
    # creation and loading
    # ------------------------------------------------------------------------------------------------
    @overload
    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        model: str | None = ...,
        encoder: DenseEncoder | None = ...,
        dimension: int | None = ...,
        index: IndexConfig | str | Mapping[str, Any] = ...,
        corpus: Mapping[str, Any] | None = ...,
        similarity: Similarity | None = ...,
        exist_ok: bool = ...,
    ) -> HierStore: ...
    @overload
    @classmethod
    def create(cls, path: None = None, *, uri: str, **kwargs: Any) -> MilvusStore: ...
    @classmethod
    def create(
        cls,
        path: str | Path | None = None,
        *,
        uri: str | None = None,
        model: str | None = DEFAULT_MODEL,
        encoder: DenseEncoder | None = None,
        dimension: int | None = None,
        index: IndexConfig | str | Mapping[str, Any] = "flat",
        corpus: Mapping[str, Any] | None = None,
        similarity: Similarity | None = None,
        exist_ok: bool = False,
        **milvus_options: Any,
    ) -> HierStore | MilvusStore:
        """Create an empty store in directory ``path`` (or a collection in Milvus at ``uri``).

        Args:
            path: Directory to create (it may exist if empty).
            uri: Instead of ``path``: a Milvus Lite file (``./x.db``, ``./x.db#collection``) or a Milvus server
                (``http://host:19530``); returns a :class:`~rag_hier.store.milvus.MilvusStore`. Milvus options
                (``collection``, ``token``, ``db_name``, ``timeout``, ``client_options`` for TLS) pass through.
            model: Sentence-transformers model for passages and queries; ``None`` for a store that only
                receives vectors from outside (e.g. a framework's embedder).
            encoder: A ready :class:`DenseEncoder` (overrides ``model``; lets you choose device etc.).
            dimension: Vector dimension; inferred from the encoder, or from the first vectors written.
            index: ``"flat"``, ``"ivf"``, ``"hnsw"``, or an :class:`IndexConfig` (or its dict).
            corpus: Free facts about the corpus recorded in the manifest (format, passage length).
            similarity: How scores compare vectors, recorded with the store: ``"cosine"`` (unit vectors) or
                ``"dot_product"``; default: ``"cosine"`` when the encoder normalizes, else ``"dot_product"``.
            exist_ok: Open the store instead of failing when ``path`` already holds one.

        """
        if uri is None and milvus_options:
            raise _unexpected("create", milvus_options)
        if uri is not None:  # another backend: the factory (a plugin lookup; this module imports no backend)
            factory = importlib.import_module(FACTORY_MODULE)
            return factory.create_store(
                path,
                uri=uri,
                model=model,
                encoder=encoder,
                dimension=dimension,
                index=index,
                corpus=corpus,
                similarity=similarity,
                exist_ok=exist_ok,
                **milvus_options,
            )
        if path is None:
            raise ValueError("HierStore.create needs a directory path (or uri= for Milvus)")
        root = Path(path)
        if (root / MANIFEST).exists():
            if exist_ok:
                return cls.open(root, encoder=encoder)
            raise StoreError(f"{root} already holds a rag-hier store; open it with HierStore.open()")
        if (root / DATABASE).exists():
            raise StoreCorruptedError(f"{root / MANIFEST} is missing but {DATABASE} is there: a damaged store")
        if root.exists() and (not root.is_dir() or any(p.name != LOCK_FILE for p in root.iterdir())):
            raise StoreError(f"{root} exists and is not an empty directory; choose a new path for the store")
        if similarity is not None and similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}; got {similarity!r}")
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive integer, got {dimension!r}")
        config = _index_config(index)
        if encoder is None and model is not None:
            encoder = DenseEncoder(model)
        encoder_cfg: dict[str, Any] | None = None
        if encoder is not None:
            encoder_cfg = encoder.config()
            if dimension is not None and dimension != encoder_cfg["dimension"]:
                raise DimensionMismatchError(
                    f"dimension={dimension} but model {encoder.model_name!r} outputs {encoder_cfg['dimension']}"
                )
            dimension = encoder_cfg["dimension"]
            if similarity is None:
                similarity = "cosine" if encoder_cfg["normalize_embeddings"] else "dot_product"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {root}: {exc.strerror or exc}") from exc
        state: dict[str, Any] = {
            "format": "rag-hier-store",
            "format_version": FORMAT_VERSION,
            "created_with": f"rag-hier {__version__}",
            "generation": 0,
            "encoder": encoder_cfg,
            "dimension": dimension,
            "similarity": similarity or "dot_product",
            "indexes": {"dense": {"file": DENSE_FILE, "config": config.to_dict()}},
            "corpus": dict(corpus or {}),
            "counts": {"documents": 0, "passages": 0, "vectors": 0},
            "files": {},
        }
        try:
            db = connect(root / DATABASE)
            db.executescript(SCHEMA)
            db.execute("INSERT INTO state(key, value) VALUES ('manifest', ?)", (dumps(state),))
        except Exception as exc:
            raise StoreError(f"cannot create the store database in {root}: {exc}") from exc
        store = cls(root, encoder, read_only=False)
        core = StoreCore(root, db, state)
        store._attach(core)
        store._override_key = store.encoder_key
        StoreCore.register(core)
        if dimension is not None:
            core.indexes["dense"] = DenseIndex(dimension, config)
            core.dirty.add("dense")
        with store.batch():
            pass
        return store

    @overload
    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        encoder: DenseEncoder | None = ...,
        device: str | None = ...,
        read_only: bool = ...,
        verify_checksums: bool = ...,
        allow_other_model: bool = ...,
    ) -> HierStore: ...
    @overload
    @classmethod
    def open(cls, path: None = None, *, uri: str, **kwargs: Any) -> MilvusStore: ...
    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        uri: str | None = None,
        encoder: DenseEncoder | None = None,
        device: str | None = None,
        read_only: bool = False,
        verify_checksums: bool = True,
        allow_other_model: bool = False,
        **milvus_options: Any,
    ) -> HierStore | MilvusStore:
        """Open an existing store, checking it (schema, manifest, counts, checksums); ``uri=``: a Milvus collection.

        A read-write handle also finishes a commit whose writer died after the commit point (renames, the
        manifest, temporary files) when no other process is writing; read-only handles never touch a file.

        Args:
            path: The store directory.
            encoder: Use this encoder instead of building one from the manifest (to choose its device, batch
                size, ...). It must load the model the store was built with (the same weights under any
                name or path), else :class:`~rag_hier.errors.ModelMismatchError`.
            device: Device for the recorded encoder (``None``: CUDA when available).
            read_only: Refuse writes (and never touch the files).
            verify_checksums: Hash every file against the manifest (sizes and counts are always checked).
            allow_other_model: Encode with ``encoder`` even though it is another model than the store's
                (logged as a warning): its query vectors are compared with the store's passage vectors.
            uri: Instead of ``path``: a Milvus URI (see :meth:`create`); Milvus options pass through.

        """
        if uri is None and milvus_options:
            raise _unexpected("open", milvus_options)
        if uri is not None:  # another backend: the factory (a plugin lookup; this module imports no backend)
            factory = importlib.import_module(FACTORY_MODULE)
            return factory.open_store(
                path,
                uri=uri,
                encoder=encoder,
                device=device,
                read_only=read_only,
                verify_checksums=verify_checksums,
                allow_other_model=allow_other_model,
                **milvus_options,
            )
        if path is None:
            raise ValueError("HierStore.open needs a directory path (or uri= for Milvus)")
        root = Path(path)
        store = cls(root, encoder, read_only=read_only, device=device)
        StoreCore.shared(root, store, store._attach, verify=verify_checksums)
        try:
            check_given_encoder(
                encoder,
                store._core.state.get("encoder"),
                location=str(root),
                root=root.absolute(),
                allow_other_model=allow_other_model,
            )
        except BaseException:
            store.close()
            raise
        store._override_key = store.encoder_key
        if not read_only:
            store._core.try_recover(store)
        return store

    @classmethod
    def open_or_create(cls, path: str | Path, **create_kwargs: Any) -> HierStore:
        """:meth:`open` the store at ``path`` if there is one, else :meth:`create` it."""
        if (Path(path) / MANIFEST).exists():
            return cls.open(path, encoder=create_kwargs.get("encoder"))
        return cls.create(path, **create_kwargs)

    def refresh(self) -> HierStore:
        """Bring this handle up to date with other processes' commits (reads do this by themselves)."""
        with self._reading():
            pass
        return self

    def close(self) -> None:
        """Release this handle (the last handle on a directory closes its files); it must not be used afterwards."""
        if self._closer is not None:
            self._closer()

    def __enter__(self) -> HierStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.count_passages()

    def __repr__(self) -> str:
        return f"HierStore({str(self.path)!r}, passages={self._core.state['counts']['passages']})"

    # ------------------------------------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------------------------------------
    def _reading(self) -> contextlib.AbstractContextManager[None]:
        return self._core.reading(self)

    @contextlib.contextmanager
    def reading(self) -> Iterator[HierStore]:
        """Run several reads against one committed generation: ``with store.reading(): ...``.

        Every read inside the block (records, embeddings, counts, searches) answers from the generation
        current when the block starts: other threads of this process and writers in other processes wait
        until it ends, so keep it short, and write nothing inside it (a write raises).
        """
        with self._reading():
            yield self

    @property
    def location(self) -> str:
        """The store directory, as a string."""
        return str(self.path)

    @property
    def generation(self) -> int:
        """The committed generation: it changes with every commit (cheap to poll)."""
        with self._reading():
            return self._core.generation

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the committed state (what ``manifest.json`` mirrors)."""
        with self._reading():
            return json.loads(dumps(self._core.state))

    @property
    def dimension(self) -> int | None:
        """Vector dimension (``None`` until the first vector for a store without encoder)."""
        dim = self._core.state.get("dimension")
        return int(dim) if dim is not None else None

    @property
    def similarity(self) -> Similarity:
        """How dense scores compare vectors: ``"cosine"`` (unit vectors) or ``"dot_product"``."""
        recorded = self._core.state.get("similarity")
        if recorded in SIMILARITIES:
            return recorded
        enc = self._core.state.get("encoder") or {}
        return "cosine" if enc.get("normalize_embeddings") else "dot_product"

    @property
    def encoder(self) -> DenseEncoder | None:
        """The store's dense encoder (``None`` for stores fed with external vectors)."""
        if self._encoder_arg is not None:
            if self._override_key == self.encoder_key:
                return self._encoder_arg
            # the store switched models since this handle was opened with encoder=: that encoder belongs to
            # the old vectors, so the store's own (new) model is used from now on
            logger.warning(
                "%s: the store now encodes with %s; the encoder this handle was opened with (%s) is no longer used",
                self.path,
                (self._core.state.get("encoder") or {}).get("model"),
                self._encoder_arg.model_name,
            )
            self._encoder_arg = None
        enc = self._core.state.get("encoder")
        if not enc:
            return None
        key = self._device
        cached = self._core.encoders.get(key)
        tag = self.encoder_key
        if cached is None or self._core.encoder_tags.get(key) != tag:
            cached = self._core.encoders[key] = self._recorded_encoder(enc)
            self._core.encoder_tags[key] = tag
        return cached

    def _recorded_encoder(
        self, enc: Mapping[str, Any], model: str | None = None, device: str | None = None
    ) -> DenseEncoder:
        """A :class:`DenseEncoder` for a recorded encoder configuration (``model``: load this path instead)."""
        weights = None
        if model is None:
            # a model kept inside the store is checked against its recorded digest before it is loaded; one
            # outside it, by the digest of its weights recorded when the store was built
            model = str(stored_model_dir(self.path.absolute(), enc)) if enc.get("stored") else str(enc["model"])
            weights = None if enc.get("stored") else enc.get("weights_sha256")
        encoder = DenseEncoder(
            model,
            device=device if device is not None else self._device,
            normalize_embeddings=enc.get("normalize_embeddings"),
            query_prompt=enc.get("query_prompt"),
            document_prompt=enc.get("document_prompt"),
            max_seq_length=enc.get("max_seq_length"),
            weights_sha256=weights,
        )
        encoder.weights_owner = f"the store at {self.path}"
        return encoder

    @property
    def encoder_key(self) -> tuple[Any, ...] | None:
        """Which recorded encoder this handle's state holds: changes whenever the store's model is switched.

        A search compares it before encoding its queries and after searching: equal means the vectors and
        the index it searched come from the same model (a switch records the generation it happened at, so a
        later switch back to the same model still changes it).
        """
        enc = self._core.state.get("encoder")
        if not enc:
            return None
        return (enc.get("model"), enc.get("since"), enc.get("sha256"))

    @property
    def model_info(self) -> dict[str, Any]:
        """What the store encodes with, without loading it: the recorded encoder, and the one a rollback returns to.

        ``current`` and ``previous`` are the recorded configurations (``None`` when there is none); a stored
        model (``stored``) lives in the store directory under ``model``, checked by ``sha256`` before loading;
        ``adopted`` holds what a tuning run recorded when it adopted the model.
        """
        with self._reading():
            state = json.loads(dumps(self._core.state))
        return {"current": state.get("encoder"), "previous": state.get("encoder_previous")}

    @property
    def index(self) -> DenseIndex | None:
        """The passage-level dense index."""
        with self._reading():
            return self._core.indexes.get("dense")

    @property
    def index_config(self) -> IndexConfig:
        """Configuration of the passage-level index."""
        return self._core.index_config

    @property
    def corpus_info(self) -> dict[str, Any]:
        """Facts recorded about the corpus (format, passage length, ...)."""
        with self._reading():
            return dict(self._core.state.get("corpus", {}))

    def info(self) -> dict[str, Any]:
        """A summary for ``rag-hier info``."""
        with self._reading():
            out = self.manifest
            out["path"] = str(self.path)
            index = self._core.indexes.get("dense")
            if index is not None:
                out["index_state"] = index.describe()
            return out

    # ------------------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self) -> Iterator[HierStore]:
        """Group writes into one atomic commit; on an exception nothing of the batch is kept."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only")
        with self._core.writing(self):
            yield self

    def _writer(self) -> Writer:
        return Writer(self._core, self, self._require_encoder)

    def _require_encoder(self, what: str) -> DenseEncoder:
        encoder = self.encoder
        if encoder is None:
            raise StoreError(
                f"{what} needs an encoder, and the store at {self.path} has none: pass vectors, or open the store "
                "with encoder=DenseEncoder(model)"
            )
        if not self._encoder_checked:
            dim = encoder.dimension
            if self.dimension is not None and dim != self.dimension:
                raise DimensionMismatchError(
                    f"model {encoder.model_name!r} outputs {dim}-d vectors; the store at {self.path} "
                    f"holds {self.dimension}-d vectors"
                )
            self._encoder_checked = True
        return encoder

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None = None,
        policy: WritePolicy = "upsert",
        show_progress_bar: bool = False,
        encode: bool = True,
    ) -> WriteSummary:
        """Split documents into passages, encode what changed, and store them.

        Re-adding a document (``policy="upsert"``) replaces its passages and keeps its document row with the
        new title, metadata and table of contents; passages whose text and title path are unchanged keep
        their vectors and are not re-encoded. ``"skip"`` leaves stored documents alone; ``"fail"`` raises
        :class:`DuplicateIdError` before writing anything. ``encode=False`` stores passages without dense
        vectors (a store searched through an extension such as SVDR's token index; it needs no encoder).
        A document that yields no passage (no text) is stored with its title and metadata and counted in
        :attr:`WriteSummary.documents_empty`.
        """
        with self.batch():
            return self._writer().add_documents(
                documents,
                max_passage_words=max_passage_words,
                policy=policy,
                show_progress_bar=show_progress_bar,
                encode=encode,
            )

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None = None,
        *,
        policy: WritePolicy = "upsert",
        encode_missing: bool | None = None,
        allow_moves: bool = False,
    ) -> WriteSummary:
        """Store passages as given (no splitting), with caller vectors or vectors from the store's encoder.

        Args:
            passages: Passages; documents named by their ``doc_id`` are created as needed.
            embeddings: ``(n, dim)`` array, or a list holding a vector or ``None`` per passage. Vectors must be
                real and finite; those that float32 cannot hold exactly are also kept exactly, so
                :meth:`get_embeddings` returns them as written.
            policy: ``"upsert"`` replaces stored passages with the same id, ``"skip"`` keeps them,
                ``"fail"`` raises :class:`DuplicateIdError` before writing anything. Within the input,
                the last occurrence of an id wins (the first under ``"skip"``).
            encode_missing: Encode passages that come without a vector (default: when the store has an
                encoder and no ``embeddings`` were given).
            allow_moves: Under ``"upsert"``, let a passage replace a stored one of the same id that belongs
                to another document (a document left without passages is removed). By default that is a
                :class:`DuplicateIdError`: an id held by another document is a collision, not an update.
                The framework adapters pass ``True`` (their ids name chunks, whatever their parent).

        """
        with self.batch():
            return self._writer().add_passages(
                passages, embeddings, policy=policy, encode_missing=encode_missing, allow_moves=allow_moves
            )

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id (unknown ids are ignored); returns how many were deleted."""
        ids = check_ids(passage_ids, "passage_ids")
        with self.batch():
            writer = self._writer()
            return writer.delete_rowids(writer.rowids_of_passages(ids))

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and all their passages; returns how many passages were deleted."""
        ids = check_ids(doc_ids, "doc_ids")
        with self.batch():
            return self._writer().delete_documents(ids)

    def delete_by_filter(self, filters: Filters) -> int:
        """Delete every passage matching ``filters``; returns how many."""
        predicate = compile_filter(filters)
        with self.batch():
            rowids = None if predicate is None else self._select_matching(filters)
            if rowids is not None:
                rowids.sort()
            else:
                rowids = [r.rowid for r in self._core.records(cache=False) if predicate is None or predicate(r)]
            return self._writer().delete_rowids(rowids)

    def delete_all(self, *, forget_dimension: bool = False) -> int:
        """Delete every passage and document (ids are still never reused); returns how many passages.

        Args:
            forget_dimension: Also forget the vector dimension (a store without an encoder), so vectors of
                another size can be written next; the passage index is dropped and the extensions are rebuilt
                empty with the same configuration (those that need passages to exist are removed).

        """
        with self.batch():
            return self._writer().delete_all(forget_dimension=forget_dimension)

    def optimize(self) -> None:
        """Write the passage index whole: merge its committed segments and drop an HNSW graph's tombstones.

        Small writes commit their change to the index (and to extensions that support it: token index,
        document index, trees) as segments inside ``store.sqlite`` (so a write costs what it changes); they
        are merged by themselves once they pass a tenth of the index; this writes the files of every
        extension that has segments whole too. Call this after
        a burst of writes to have the next open read one file, or before copying the store.
        """
        with self.batch():
            core = self._core
            core.merge_requested = True
            # extensions that committed segments are written whole too
            for name, info in core.state.get("extensions", {}).items():
                if info.get("segments") and name in core.extensions:
                    core.dirty_ext.add(name)
            index = core.indexes.get("dense")
            if index is None:
                return
            if index.config.kind == "hnsw":
                index.compact()
            core.dirty.add("dense")

    def snapshot(self, target: str | Path) -> Path:
        """Copy the committed store into the new directory ``target``, verified; returns ``target``.

        The copy is one committed generation (taken under a read transaction, so a writer in another process
        waits for it), holds only the files the store lists, and is checked by opening it before it takes the
        place of ``target``, which must not exist or be an empty directory.
        """
        target = Path(target)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise StoreError(f"cannot copy the store to {target}: it exists and is not an empty directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            copy_committed(self._core, self, staging)
            HierStore.open(staging, read_only=True).close()  # counts and checksums
            if target.exists():
                target.rmdir()
            staging.replace(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return target

    # ------------------------------------------------------------------------------------------------
    # switching the encoder: adopting a tuned model, rolling back
    # ------------------------------------------------------------------------------------------------
    def encoder_for(self, model: str | Path, *, device: str | None = None) -> DenseEncoder:
        """A :class:`DenseEncoder` for another model with this store's recorded encoder options.

        Normalization, prompts and sequence length are the store's, so the model's vectors compare as a search of
        this store compares them: what :meth:`adopt_model` encodes with, and what tuning scores a candidate with.
        """
        return self._recorded_encoder(self._core.state.get("encoder") or {}, str(model), device)

    def check_switchable(self, what: str) -> dict[str, Any]:
        """The recorded encoder, if this handle may switch it (:meth:`adopt_model`); else a :class:`StoreError`.

        Refused: a read-only handle, a store that records no encoder, an extension that cannot follow a new one.
        """
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; {what} writes to it")
        current = self._core.state.get("encoder")
        if not current:
            raise StoreError(
                f"the store at {self.path} records no encoder (its vectors come from outside); {what} needs one"
            )
        check_extensions(self)
        return dict(current)

    def adopt_model(
        self,
        model: str | Path,
        *,
        encoded: EncodedPassages | None = None,
        details: Mapping[str, Any] | None = None,
        show_progress_bar: bool = False,
    ) -> int:
        """Make the sentence-transformers model directory ``model`` this store's encoder, in one commit.

        The model is copied into the store (``models/<name>``, checked by digest whenever it is loaded), every
        passage is re-encoded with it and the passage index rebuilt; readers see the old model with the old
        vectors or the new ones, never a mix. The model it replaces is kept for :meth:`rollback_model` until
        the next adoption. Extensions built on the vectors (tree, document index) are rebuilt in the same
        commit; one that cannot follow a new encoder (EHI's trained indexer) makes this refuse.
        ``rag-hier tune`` (:mod:`rag_hier.tuning`) calls this only for a model that measured better.

        Args:
            model: A sentence-transformers model directory (e.g. a fine-tuned copy of the store's model).
            encoded: The passages already encoded by this model (:func:`~rag_hier.store.encoder_switch.
                encode_passages`), so they are not encoded twice; passages written since are encoded here.
            details: Facts recorded with the model (what trained it, its measured scores).
            show_progress_bar: Show progress while encoding.

        Returns:
            The committed generation.

        """
        self.check_switchable("adopt_model()")
        source = Path(model)
        if not source.is_dir():
            raise StoreError(f"model directory {source} does not exist")
        encoder = self.encoder_for(source)
        if encoded is None:
            encoded = encode_passages(self, encoder, show_progress_bar=show_progress_bar)
        return switch_encoder(
            self,
            source=source,
            encoded=encoded,
            encoder=encoder,
            details=dict(details) if details is not None else None,
            show_progress_bar=show_progress_bar,
        )

    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune this store's model on judged queries; adopt the result only when it measures better.

        A dev part of the queries is held back, a candidate is trained on the rest, base and candidate are
        scored on the dev part with this store's search, and the candidate replaces the model (one commit, see
        :meth:`adopt_model`; :meth:`rollback_model` undoes it) only when the paired difference says it is better
        (docs/tuning.md states the rule).

        Args:
            queries: A queries file (BEIR ``queries.jsonl``, QA ``questions.jsonl``) or ``{query id: text}``.
            qrels: A qrels file (optional for QA questions) or ``{query id: {document or passage id: grade}}``.
            **options: :class:`~rag_hier.tuning.TuneConfig` fields (``dev_fraction=0.2``, ``max_steps=...``,
                ``force=True``, ...), ``config=TuneConfig(...)``, ``level="doc"|"passage"``, ``dry_run=True``.

        Returns:
            A :class:`~rag_hier.tuning.TuneReport`: base and candidate dev figures, their paired difference,
            adopted or not and why.

        """
        tuner = _TUNER
        if tuner is None:  # a plugin lookup: the tuning layer's entry point, by name
            tuner = getattr(importlib.import_module(TUNER_MODULE), "store_tune", None)
        if tuner is None:  # pragma: no cover - rag_hier.tuning defines it
            raise StoreError(f"tuning is not available: {TUNER_MODULE} has no store_tune")
        return tuner(self, queries, qrels, **options)

    def rollback_model(self, *, show_progress_bar: bool = False) -> int:
        """Return to the encoder used before the last switch (re-encoding every passage), in one commit.

        The model rolled back from becomes the one a further rollback returns to. Returns the generation.
        """
        self.check_switchable("rollback_model()")
        previous = self.model_info["previous"]
        if not previous:
            raise StoreError(f"the store at {self.path} has no previous model to return to")
        encoder = self._recorded_encoder(previous)
        encoded = encode_passages(self, encoder, show_progress_bar=show_progress_bar)
        return switch_encoder(
            self, source=None, target=previous, encoded=encoded, encoder=encoder, show_progress_bar=show_progress_bar
        )

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge (or replace, ``merge=False``) metadata of passages; returns how many were updated."""
        ids = check_ids(passage_ids, "passage_ids")
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be a mapping, got {type(meta).__name__}")
        with self.batch():
            return self._writer().update_meta(ids, meta, merge=merge)

    def update_by_filter(self, filters: Filters, meta: Mapping[str, Any]) -> int:
        """Merge ``meta`` into the metadata of every passage matching ``filters``; returns how many."""
        predicate = compile_filter(filters)
        with self.batch():
            ids = None if predicate is None else self._select_matching(filters, column="passage_id")
            if ids is None:
                ids = [r.passage_id for r in self._core.records(cache=False) if predicate is None or predicate(r)]
            return self.update_meta(ids, meta)

    def index_meta_field(self, field: str) -> None:
        """Index a top-level metadata key (``"category"`` or ``"meta.category"``) for filters; committed like a write.

        Filters comparing that key (``==``, ``in``, ``<``, ...) then find their passages through an SQLite index
        instead of reading every passage's metadata; the answers are the same. Each indexed field costs a
        table row per passage holding it, kept up to date by every write. Indexing a field twice does nothing.
        """
        key = meta_index.check_field(field)
        if key in self.meta_indexes:
            return
        with self.batch():
            indexed = meta_index.fields(self._core.state, self.path)
            if key in indexed:
                return
            meta_index.create(self._core.db, key)
            self._core.state["meta_indexes"] = sorted([*indexed, key])

    @property
    def meta_indexes(self) -> list[str]:
        """The indexed metadata keys (:meth:`index_meta_field`)."""
        with self._reading():
            return list(meta_index.fields(self._core.state, self.path))

    def _select_matching(self, filters: Filters, *, column: str = "id", restrict: str = "") -> list[Any] | None:
        """Rows matching ``filters`` through SQL (:func:`~rag_hier.store.sql_filters.select_matching`).

        A :class:`Refined` filter: its coarse part through SQL, its predicate on the records SQL returns (not at
        all when it is ``equivalent``). ``None``: evaluate the (exact) predicate on every passage.
        """
        if isinstance(filters, Refined) and filters.equivalent:  # the coarse filter's rows are the answer
            filters = filters.coarse
        elif isinstance(filters, Refined):
            found = self._refined_records(filters, restrict)
            if found is None:
                return None
            return [r.rowid if column == "id" else getattr(r, column) for r in found]
        indexed = meta_index.fields(self._core.state, self.path)
        return select_matching(self._core.db, filters, indexed=indexed, column=column, restrict=restrict)

    def _refined_records(self, filters: Refined, restrict: str = "") -> list[PassageRecord] | None:
        """The records ``filters.exact`` accepts among those its coarse filter selects in SQL, in insertion order.

        ``None`` when SQL cannot answer the coarse filter exactly (the caller then runs the predicate on every
        passage; the coarse filter is never evaluated in Python).
        """
        indexed = meta_index.fields(self._core.state, self.path)
        rowids = select_matching(self._core.db, filters.coarse, indexed=indexed, restrict=restrict)
        if rowids is None:
            return None
        found = records_by_rowid(self._core.db, rowids)
        return [rec for _, rec in sorted(found.items()) if filters.exact(rec)]

    def update_corpus_info(self, **changes: Any) -> None:
        """Record facts about the corpus (format, passage length, ...) in the committed state."""
        with self.batch():
            self._core.state["corpus"] = {**self._core.state.get("corpus", {}), **changes}

    # ------------------------------------------------------------------------------------------------
    # extensions
    # ------------------------------------------------------------------------------------------------
    @property
    def extensions(self) -> dict[str, StoreExtension]:
        """The store's extensions by name (document index, token index, tree, ...)."""
        with self._reading():
            return dict(self._core.extensions)

    def extension(self, name: str) -> StoreExtension | None:
        """The extension registered as ``name``, or ``None``."""
        with self._reading():
            return self._core.extensions.get(name)

    def extension_files(self, name: str) -> dict[str, bytes]:
        """The content of extension ``name``'s files as of the committed generation, its segments merged in.

        The files on disk lack the changes committed since as ``extension_segments`` rows; a copy of the
        extension elsewhere (another backend) takes these bytes instead. Without segments they are the
        committed files themselves; with segments the extension, which holds them replayed, writes them.
        """
        import tempfile

        from rag_hier.store.state import committed_path

        with self._reading():
            core = self._core
            info = core.state.get("extensions", {}).get(name)
            ext = core.extensions.get(name)
            if info is None or ext is None:
                raise StoreError(f"{self.path} has no {name!r} extension")
            if not info.get("segments"):
                return {
                    f: committed_path(self.path, f, core.state["files"][f], verify=False).read_bytes()
                    for f in info.get("files", [])
                }
            with tempfile.TemporaryDirectory(prefix="rag-hier-ext-") as tmp:
                paths = {f: Path(tmp) / f for f in ext.files()}
                ext.write(paths)
                return {f: path.read_bytes() for f, path in paths.items()}

    def add_extension(self, extension: StoreExtension, *, replace: bool = False) -> None:
        """Attach an extension, build it from the stored passages, and commit it with the store."""
        if not extension.name:
            raise StoreError(f"{type(extension).__name__} has no name")
        extension_class(extension.name)  # must be registered, or the store could not be reopened
        with self.batch():
            if extension.name in self._core.extensions and not replace:
                raise StoreError(f"{self.path} already has a {extension.name!r} extension (pass replace=True)")
            extension.build(self)
            self._core.extensions[extension.name] = extension
            self._core.dirty_ext.add(extension.name)
            self._core.rewrite_ext.add(extension.name)

    def ensure_extension(self, name: str, *, create: bool = True, **config: Any) -> StoreExtension:
        """The extension ``name``; when the store has none and ``create`` is true, one built with ``config``.

        Raises:
            StoreError: The store has no such extension and ``create`` is false or the store is read-only.

        """
        existing = self.extension(name)
        if existing is not None:
            return existing
        if not create:
            raise StoreError(f"the store at {self.path} has no {name!r} extension")
        if self.read_only:
            raise StoreError(f"the store at {self.path} has no {name!r} extension and was opened read-only")
        ext = extension_class(name).from_config(config)
        with self.batch():
            if name in self._core.extensions:  # added meanwhile (another handle or process)
                return self._core.extensions[name]
            logger.info("adding the %s extension to %s", name, self.path)
            self.add_extension(ext)
        return ext

    def remove_extension(self, name: str) -> None:
        """Detach an extension and delete its files at the next commit."""
        with self.batch():
            if self._core.extensions.pop(name, None) is None:
                raise StoreError(f"{self.path} has no {name!r} extension")

    def mark_extension_dirty(self, name: str) -> None:
        """Tell the store an extension changed outside a hook, so it is written at the next commit."""
        if name not in self._core.extensions:
            raise StoreError(f"{self.path} has no {name!r} extension")
        self._core.dirty_ext.add(name)
        if not self._core.extensions[name].DELTA_SEES_ALL_CHANGES:  # the delta may miss this change
            self._core.rewrite_ext.add(name)

    # ------------------------------------------------------------------------------------------------
    # reading
    # ------------------------------------------------------------------------------------------------
    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids are left out)."""
        with self._reading():
            return records_by_rowid(self._core.db, rowids)

    def hit_rows(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """Rows of :data:`~rag_hier.store.records.HIT_COLUMNS` by rowid, for :func:`~rag_hier.store.records.new_hit`.

        The search path's read: one statement of exactly the fields a :class:`Hit` needs, JSON left undecoded
        (an optional fast path of the store contract; retrievers fall back to :meth:`records`).
        """
        with self._reading():
            return hit_rows(self._core.db, rowids)

    def content_hashes(self, rowids: Iterable[int]) -> dict[int, str]:
        """The hash of each passage's encoded text (title path and text) by rowid: it changes when the text does."""
        ids = sorted({int(r) for r in rowids})
        with self._reading():
            return {int(r): str(h) for r, h in rows_in(self._core.db, _HASHES_SQL, ids)}

    def iter_passages(self, filters: Filters = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""
        return iter(self.filter_passages(filters))

    def filter_passages(self, filters: Filters = None) -> list[Passage]:
        """Passages matching ``filters``, in insertion order, as a list."""
        predicate = compile_filter(filters)
        with self._reading():
            partial = isinstance(filters, Refined) and not filters.equivalent
            if partial:
                refined = self._refined_records(cast(Refined, filters))
                if refined is not None:
                    return [r.to_passage() for r in refined]
            ids = None if predicate is None or partial else self._select_matching(filters)
            if ids is not None:
                found = records_by_rowid(self._core.db, ids)
                return [found[i].to_passage() for i in sorted(found)]
            return [r.to_passage() for r in self._core.records() if predicate is None or predicate(r)]

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked (unknown ids are left out)."""
        ids = check_ids(passage_ids, "passage_ids")
        with self._reading():
            rowids = query_in(self._core.db, "SELECT id FROM passages WHERE passage_id IN ({marks})", ids)
            found = {r.passage_id: r.to_passage() for r in records_by_rowid(self._core.db, rowids).values()}
        return [found[i] for i in ids if i in found]

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids (``None`` if unknown)."""
        with self._reading():
            db = self._core.db
            row = db.execute("SELECT doc_id, title, meta, toc FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
            if row is None:
                return None
            pids = [
                r
                for (r,) in db.execute(
                    "SELECT passage_id FROM passages WHERE doc_id=? ORDER BY position, id", (doc_id,)
                )
            ]
        return {
            "doc_id": row[0],
            "title": row[1],
            "meta": json.loads(row[2]),
            "toc": json.loads(row[3]),
            "passage_ids": pids,
        }

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors of passages as written (float64 when float32 could not hold them), ``None`` if absent."""
        ids = list(passage_ids)
        with self._reading():
            rows = {
                pid: (rowid, has, blob)
                for pid, rowid, has, blob in query_in(
                    self._core.db,
                    "SELECT passage_id, id, has_vector, exact_embedding FROM passages WHERE passage_id IN ({marks})",
                    ids,
                )
            }
            need = [rows[p][0] for p in ids if p in rows and rows[p][1] and rows[p][2] is None]
            index = self._core.indexes.get("dense")
            recon = (
                dict(zip(need, index.reconstruct(np.asarray(need, np.int64)), strict=True)) if need and index else {}
            )
        out: list[np.ndarray | None] = []
        for p in ids:
            if p not in rows or not rows[p][1]:
                out.append(None)
            elif (blob := rows[p][2]) is not None:
                out.append(np.frombuffer(blob, dtype="<f8").copy())
            else:
                out.append(recon[rows[p][0]])
        return out

    def count_passages(self, filters: Filters = None) -> int:
        """Number of passages (matching ``filters``)."""
        predicate = compile_filter(filters)
        with self._reading():
            if predicate is None:
                return int(self._core.db.execute("SELECT count(*) FROM passages").fetchone()[0])
            ids = self._select_matching(filters)
            if ids is not None:
                return len(ids)
            return sum(1 for r in self._core.records() if predicate(r))

    # ------------------------------------------------------------------------------------------------
    # metadata aggregates (rag_hier.store.meta_stats: SQL over the metadata JSON, Python where SQL cannot answer)
    # ------------------------------------------------------------------------------------------------
    def _aggregate_rowids(self, filters: Filters) -> list[int] | None:
        """Rowids matching ``filters`` (SQL where it translates, else the predicate), ``None`` for every row."""
        predicate = compile_filter(filters)
        if predicate is None:
            return None
        ids = self._select_matching(filters)
        if ids is None:
            return [r.rowid for r in self._core.records() if predicate(r)]
        return sorted(int(i) for i in ids)

    def _aggregate_records(self, rowids: list[int] | None) -> list[PassageRecord]:
        if rowids is None:
            return list(self._core.records())
        found = records_by_rowid(self._core.db, rowids)
        return [found[i] for i in sorted(found)]

    def count_unique_meta(self, fields: Sequence[str], filters: Filters = None) -> dict[str, int]:
        """Distinct non-null values of each metadata key in ``fields`` among the passages matching ``filters``.

        Counted in SQLite (``json_extract`` over the stored metadata); see :mod:`rag_hier.store.meta_stats`
        for how values compare (``1 == 1.0 == True``, lists and objects by content).

        Raises:
            InvalidInputError: A field is not a non-empty string without control characters.

        """
        names = meta_stats.check_fields(fields)
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            counted = meta_stats.sql_count_unique(self._core.db, names, rowids)
            if counted is not None:
                return counted
            return meta_stats.count_unique((r.meta for r in self._aggregate_records(rowids)), names)

    def meta_min_max(self, field: str, filters: Filters = None) -> tuple[Any, Any]:
        """``(min, max)`` of metadata key ``field`` among the passages matching ``filters``.

        Over its numbers (booleans count as 0 and 1) or its strings; ``(None, None)`` when it holds neither, or
        both. Of equal values (``1``, ``1.0``, ``True``) the first passage's is returned. Computed in SQLite.

        Raises:
            InvalidInputError: ``field`` is not a non-empty string without control characters.

        """
        name = meta_stats.check_field(field)
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            found = meta_stats.sql_min_max(self._core.db, name, rowids)
            if found is not None:
                return found
            return meta_stats.min_max((r.meta for r in self._aggregate_records(rowids)), name)

    def meta_field_types(self, filters: Filters = None) -> dict[str, str]:
        """Each metadata key holding a non-null value among the passages matching ``filters``, with its kind.

        The kind (``boolean``, ``int``, ``float`` or ``keyword``) of the key's value in the last passage (rowid
        order) holding one. Computed in SQLite (``json_each``).
        """
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            kinds = meta_stats.sql_field_types(self._core.db, rowids)
            if kinds is not None:
                return kinds
            return meta_stats.field_types(r.meta for r in self._aggregate_records(rowids))

    def count_with_extra(self, paths: Sequence[Sequence[str]], filters: Filters = None) -> tuple[int, list[int]]:
        """``(passages matching filters, how many of them hold a non-null value at each path into extra)``.

        A path is a tuple of keys (``("haystack", "meta_exact")``); an adapter uses it to see whether the
        passages carry a payload that changes what their metadata means to it. Counted in SQLite.
        """
        keys = [meta_stats.check_path(p) for p in paths]
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            counted = meta_stats.sql_count_present(self._core.db, keys, rowids)
            if counted is not None:
                return counted
            return meta_stats.count_present((r.extra for r in self._aggregate_records(rowids)), keys)

    def count_vectors(self) -> int:
        """Number of passages with a dense vector (live vectors of the passage index)."""
        with self._reading():
            index = self._core.indexes.get("dense")
            return len(index) if index is not None else 0

    def count_documents(self) -> int:
        """Number of documents."""
        with self._reading():
            return int(self._core.db.execute("SELECT count(*) FROM documents").fetchone()[0])

    def document_ids(self) -> list[str]:
        """Ids of all stored documents, in insertion order."""
        with self._reading():
            return [r for (r,) in self._core.db.execute("SELECT doc_id FROM documents ORDER BY rowid")]

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, with or without a dense vector, ascending (insertion order)."""
        with self._reading():
            return np.fromiter((r for (r,) in self._core.db.execute("SELECT id FROM passages ORDER BY id")), np.int64)

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """FAISS ids of the passages with vectors among ``passage_ids`` and in documents ``doc_ids``.

        Looked up through the SQLite indexes (no scan); ``None`` leaves that side unrestricted, and both
        ``None`` gives every passage with a vector. Sorted ascending (insertion order).
        """
        with self._reading():
            db = self._core.db
            sides: list[set[int]] = []
            for column, values in (("passage_id", passage_ids), ("doc_id", doc_ids)):
                if values is not None:
                    sql = f"SELECT id FROM passages WHERE has_vector=1 AND {column} IN ({{marks}})"
                    sides.append(set(query_in(db, sql, dict.fromkeys(values))))
            if not sides:
                return self._core.vector_rowids()
        return np.asarray(sorted(set.intersection(*sides)), dtype=np.int64)

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each passage rowid (unknown rowids are left out)."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        with self._reading():
            return dict(query_in(self._core.db, "SELECT id, doc_id FROM passages WHERE id IN ({marks})", ids))

    def matching_rowids(self, filters: Filters, *, with_vector: bool = True) -> np.ndarray | None:
        """Rowids of the passages matching ``filters`` (only those with a dense vector unless ``with_vector=False``).

        ``None`` when there is no filter (everything matches), so callers can skip the restriction.
        """
        predicate = compile_filter(filters)
        if predicate is None:
            return None
        with self._reading():
            counts = self._core.state["counts"]
            # outside a write batch the committed counts are current: every passage with a vector needs no test
            every = self._core.depth == 0 and counts["vectors"] == counts["passages"]
            ids = self._select_matching(filters, restrict="has_vector=1" if with_vector and not every else "")
            if ids is not None:
                return np.sort(np.asarray(ids, dtype=np.int64))
            rows = [r.rowid for r in self._core.records() if (r.has_vector or not with_vector) and predicate(r)]
        return np.asarray(rows, dtype=np.int64)

    def iter_records(self) -> Iterator[PassageRecord]:
        """Every stored record in insertion order (read within one committed generation)."""
        with self._reading():
            records = list(iter_records(self._core.db))
        return iter(records)

    # ------------------------------------------------------------------------------------------------
    # dense vectors and search
    # ------------------------------------------------------------------------------------------------
    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Encode queries with the store's encoder (checking its dimension against the store)."""
        return self._require_encoder("text search").encode_queries(queries)

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors: ``(scores, rowids)``.

        Both are ``(n, min(top_k, live vectors))``; rows are ``-1``-padded where ``allowed`` leaves fewer.
        """
        with self._reading():
            return self._search_dense(np.asarray(queries, dtype=np.float32), top_k, allowed)

    def _search_dense(
        self, q: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_dense` on the index this core holds now (the caller holds the core's lock)."""
        index = self._core.indexes.get("dense")
        live = 0 if index is None else len(index)
        if index is None or live == 0:
            return np.zeros((q.shape[0], 0), np.float32), np.zeros((q.shape[0], 0), np.int64)
        return index.search(q, min(top_k, live), allowed_ids=allowed)

    def search_dense_hits(
        self, queries: np.ndarray, top_k: int
    ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[Any, ...]]]:
        """:meth:`search_dense` and :meth:`hit_rows` of what it found, both of one committed generation.

        The search path of an unfiltered dense query. Outside a read block it takes one SQL statement: the hit
        rows, read together with a check that the database still holds the generation this handle's index
        holds; when another process has committed since, it searches again within a read transaction (which
        loads that generation first). The first search of each generation a handle holds runs in a read
        transaction too, which keeps the stored state's text to check against.
        """
        core = self._core
        q = np.asarray(queries, dtype=np.float32)
        with core.lock:
            outside = not core.db.in_transaction
            token = core.state_token()
            if outside and token is not None:  # an empty result has nothing to check: the read block below
                scores, ids = self._search_dense(q, top_k)
                rows = hit_rows_if_current(core.db, ids[ids >= 0].tolist(), token)
                if rows is not None:
                    return scores, ids, rows
            with self._reading():
                if outside:  # the generation just synced: the next search can check against it
                    core.remember_token()
                scores, ids = self._search_dense(q, top_k)
                return scores, ids, hit_rows(core.db, ids[ids >= 0].tolist())

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""
        with self._reading():
            index = self._core.indexes.get("dense")
            ids = np.asarray(rowids, dtype=np.int64)
            if index is None:
                if ids.size:
                    raise StoreError(f"the store at {self.path} holds no vectors")
                return np.zeros((0, self.dimension or 0), np.float32)
            return index.reconstruct(ids)
