"""Reading a local store: records, passages, documents, embeddings, counts, ids and filter matches."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from rag_hier.corpus.model import Passage
from rag_hier.store.contract import Filters
from rag_hier.store.filters import Refined, compile_filter
from rag_hier.store.local.base import LocalBase
from rag_hier.store.records import PassageRecord, iter_records, records_by_rowid
from rag_hier.store.schema import query_in, rows_in
from rag_hier.store.writes import check_ids

__all__ = ["LocalReads"]

_HASHES_SQL = "SELECT id, content_hash FROM passages WHERE id IN ({marks})"


class LocalReads(LocalBase):
    """The reads of :class:`~rag_hier.store.store.HierStore`, each inside one read transaction."""

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids are left out)."""
        with self._reading():
            return records_by_rowid(self._core.db, rowids)

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
