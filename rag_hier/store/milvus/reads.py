"""Reading a Milvus collection: records, passages, documents, embeddings, counts, and filters → rowids.

Every read runs inside ``_reading()`` (:class:`~rag_hier.store.milvus.generations.GenerationLog`): it answers
from one committed generation, through the :class:`~rag_hier.store.milvus.base.View` of that generation.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rag_hier.corpus.model import Passage
from rag_hier.errors import FilterError, StoreError
from rag_hier.store import meta_stats
from rag_hier.store.contract import Filters
from rag_hier.store.filters import Refined, compile_filter
from rag_hier.store.milvus.base import View
from rag_hier.store.milvus.capabilities import TRUE
from rag_hier.store.milvus.filters import escape_string
from rag_hier.store.milvus.generations import GenerationLog
from rag_hier.store.milvus.schema import PASSAGE_FIELDS
from rag_hier.store.milvus.search import MilvusRowids
from rag_hier.store.records import PassageRecord
from rag_hier.store.writes import check_ids

__all__ = ["Reads"]


class _MissingVector(StoreError, RuntimeError):
    """A rowid has no stored vector (``RuntimeError`` too, like FAISS' reconstruct of an unknown id)."""


class Reads(GenerationLog):
    """The reads of the store contract, answered from Milvus queries."""

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids left out)."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        with self._reading() as view:
            gen, cached = self._hit_rows
            if self._pinned and self._batch is None and gen == view.gen_max and all(i in cached for i in ids):
                return {i: self._record(cached[i]) for i in ids}  # fetched by the search of this reading() block
            rows = self._query_in(self._collections.passages, "rowid", ids, view.expr("p"), PASSAGE_FIELDS)
        return {int(r["rowid"]): self._record(r) for r in rows}

    def iter_records(self) -> Iterator[PassageRecord]:
        """Every record in insertion order."""
        with self._reading() as view:
            rows = self._passage_rows(TRUE, view)
        return iter(sorted((self._record(r) for r in rows), key=lambda r: r.rowid))

    def _coarse_expr(self, filters: Refined) -> str | None:
        """The Milvus expression of a :class:`Refined` filter's coarse part (``None``: run the predicate on all)."""
        try:
            return self._translate(filters.coarse)
        except FilterError:  # a field name Milvus cannot address: the coarse part is only an optimization
            return None

    def _filtered_records(self, filters: Filters, view: View) -> list[PassageRecord]:
        if isinstance(filters, Refined):
            coarse = self._coarse_expr(filters)
            if coarse is not None:  # the predicate runs on the rows the coarse expression selects in Milvus
                recs = sorted(map(self._record, self._passage_rows(coarse, view)), key=lambda r: r.rowid)
                return recs if filters.equivalent else [r for r in recs if filters.exact(r)]
        expr = self._translate(filters)
        if expr is not None:
            rows = self._passage_rows(expr, view)
            return sorted((self._record(r) for r in rows), key=lambda r: r.rowid)
        predicate = compile_filter(filters)  # evaluated client-side (see filters.translate)
        rows = self._passage_rows(TRUE, view)
        recs = sorted((self._record(r) for r in rows), key=lambda r: r.rowid)
        return [r for r in recs if predicate is None or predicate(r)]

    def filter_passages(self, filters: Filters = None) -> list[Passage]:
        """Passages matching ``filters``, in insertion order."""
        with self._reading() as view:
            return [r.to_passage() for r in self._filtered_records(filters, view)]

    def iter_passages(self, filters: Filters = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""
        return iter(self.filter_passages(filters))

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked."""
        ids = check_ids(passage_ids, "passage_ids")
        with self._reading() as view:
            rows = self._query_in(self._collections.passages, "passage_id", ids, view.expr("p"), PASSAGE_FIELDS)
        found = {r["passage_id"]: self._record(r).to_passage() for r in rows}
        return [found[i] for i in ids if i in found]

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids."""
        names = self._collections
        with self._reading() as view:
            docs = self._query_in(
                names.documents, "doc_id", [doc_id], view.expr("d"), ["doc_id", "title", "meta", "toc"]
            )
            if not docs:
                return None
            rows = self._query_in(
                names.passages, "doc_id", [doc_id], view.expr("p"), ["passage_id", "position", "rowid"]
            )
        d = docs[0]
        rows.sort(key=lambda r: (int(r["position"]), int(r["rowid"])))
        return {
            "doc_id": d["doc_id"],
            "title": d["title"],
            "meta": json.loads(d["meta"]),
            "toc": json.loads(d["toc"]),
            "passage_ids": [r["passage_id"] for r in rows],
        }

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors as written (float64 when float32 could not hold them), ``None`` when absent."""
        ids = list(passage_ids)
        with self._reading() as view:
            rows = self._query_in(
                self._collections.passages,
                "passage_id",
                list(dict.fromkeys(ids)),
                view.expr("p"),
                ["passage_id", "has_vector", "exact", "vector"],
            )
        by_id = {r["passage_id"]: r for r in rows}
        out: list[np.ndarray | None] = []
        for p in ids:
            r = by_id.get(p)
            if r is None or not r["has_vector"]:
                out.append(None)
            elif r["exact"]:
                out.append(np.frombuffer(base64.b64decode(r["exact"]), dtype="<f8").copy())
            else:
                out.append(np.asarray(r["vector"], dtype=np.float32))
        return out

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.dimension or 0), np.float32)
        with self._reading() as view:
            rows = self._query_in(
                self._collections.passages,
                "rowid",
                np.unique(ids).tolist(),
                f"has_vector == true and {view.expr('p')}",
                ["rowid", "vector"],
            )
        by = {int(r["rowid"]): r["vector"] for r in rows}
        missing = [int(r) for r in ids if int(r) not in by]
        if missing:
            raise _MissingVector(f"{self.location}: no vector for rowid {missing[0]}")
        return np.asarray([by[int(r)] for r in ids], dtype=np.float32)

    def count_passages(self, filters: Filters = None) -> int:
        """Number of passages (matching ``filters``)."""
        passages = self._collections.passages
        with self._reading() as view:
            if filters is None:
                return self._committed_count("passages", passages, view.expr("p"))
            expr = self._translate(filters)
            if isinstance(filters, Refined) and filters.equivalent:
                expr = self._coarse_expr(filters)
            if expr is None:
                return len(self._filtered_records(filters, view))
            return self._count(passages, f"({expr}) and {view.expr('p')}")

    # -- metadata aggregates: Milvus has no distinct/min/max over JSON keys (its query aggregates only count(*)),
    #    so the filter runs in Milvus and the reference (rag_hier.store.meta_stats) on the one column fetched --
    def _matching_expr(self, filters: Filters) -> str | None:
        """The Milvus expression selecting exactly the passages ``filters`` matches (``None``: none does)."""
        if filters is None:
            return TRUE
        if isinstance(filters, Refined) and filters.equivalent:
            return self._coarse_expr(filters)
        return self._translate(filters)

    def _column_of_matching(self, filters: Filters, column: str) -> list[Mapping[str, Any]]:
        """``column`` (``meta`` or ``extra``) of the passages matching ``filters``, in rowid order.

        Both columns are fetched together (Milvus Lite sends both in about the time of one) and, inside a
        ``reading()`` block, kept for the next aggregate over the same filter expression and generation (an
        adapter checks the passages' ``extra`` and then aggregates their ``meta``: one query).
        """
        with self._reading() as view:
            expr = self._matching_expr(filters)
            if expr is None:
                return [getattr(r, column) for r in self._filtered_records(filters, view)]
            key = (view.gen_max, expr)
            keep = bool(self._pinned) and self._batch is None
            cached = self._meta_rows
            if keep and cached is not None and cached[0] == key:
                rows = cached[1]
            else:
                rows = sorted(self._passage_rows(expr, view, ["rowid", "meta", "extra"]), key=lambda r: int(r["rowid"]))
                self._meta_rows = (key, rows) if keep else None
        return [r[column] or {} for r in rows]

    def count_unique_meta(self, fields: Sequence[str], filters: Filters = None) -> dict[str, int]:
        """Distinct non-null values of each metadata key in ``fields`` among the passages matching ``filters``.

        Filtered in Milvus; the values of the ``meta`` field are compared client-side (Milvus has no distinct
        count over JSON keys). Semantics: :meth:`rag_hier.store.HierStore.count_unique_meta`.
        """
        names = meta_stats.check_fields(fields)
        return meta_stats.count_unique(self._column_of_matching(filters, "meta"), names)

    def meta_min_max(self, field: str, filters: Filters = None) -> tuple[Any, Any]:
        """``(min, max)`` of metadata key ``field`` (see :meth:`rag_hier.store.HierStore.meta_min_max`)."""
        name = meta_stats.check_field(field)
        return meta_stats.min_max(self._column_of_matching(filters, "meta"), name)

    def meta_field_types(self, filters: Filters = None) -> dict[str, str]:
        """Metadata keys with their kind (see :meth:`rag_hier.store.HierStore.meta_field_types`)."""
        return meta_stats.field_types(self._column_of_matching(filters, "meta"))

    def count_with_extra(self, paths: Sequence[Sequence[str]], filters: Filters = None) -> tuple[int, list[int]]:
        """Matching passages and how many hold a value at each path into ``extra`` (see ``HierStore``)."""
        keys = [meta_stats.check_path(p) for p in paths]
        passages = self._collections.passages
        with self._reading() as view:
            expr = self._matching_expr(filters)
            # counted in Milvus: count(*) with `extra["a"]["b"] is not null` (a server with `exists` only counts a
            # stored JSON null as a value: the column is read instead)
            if expr is not None and not self._pinned and self._caps.json_null_check:
                where = f"({expr}) and {view.expr('p')}"
                total = self._count(passages, where)
                counts = [
                    self._count(
                        passages, f"{where} and extra{''.join(f'[{escape_string(k)}]' for k in key)} is not null"
                    )
                    for key in keys
                ]
                return total, counts
        return meta_stats.count_present(self._column_of_matching(filters, "extra"), keys)

    def count_vectors(self) -> int:
        """Number of passages with a dense vector."""
        with self._reading() as view:
            return self._committed_count(
                "vectors", self._collections.passages, f"has_vector == true and {view.expr('p')}"
            )

    def count_documents(self) -> int:
        """Number of documents."""
        with self._reading() as view:
            return self._committed_count("documents", self._collections.documents, view.expr("d"))

    def document_ids(self) -> list[str]:
        """Document ids in insertion order."""
        with self._reading() as view:
            rows = self._query(self._collections.documents, view.expr("d"), ["doc_id", "seq"])
        return [r["doc_id"] for r in sorted(rows, key=lambda r: int(r["seq"]))]

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, ascending."""
        with self._reading() as view:
            rows = self._passage_rows(TRUE, view, ["rowid"])
        return np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """Rowids of the passages with dense vectors among these ids / documents (ascending)."""
        with self._reading() as view:
            base = f"has_vector == true and {view.expr('p')}"
            sides: list[set[int]] = []
            for column, values in (("passage_id", passage_ids), ("doc_id", doc_ids)):
                if values is not None:
                    rows = self._query_in(
                        self._collections.passages, column, list(dict.fromkeys(values)), base, ["rowid"]
                    )
                    sides.append({int(r["rowid"]) for r in rows})
            if not sides:
                rows = self._passage_rows("has_vector == true", view, ["rowid"])
                sides.append({int(r["rowid"]) for r in rows})
        return np.asarray(sorted(set.intersection(*sides)), dtype=np.int64)

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each rowid."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        with self._reading() as view:
            rows = self._query_in(self._collections.passages, "rowid", ids, view.expr("p"), ["rowid", "doc_id"])
        return {int(r["rowid"]): r["doc_id"] for r in rows}

    def matching_rowids(self, filters: Filters, *, with_vector: bool = True) -> np.ndarray | None:
        """Rowids matching ``filters`` (a :class:`MilvusRowids` carrying the Milvus expression); ``None``: no filter."""
        if compile_filter(filters) is None:
            return None
        with self._reading() as view:
            if isinstance(filters, Refined) and (coarse := self._coarse_expr(filters)) is not None:
                cond = f"({coarse}) and has_vector == true" if with_vector else coarse
                if filters.equivalent:
                    rows = self._passage_rows(cond, view, ["rowid"])
                    return MilvusRowids(np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64)), cond)
                recs = [self._record(r) for r in self._passage_rows(cond, view)]
                kept = np.sort(np.fromiter((r.rowid for r in recs if filters.exact(r)), np.int64))
                # every row the expression selects passes the predicate: search can filter by the expression
                return MilvusRowids(kept, cond) if kept.size == len(recs) else kept
            expr = self._translate(filters)
            if expr is not None:
                cond = f"({expr}) and has_vector == true" if with_vector else expr
                rows = self._passage_rows(cond, view, ["rowid"])
                ids = np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))
                return MilvusRowids(ids, cond)
            recs = self._filtered_records(filters, view)
        return np.asarray([r.rowid for r in recs if r.has_vector or not with_vector], dtype=np.int64)

    # ------------------------------------------------------------------------------------------------
    # whole-collection reads for migration (rag_hier.store.milvus.migrate)
    # ------------------------------------------------------------------------------------------------
    def raw_rows(self, chunk: int = 4096) -> Iterator[tuple[PassageRecord, np.ndarray | None, str]]:
        """Every committed passage with its vector and exact float64 copy (base64, or ``""``), by rowid.

        Read in rowid ranges of ``chunk`` (memory stays bounded), all from the generation current at the call.
        """
        with self._reading() as view:
            top = int(self._state["next_rowid"])
        for start in range(0, top, chunk):
            rows = self._passage_rows(
                f"rowid >= {start} and rowid < {start + chunk}",
                View(view.gen_max, view.floor, view.excluded),
                [*PASSAGE_FIELDS, "vector"],
            )
            for r in sorted(rows, key=lambda r: int(r["rowid"])):
                yield self._record(r), (np.asarray(r["vector"], np.float32) if r["has_vector"] else None), r["exact"]

    def raw_documents(self) -> list[dict[str, Any]]:
        """Every committed document row (``doc_id``, ``title``, ``meta``, ``toc``), in insertion order."""
        with self._reading() as view:
            rows = self._query(self._collections.documents, view.expr("d"), ["doc_id", "seq", "title", "meta", "toc"])
        return [
            {"doc_id": r["doc_id"], "title": r["title"], "meta": json.loads(r["meta"]), "toc": json.loads(r["toc"])}
            for r in sorted(rows, key=lambda r: int(r["seq"]))
        ]
