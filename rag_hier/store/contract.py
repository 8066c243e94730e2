"""The store contract: what retrieval strategies, extensions and framework adapters may call on a store.

:class:`~rag_hier.store.HierStore` (FAISS + SQLite in a directory) implements it; a second backend (a
distributed vector database, say) implements the same protocol and every strategy and adapter works on it
unchanged. Methods are grouped by job: identity, reading records, vectors, filters, writing, extensions.
Rowids are the store's stable int64 passage ids (never reused after a delete); every strategy ranks rowids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from rag_hier.corpus.model import Document, Passage
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.store.records import PassageRecord

__all__ = ["SIMILARITIES", "Filters", "Similarity", "StoreBackend"]

Filters = Mapping[str, Any] | Predicate | None
"""A Haystack-syntax filter dict, a compiled predicate over passage records, or ``None`` (no filter)."""
Similarity = Literal["cosine", "dot_product"]
SIMILARITIES: tuple[str, ...] = ("cosine", "dot_product")


@runtime_checkable
class StoreBackend(Protocol):
    """The public surface of a rag-hier store (see :class:`~rag_hier.store.HierStore` for the semantics)."""

    # -- identity ---------------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        """Where the collection lives (a directory path, or a database URI)."""

    @property
    def read_only(self) -> bool:
        """Whether writes are refused."""

    @property
    def generation(self) -> int:
        """The committed generation (changes with every commit)."""

    @property
    def dimension(self) -> int | None:
        """Dense vector dimension (``None`` until known)."""

    @property
    def similarity(self) -> Similarity:
        """How dense scores compare vectors: ``"cosine"`` (unit vectors) or ``"dot_product"``."""

    @property
    def encoder(self) -> DenseEncoder | None:
        """The store's dense encoder, if it has one."""

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors from the store's encoder (an error naming the alternatives when it has none)."""

    # -- reading ----------------------------------------------------------------------------------------
    def count_passages(self, filters: Filters = None) -> int:
        """Number of passages (matching ``filters``)."""

    def count_vectors(self) -> int:
        """Number of passages with a dense vector."""

    def count_documents(self) -> int:
        """Number of documents."""

    def document_ids(self) -> list[str]:
        """Document ids in insertion order."""

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids."""

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked."""

    def iter_passages(self, filters: Filters = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids left out)."""

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, ascending."""

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """Rowids of the passages with dense vectors among these ids / documents."""

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each rowid."""

    def matching_rowids(
        self, filters: Filters, *, with_vector: bool = True
    ) -> np.ndarray | None:
        """Rowids matching ``filters`` (only those with a dense vector unless ``with_vector=False``); ``None``: no filter."""

    # -- dense vectors ----------------------------------------------------------------------------------
    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors: ``(scores, rowids)``, ``-1``-padded."""

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors as written, by passage id."""

    # -- writing ----------------------------------------------------------------------------------------
    def batch(self) -> AbstractContextManager[Any]:
        """Group writes into one atomic commit."""

    def add_documents(self, documents: Iterable[Document], **kwargs: Any) -> Any:
        """Split, encode and store documents (upsert by document id)."""

    def add_passages(self, passages: Sequence[Passage], embeddings: Any = None, **kwargs: Any) -> Any:
        """Store passages as given, with caller vectors or encoded ones."""

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id."""

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and their passages."""

    def delete_by_filter(self, filters: Mapping[str, Any] | Predicate) -> int:
        """Delete every passage matching ``filters``."""

    def delete_all(self) -> int:
        """Delete everything."""

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge or replace passage metadata."""

    def update_by_filter(self, filters: Mapping[str, Any] | Predicate, meta: Mapping[str, Any]) -> int:
        """Merge metadata into every matching passage."""

    # -- extensions -------------------------------------------------------------------------------------
    def extension(self, name: str) -> Any:
        """The extension (a :class:`~rag_hier.store.extensions.base.StoreExtension`) registered as ``name``, or ``None``."""

    def add_extension(self, extension: Any, *, replace: bool = False) -> None:
        """Attach and build an extension."""

    def ensure_extension(self, name: str, *, create: bool = True, **config: Any) -> Any:
        """The extension ``name``, built with ``config`` when missing and ``create`` is true."""

    def close(self) -> None:
        """Release the store."""
