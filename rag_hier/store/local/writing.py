"""Writing to a local store: documents, passages, deletes, metadata updates, indexed metadata fields, merging segments.

Each method opens a batch (:meth:`~rag_hier.store.store.HierStore.batch`) and calls
:class:`~rag_hier.store.writes.Writer`, which holds the write rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier.corpus.model import Document, Passage
from rag_hier.store import meta_index
from rag_hier.store.contract import Filters
from rag_hier.store.filters import compile_filter
from rag_hier.store.local.base import LocalBase
from rag_hier.store.records import WritePolicy, WriteSummary
from rag_hier.store.writes import Writer, check_ids

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

__all__ = ["LocalWrites"]


class LocalWrites(LocalBase):
    """The writes of :class:`~rag_hier.store.store.HierStore`; each is one atomic commit (or part of a batch)."""

    def _writer(self) -> Writer:
        return Writer(self._core, cast("StoreBackend", self), self._require_encoder)

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

    def update_corpus_info(self, **changes: Any) -> None:
        """Record facts about the corpus (format, passage length, ...) in the committed state."""
        with self.batch():
            self._core.state["corpus"] = {**self._core.state.get("corpus", {}), **changes}
