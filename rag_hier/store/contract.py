"""The store contract: what strategies, extensions and adapters may call on a store, and what an extension is.

:class:`~rag_hier.store.HierStore` (FAISS + SQLite in a directory) implements it; a second backend (a
distributed vector database, say) implements the same protocol, and every strategy, extension and adapter
typed against it works on that backend unchanged. Methods are grouped by job: identity, reading records,
dense vectors, filters, writing, extensions. Rowids are the store's stable int64 passage ids (never reused
after a delete); every strategy ranks rowids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, Protocol, overload, runtime_checkable

import numpy as np

from rag_hier.store.capabilities import supports
from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from rag_hier.corpus.model import Document, Passage
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.index.dense import IndexConfig
    from rag_hier.store.records import Hit, PassageRecord, WritePolicy, WriteSummary
    from rag_hier.store.segments import Delta

__all__ = [
    "SIMILARITIES",
    "EngineExtensions",
    "FilterPushdown",
    "Filters",
    "Similarity",
    "StoreBackend",
    "StoreExtension",
    "engine_extension",
    "remote_vectors",
]

Filters = Mapping[str, Any] | Predicate | None
"""A Haystack-syntax filter dict, a compiled predicate over passage records, or ``None`` (no filter).

A :class:`~rag_hier.store.filters.Refined` (a predicate with a coarse filter dict a backend pushes down) is a
predicate too; every method taking ``Filters`` pushes its coarse part down and answers with its predicate."""
Similarity = Literal["cosine", "dot_product"]
SIMILARITIES: tuple[str, ...] = ("cosine", "dot_product")


class FilterPushdown(NamedTuple):
    """What of a framework filter a backend answers inside its engine (the rest is checked by the predicate)."""

    numbers: bool
    """Numeric comparisons (``<``, ``>=``, ...) run in the engine."""
    max_members: int
    """Longest id or value list (``in``, ``not in``) pushed down."""


@runtime_checkable
class StoreBackend(Protocol):
    """The public surface of a rag-hier store (see :class:`~rag_hier.store.HierStore` for the semantics)."""

    read_only: bool
    """Whether writes are refused."""

    filter_pushdown: ClassVar[FilterPushdown]
    """What of a filter the backend answers in its engine."""

    can_forget_dimension: ClassVar[bool]
    """Whether ``delete_all(forget_dimension=True)`` is possible (a Milvus collection's dimension is fixed)."""

    # -- identity ---------------------------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        """The store's directory (``None`` for a backend that keeps none, such as Milvus)."""
        ...

    @property
    def connection_options(self) -> dict[str, Any]:
        """What reopens this store's connection besides its location (token, database, TLS...; empty if none)."""
        ...

    @property
    def location(self) -> str:
        """Where the collection lives (a directory path, or a database URI), for messages."""
        ...

    @property
    def generation(self) -> int:
        """The committed generation: the count of commits (every write batch and model switch adds one)."""
        ...

    @property
    def dimension(self) -> int | None:
        """Dense vector dimension (``None`` until known)."""
        ...

    @property
    def similarity(self) -> Similarity:
        """How dense scores compare vectors: ``"cosine"`` (unit vectors) or ``"dot_product"``."""
        ...

    @property
    def encoder(self) -> DenseEncoder | None:
        """The store's dense encoder, if it has one."""
        ...

    @property
    def corpus_info(self) -> dict[str, Any]:
        """Facts recorded about the corpus."""
        ...

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors from the store's encoder (an error when it has none)."""
        ...

    @property
    def index_config(self) -> IndexConfig:
        """The dense index's kind and parameters."""
        ...

    @property
    def manifest(self) -> dict[str, Any]:
        """The store's recorded configuration (model, index, corpus information, extensions, format)."""
        ...

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, model, index, extensions (what ``rag-hier info`` prints)."""
        ...

    def refresh(self) -> StoreBackend:
        """See other processes' commits now (reads do so anyway); returns the store."""
        ...

    def update_corpus_info(self, **changes: Any) -> None:
        """Record corpus information (format, splitting, ...) in the manifest."""
        ...

    # -- reading ----------------------------------------------------------------------------------------
    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self, query: str, top_k: int = 10, filters: Filters = None
    ) -> list[Hit]: ...
    @overload
    def search(self, query: Sequence[str], top_k: int = 10, filters: Filters = None) -> list[list[Hit]]: ...
    def search(self, query: str | Sequence[str], top_k: int = 10, filters: Filters = None) -> Any:
        """Dense search: one query gives a ranked ``list[Hit]``, a list of queries a list of those."""
        ...

    def filter_passages(self, filters: Filters = None) -> list[Passage]:
        """Every passage matching ``filters`` (all without one), in rowid order."""
        ...

    def iter_records(self) -> Iterator[PassageRecord]:
        """Every passage record, in rowid order, read in blocks."""
        ...

    def count_passages(self, filters: Filters = None) -> int:
        """Number of passages (matching ``filters``)."""
        ...

    def count_unique_meta(self, fields: Sequence[str], filters: Filters = None) -> dict[str, int]:
        """Distinct non-null values of each top-level metadata key in ``fields`` among the matching passages.

        Values compare as Python compares them (``1 == 1.0 == True``; lists and objects by content); the
        local store counts in SQL, Milvus on the rows its query filtered (:mod:`rag_hier.store.meta_stats`).
        A field that is not a non-empty string without control characters raises ``InvalidInputError``.
        """
        ...

    def meta_min_max(self, field: str, filters: Filters = None) -> tuple[Any, Any]:
        """``(min, max)`` of a metadata key's numbers (booleans as 0/1) or strings among the matching passages.

        ``(None, None)`` when it holds neither, or both; of equal values the first passage's (rowid order).
        """
        ...

    def meta_field_types(self, filters: Filters = None) -> dict[str, str]:
        """Each metadata key holding a non-null value among the matching passages, with its kind.

        ``boolean``, ``int``, ``float`` or ``keyword``: the kind of its value in the last passage (rowid order)
        holding one.
        """
        ...

    def count_with_extra(self, paths: Sequence[Sequence[str]], filters: Filters = None) -> tuple[int, list[int]]:
        """``(matching passages, how many hold a non-null value at each path of keys into their extra)``."""
        ...

    def count_vectors(self) -> int:
        """Number of passages with a dense vector."""
        ...

    def count_documents(self) -> int:
        """Number of documents."""
        ...

    def document_ids(self) -> list[str]:
        """Document ids in insertion order."""
        ...

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids."""
        ...

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked."""
        ...

    def iter_passages(self, filters: Filters = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""
        ...

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids left out)."""
        ...

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, ascending."""
        ...

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """Rowids of the passages with dense vectors among these ids / documents."""
        ...

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each rowid."""
        ...

    def matching_rowids(self, filters: Filters, *, with_vector: bool = True) -> np.ndarray | None:
        """Rowids matching ``filters`` (with a dense vector unless ``with_vector=False``); ``None``: no filter."""
        ...

    # -- dense vectors ----------------------------------------------------------------------------------
    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors: ``(scores, rowids)``, ``-1``-padded."""
        ...

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""
        ...

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors as written, by passage id."""
        ...

    # -- writing ----------------------------------------------------------------------------------------
    def batch(self) -> AbstractContextManager[Any]:
        """Group writes into one atomic commit."""
        ...

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None = None,
        policy: WritePolicy = "upsert",
        show_progress_bar: bool = False,
        encode: bool = True,
    ) -> WriteSummary:
        """Split, encode and store documents (upsert by document id)."""
        ...

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None = None,
        *,
        policy: WritePolicy = "upsert",
        encode_missing: bool | None = None,
        allow_moves: bool = False,
    ) -> WriteSummary:
        """Store passages as given, with caller vectors or encoded ones."""
        ...

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id."""
        ...

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and their passages."""
        ...

    def delete_by_filter(self, filters: Filters) -> int:
        """Delete every passage matching ``filters``."""
        ...

    def delete_all(self, *, forget_dimension: bool = False) -> int:
        """Delete everything (and forget the dimension, if asked)."""
        ...

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge or replace passage metadata."""
        ...

    def update_by_filter(self, filters: Filters, meta: Mapping[str, Any]) -> int:
        """Merge metadata into every matching passage."""
        ...

    def snapshot(self, target: str | Path) -> Path:
        """A verified copy of one committed generation."""
        ...

    def reading(self) -> AbstractContextManager[Any]:
        """A block of reads that all answer from one committed generation (``with store.reading(): ...``)."""
        ...

    # -- extensions -------------------------------------------------------------------------------------
    @property
    def extensions(self) -> dict[str, StoreExtension]:
        """The attached extensions by name."""
        ...

    def extension_files(self, name: str) -> dict[str, bytes]:
        """The committed files of extension ``name`` (file name → bytes)."""
        ...

    def remove_extension(self, name: str) -> None:
        """Detach extension ``name`` and delete its files (one commit)."""
        ...

    def extension(self, name: str) -> StoreExtension | None:
        """The extension registered as ``name``, or ``None``."""
        ...

    def add_extension(self, extension: StoreExtension, *, replace: bool = False) -> None:
        """Attach and build an extension."""
        ...

    def ensure_extension(self, name: str, *, create: bool = True, **config: Any) -> StoreExtension:
        """The extension ``name``, built with ``config`` when missing and ``create`` is true."""
        ...

    def mark_extension_dirty(self, name: str) -> None:
        """An extension changed outside a hook: write it at the next commit."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...


def remote_vectors(store: object) -> bool:
    """Whether a store's vectors live in a remote engine (an optional capability; default ``False``).

    A backend sets the class attribute ``remote_vectors = True`` when reading vectors into the client costs
    a network transfer (Milvus). The store-level candidate search (:mod:`rag_hier.store.candidates`) then
    restricts a dense search to a candidate set (``search_dense(queries, k, allowed=...)``, done inside the
    engine) instead of gathering the candidates' vectors and scoring them in the client, which is what it does on
    the local store; strategies call that module rather than asking this themselves.
    """
    return bool(getattr(store, "remote_vectors", False))


@runtime_checkable
class EngineExtensions(Protocol):
    """A backend that searches some extensions inside its engine (the Milvus backend; see :func:`engine_extension`).

    An optional capability (:mod:`rag_hier.store.capabilities`) that the store's candidate search asks for.
    """

    def extension_in_engine(self, name: str) -> bool:
        """Whether extension ``name`` is searched inside the engine."""

    def search_sparse(
        self, name: str, queries: Any, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products of sparse query rows with a sparse extension's rows: ``(scores, rowids)``, padded."""

    def sparse_document_frequency(self, name: str) -> tuple[np.ndarray, np.ndarray, int]:
        """``(indices, document frequencies, rows)`` of a sparse extension."""

    def sparse_rows_of(self, name: str, rowids: np.ndarray, columns: int) -> tuple[np.ndarray, Any]:
        """``(rowids found ascending, their CSR rows)`` of a sparse extension, read by rowid."""

    def sparse_rowids(self, name: str) -> np.ndarray:
        """Rowids (ascending) holding a row of a sparse extension."""

    def search_in_leaves(
        self, name: str, queries: np.ndarray, top_k: int, leaves: np.ndarray, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One dense search over the passages a tree / EHI extension files under ``leaves``."""


def engine_extension(store: object, name: str) -> EngineExtensions | None:
    """The store as :class:`EngineExtensions` when it searches extension ``name`` inside its engine, else ``None``.

    An optional capability (default: none). The Milvus backend keeps the token index and sparse embeddings as
    sparse vector fields and the tree / EHI leaves as passage fields (by the kind of data each method's
    registration declares); :mod:`rag_hier.store.candidates` then sends those searches to the engine instead of
    loading the extension's rows into the client.
    """
    if supports(store, EngineExtensions) and store.extension_in_engine(name):
        return store
    return None


class StoreExtension:
    """Base class of store extensions (all hooks are no-ops by default).

    Subclasses set ``name`` and ``FILES`` and implement :meth:`files`, :meth:`write` and :meth:`load`, plus
    the hooks they need. Hooks run inside the store's write transaction; raising aborts the whole write.
    """

    name: ClassVar[str] = ""
    FILES: ClassVar[tuple[str, ...]] = ()
    """Every file name the extension may own (what :meth:`files` returns is always a subset)."""

    def config(self) -> dict[str, Any]:
        """JSON-ready configuration, passed back to :meth:`from_config` when the store is opened."""
        return {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StoreExtension:
        """Build an (empty) extension from :meth:`config`; :meth:`load` then reads its files."""
        return cls(**dict(config))

    def files(self) -> list[str]:
        """File names (inside the store directory) this extension owns now."""
        return list(self.FILES)

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the current state to ``paths`` (file name → temporary path to write)."""

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the committed files (file name → path)."""

    def build(self, store: StoreBackend) -> None:
        """Populate from the passages already in ``store`` (called by :meth:`HierStore.add_extension`)."""

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Passages were inserted under FAISS/SQLite ids ``rowids``.

        ``vectors`` are their dense vectors, rows aligned with ``passages`` (``None`` unless every passage
        came with one).
        """

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Passages with these ids were deleted (ids are never reused)."""

    def on_documents_changed(self, store: StoreBackend, doc_ids: set[str]) -> None:
        """Just before a commit: these documents gained, lost or changed passages (or were deleted)."""

    def verify(self, store: StoreBackend) -> None:
        """Check consistency with the store after loading; raise StoreCorruptedError on a mismatch."""

    def encoder_dependency(self) -> Literal["none", "rebuild", "refuse"]:
        """What the extension needs when the store's dense encoder is replaced (``HierStore.adopt_model``).

        ``"none"``: its data does not depend on the dense encoder; ``"rebuild"``: :meth:`build` is run again,
        in the same commit, once the passages hold the new model's vectors; ``"refuse"``: it cannot follow
        (e.g. an indexer trained for one encoder), so the store refuses to switch encoders while it is attached.
        """
        return "none"

    # -- incremental commits (optional) --------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {}
    """Opt-in to incremental commits: the name → ``(dtype, ndim)`` of every array a :meth:`delta` holds.

    Empty (the default): the extension's files are written whole at every commit that changes it. Otherwise
    a commit stores :meth:`delta` as one checksummed row of ``store.sqlite`` (table ``extension_segments``)
    instead, in the same transaction, and the files are written whole only when the segments pass a tenth
    of :meth:`delta_size` (see :func:`rag_hier.store.segments.merge_room`) or on ``HierStore.optimize()``.
    Dtypes are numpy's little-endian codes of numeric types (``"<i8"``, ``"<f4"``, ``"|u1"``, ...); strings
    go as UTF-8 bytes plus offsets.
    """

    DELTA_SEES_ALL_CHANGES: ClassVar[bool] = False
    """Whether :meth:`delta` records every change made through the extension's objects, not only its hooks.

    When true, :meth:`StoreBackend.mark_extension_dirty` commits a delta too (e.g. SVDR vectors cached by a
    search, recorded by the sparse index's own journal); when false, it makes the store write the files
    whole, since the delta may miss a change made outside the hooks.
    """

    def begin_delta(self, limit: int) -> None:
        """Start recording the changes of one write batch (called before its first hook).

        ``limit``: the most entries a delta may hold before the files are written whole anyway; an extension
        may stop recording (and return ``None`` from :meth:`delta`) once past it.
        """

    def delta(self) -> Delta | None:
        """The batch's change since :meth:`begin_delta`, or ``None`` when a delta cannot describe it.

        ``None`` makes the store write the files whole; it must be the answer whenever the recording may
        miss a change: no :meth:`begin_delta` on this object (an extension added, rebuilt or loaded during the
        batch), a rebuild or re-clustering, a recording past its ``limit``. Arrays must match
        :attr:`DELTA_ARRAYS`; ``entries`` is the change's size (0: nothing changed, no row is written).
        """
        return None

    def end_delta(self) -> None:
        """Stop recording (after the commit or rollback of the batch)."""

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay one committed delta on top of the loaded files (arrays checked against :attr:`DELTA_ARRAYS`).

        Raise ``ValueError`` (or ``StoreCorruptedError``) when the arrays do not fit the extension's state.
        """
        raise NotImplementedError(f"{type(self).__name__} declares no deltas")

    def delta_size(self) -> int:
        """Entries the extension holds (what the merge threshold is a fraction of)."""
        return 0

    def describe(self) -> dict[str, Any]:
        """Runtime facts for ``rag-hier info``."""
        return {}
