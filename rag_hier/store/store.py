"""HierStore: one directory = one collection (manifest + SQLite + FAISS index files).

Layout::

    my-collection/
      manifest.json   format version, encoder, dimension, index configuration, counts, checksums
      store.sqlite    documents, passages (text, title path, metadata), the committed state
      dense.faiss     passage vectors (FAISS ids = SQLite passage rowids, never reused)
      store.lock      the writer lock (empty)

This module is the front: creating and opening stores, batches, snapshots and tuning; the other public methods
come from one mixin per job in :mod:`rag_hier.store.local` (reads, metadata aggregates, dense search, writes,
switching the encoder, extensions over :class:`~rag_hier.store.local.base.LocalBase`), each a thin call into the
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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, overload

from rag_hier._version import __version__
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DimensionMismatchError, StoreCorruptedError, StoreError
from rag_hier.index.dense import DenseIndex, IndexConfig
from rag_hier.store.contract import SIMILARITIES, FilterPushdown, Similarity
from rag_hier.store.core import StoreCore, connect, copy_committed
from rag_hier.store.files import LOCK_FILE
from rag_hier.store.hit_table import HitRowsMode, check_hit_rows
from rag_hier.store.local.dense import LocalDense
from rag_hier.store.local.extensions import LocalExtensions
from rag_hier.store.local.meta_aggregates import LocalMetaAggregates
from rag_hier.store.local.reads import LocalReads
from rag_hier.store.local.switching import LocalSwitching
from rag_hier.store.local.writing import LocalWrites
from rag_hier.store.models import check_given_encoder, earlier_model, same_model
from rag_hier.store.records import WritePolicy, WriteSummary
from rag_hier.store.schema import SCHEMA, dumps
from rag_hier.store.search_hook import DenseSearch, set_default_search
from rag_hier.store.state import DATABASE, DENSE_FILE, FORMAT_VERSION, MANIFEST

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


def _unexpected(method: str, options: Mapping[str, Any]) -> TypeError:
    """The error for keywords that are neither a parameter nor (without ``uri=``) a Milvus option."""
    names = ", ".join(repr(k) for k in sorted(options))
    return TypeError(
        f"HierStore.{method}() got unexpected keyword argument(s) {names} (Milvus connection options are taken only "
        "with uri=)"
    )


def _follows_store(store: HierStore, encoder: DenseEncoder, root: Path) -> bool:
    """Whether ``encoder`` is a model the store encoded with before its current one (then the store's is used)."""
    state = store._core.state
    current = state.get("encoder")
    if not current or same_model(encoder, current, root.absolute()):
        return False
    earlier = earlier_model(encoder, state, root.absolute())
    if earlier is None:
        return False
    logger.info(
        "%s: %s is a model this store encoded with before; it encodes with %s now, and so does this handle",
        root,
        encoder.model_name,
        current.get("model"),
    )
    return True


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


class HierStore(LocalReads, LocalMetaAggregates, LocalDense, LocalWrites, LocalSwitching, LocalExtensions, DenseSearch):
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
        hit_rows: HitRowsMode = ...,
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
        hit_rows: HitRowsMode = "sqlite",
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
            hit_rows: Where this handle's dense searches read their hit rows, as in :meth:`open`.

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
                hit_rows=hit_rows,
                **milvus_options,
            )
        if path is None:
            raise ValueError("HierStore.create needs a directory path (or uri= for Milvus)")
        check_hit_rows(hit_rows)
        root = Path(path)
        if (root / MANIFEST).exists():
            if exist_ok:
                return cls.open(root, encoder=encoder, hit_rows=hit_rows)
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
        store = cls(root, encoder, read_only=False, hit_rows=hit_rows)
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
        hit_rows: HitRowsMode = ...,
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
        hit_rows: HitRowsMode = "sqlite",
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
            hit_rows: Where dense searches read the rows of their hits. ``"sqlite"`` (default): from the database,
                one statement per search. ``"memory"``: from a table of the rows of every passage with a vector,
                kept in memory by the engine this process shares between the handles on the directory (built by
                the first search, about the size of the passages' text and metadata plus ~150 bytes a row; every
                handle on the directory reads from it while it is there; freed when the last handle opened with
                ``"memory"`` closes), brought up to each new generation by reading only what changed; a search
                whose generation is current then reads no table (one ``pread`` of the database header checks
                that no process committed since). The same hits, of one committed generation, either way. A
                local-store option: ``uri=`` refuses ``"memory"``.
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
                hit_rows=hit_rows,
                **milvus_options,
            )
        if path is None:
            raise ValueError("HierStore.open needs a directory path (or uri= for Milvus)")
        root = Path(path)
        store = cls(root, encoder, read_only=read_only, device=device, hit_rows=hit_rows)
        StoreCore.shared(root, store, store._attach, verify=verify_checksums)
        try:
            if encoder is not None and _follows_store(store, encoder, root):
                encoder = store._encoder_arg = None
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
            hit_rows = create_kwargs.get("hit_rows", "sqlite")
            return cls.open(path, encoder=create_kwargs.get("encoder"), hit_rows=hit_rows)
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
        """The committed generation: the store's count of commits (cheap to poll).

        Creating the store is commit 1; each write batch (``add_documents``, ``store.batch()``, ...) and each model
        switch adds one, so a store that ``rag-hier index`` built once is at generation 3 (created, passages written,
        corpus settings recorded) or more (a large corpus is written in several commits).
        """
        with self._reading():
            return self._core.generation

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the committed state (what ``manifest.json`` mirrors)."""
        with self._reading():
            return json.loads(dumps(self._core.state))

    @property
    def similarity(self) -> Similarity:
        """How dense scores compare vectors: ``"cosine"`` (unit vectors) or ``"dot_product"``."""
        recorded = self._core.state.get("similarity")
        if recorded in SIMILARITIES:
            return recorded
        enc = self._core.state.get("encoder") or {}
        return "cosine" if enc.get("normalize_embeddings") else "dot_product"

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
    # tuning (adopting a tuned model and rolling back: rag_hier.store.local.switching)
    # ------------------------------------------------------------------------------------------------
    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune this store's model on judged queries; adopt the result only when it measures better.

        A dev part of the queries is held back (below 200 judged queries: every query is scored by a candidate
        trained on the other folds), a candidate is trained on the rest, base and candidate are scored on the dev
        part with this store's search, and the candidate replaces the model (one commit, see :meth:`adopt_model`;
        :meth:`rollback_model` undoes it) only when the paired difference says it is better (docs/tuning.md
        states the rule; a refusal says what would resolve it).

        Args:
            queries: A queries file (BEIR ``queries.jsonl``, QA ``questions.jsonl``) or ``{query id: text}``.
            qrels: A qrels file (optional for QA questions) or ``{query id: {document or passage id: grade}}``.
            **options: :class:`~rag_hier.tuning.TuneConfig` fields (``dev_fraction=0.2``, ``max_steps=...``,
                ``force=True``, ...), ``config=TuneConfig(...)``, ``level="doc"|"passage"`` (what the judgements'
                ids name; the CLI's ``--aggregate``), ``dry_run=True``,
                ``say=print`` (progress lines: the split, base on dev, the estimate, adopting; default: the
                ``rag_hier.tuning.workflow`` logger at INFO). ``resume=True`` (nothing else but ``say`` and
                ``show_progress_bar``) finishes an adoption whose re-encoding a crash interrupted: the candidate
                and the parts already encoded are kept in ``<store>/adoption-pending`` until the switch.

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
