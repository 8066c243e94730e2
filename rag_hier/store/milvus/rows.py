"""Writing rows: documents and passages in, passages and documents out, metadata updates, imports.

Every write runs inside a batch (:meth:`~rag_hier.store.milvus.generations.GenerationLog.batch`): a changed row
gets a new version under the batch's generation and its old version is retired (``Batch.retired``); nothing is
visible until the batch commits. The extensions hear of every change through their hooks, as on the local store.
``add_documents`` and ``add_passages`` run the write rules both backends share (:mod:`rag_hier.store.writes`) on
:class:`MilvusRows`, this handle's batch seen as a :class:`~rag_hier.store.writes.RowStore`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier.corpus.model import Document, Passage
from rag_hier.errors import DimensionMismatchError, StoreError
from rag_hier.store.contract import Filters
from rag_hier.store.filters import Refined
from rag_hier.store.milvus.capabilities import TRUE
from rag_hier.store.milvus.filters import str_list
from rag_hier.store.milvus.reads import Reads
from rag_hier.store.milvus.schema import DUMMY_DIM, PASSAGE_FIELDS, VARCHAR
from rag_hier.store.records import PassageRecord, WritePolicy, WriteSummary
from rag_hier.store.schema import dumps, hash_text
from rag_hier.store.writes import (
    StoredDocument,
    StoredPassage,
    check_documents,
    check_ids,
    check_json,
    check_passages,
    write_documents,
    write_passages,
)

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

__all__ = ["MilvusRows", "Rows"]

_STORED_FIELDS = ["vid", "rowid", "passage_id", "doc_id", "content_hash", "has_vector"]


def _stored(row: dict[str, Any]) -> StoredPassage:
    return StoredPassage(
        int(row["rowid"]), row["passage_id"], row["doc_id"], row["content_hash"], bool(row["has_vector"]), row
    )


class Rows(Reads):
    """The writes of the store contract, as new row versions under the open batch's generation."""

    def _passage_row(
        self,
        rowid: int,
        vid: int,
        gen: int,
        p: Passage,
        vector: np.ndarray | None,
        exact: str = "",
        carry: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A passage row; ``carry``: the stored row it replaces (its leaf fields are kept)."""
        row = self._new_passage_row(rowid, vid, gen, p, vector, exact)
        for column in self._leaf_columns if carry else ():
            if carry.get(column) is not None:  # type: ignore[union-attr]
                row[column] = carry[column]  # type: ignore[index]
        return row

    def _new_passage_row(
        self, rowid: int, vid: int, gen: int, p: Passage, vector: np.ndarray | None, exact: str
    ) -> dict[str, Any]:
        dim = int(self._state["dimension"])
        text = p.text
        for what, value in (("text", text), ("passage id", p.id), ("document id", p.doc_id)):
            if len(value.encode("utf-8")) > VARCHAR:
                raise StoreError(f"the {what} of passage {p.id[:80]!r} is longer than Milvus' 65,535 bytes")
        return {
            "vid": vid,
            "rowid": rowid,
            "gen": gen,
            "passage_id": p.id,
            "doc_id": p.doc_id,
            "position": int(p.position),
            "section": int(p.section),
            "title_path": dumps(list(p.title_path)),
            "text": text,
            "meta": dict(p.meta),
            "extra": dict(p.extra),
            "content_hash": hash_text(p.embedding_text),
            "has_vector": vector is not None,
            "exact": exact,
            "vector": (np.asarray(vector, np.float32) if vector is not None else np.zeros(dim, np.float32)).tolist(),
        }

    def _insert_passages(
        self,
        passages: Sequence[Passage],
        vectors: Sequence[np.ndarray | None],
        *,
        rowids: Sequence[int] | None = None,
        hooks: bool = True,
    ) -> np.ndarray:
        """Insert new passages (new rowids unless given), telling the extensions; returns their rowids."""
        b = self._require_batch()
        if not passages:
            return np.zeros(0, np.int64)
        dim = int(self._state["dimension"])
        vec_list = list(vectors)
        for v in vec_list:
            if v is not None and v.shape[0] != dim:
                raise DimensionMismatchError(f"got {v.shape[0]}-d vectors; {self.location} holds {dim}-d")
        if rowids is None:
            first = self._alloc("next_rowid", len(passages))
            ids = np.arange(first, first + len(passages), dtype=np.int64)
        else:
            ids = np.asarray(rowids, dtype=np.int64)
            self._state["next_rowid"] = max(int(self._state["next_rowid"]), int(ids.max()) + 1)
        vid0 = self._alloc("next_vid", len(passages))
        rows = []
        for j, (p, v, r) in enumerate(zip(passages, vec_list, ids.tolist(), strict=True)):
            exact = ""
            if v is not None and v.dtype != np.float32:
                as64 = np.asarray(v, dtype=np.float64)
                if not np.array_equal(as64.astype(np.float32).astype(np.float64), as64):
                    exact = base64.b64encode(as64.astype("<f8").tobytes()).decode("ascii")
            rows.append(self._passage_row(r, vid0 + j, b.gen, p, v, exact))
        self._insert(self._collections.passages, rows)
        b.changed_docs.update(p.doc_id for p in passages)
        if hooks:
            b.added.update(ids.tolist())
            with_vec = [i for i, v in enumerate(vec_list) if v is not None]
            mat = np.stack([np.asarray(vec_list[i], np.float32) for i in with_vec]) if with_vec else None
            for name, ext in self._extensions.items():
                ext.on_passages_added(
                    cast("StoreBackend", self), ids, passages, mat if len(with_vec) == len(passages) else None
                )
                b.dirty_ext.add(name)
        return ids

    def _retire_rows(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Delete passages (their current versions), telling the extensions; returns how many."""
        b = self._require_batch()
        if not rows:
            return 0
        b.changed_docs.update(r["doc_id"] for r in rows)
        b.retired["p"].update(int(r["vid"]) for r in rows)
        removed = np.asarray(sorted(int(r["rowid"]) for r in rows), dtype=np.int64)
        b.removed.update(removed.tolist())
        for name, ext in self._extensions.items():
            ext.on_passages_removed(cast("StoreBackend", self), removed)
            b.dirty_ext.add(name)
        return len(rows)

    def _doc_rows(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        view = self._view()
        rows = self._query_in(
            self._collections.documents,
            "doc_id",
            list(doc_ids),
            view.expr("d"),
            ["vid", "doc_id", "seq", "title", "meta", "toc"],
        )
        return {r["doc_id"]: r for r in rows}

    def _put_doc(self, doc_id: str, title: str, meta: str, toc: str, old: Mapping[str, Any] | None) -> None:
        b = self._require_batch()
        if old is not None:
            if (old["title"], old["meta"], old["toc"]) == (title, meta, toc):
                return
            b.retired["d"].add(int(old["vid"]))
            seq = int(old["seq"])
        else:
            seq = self._alloc("next_seq", 1)
        for what, value in (("title", title), ("metadata", meta), ("table of contents", toc)):
            if len(value.encode("utf-8")) > VARCHAR:
                raise StoreError(f"the {what} of document {doc_id[:80]!r} is longer than Milvus' 65,535 bytes")
        row = {
            "vid": self._alloc("next_vid", 1),
            "gen": b.gen,
            "doc_id": doc_id,
            "seq": seq,
            "title": title,
            "meta": meta,
            "toc": toc,
            "dummy": [0.0] * DUMMY_DIM,
        }
        self._insert(self._collections.documents, [row])

    def _drop_empty_documents(self, doc_ids: Iterable[str]) -> None:
        b = self._require_batch()
        ids = sorted(set(doc_ids))
        if not ids:
            return
        view = self._view()
        live = {
            r["doc_id"] for r in self._query_in(self._collections.passages, "doc_id", ids, view.expr("p"), ["doc_id"])
        }
        for d, row in self._doc_rows([d for d in ids if d not in live]).items():
            b.retired["d"].add(int(row["vid"]))
            b.changed_docs.add(d)

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None = None,
        policy: WritePolicy = "upsert",
        show_progress_bar: bool = False,
        encode: bool = True,
    ) -> WriteSummary:
        """Split, encode what changed and store documents (as :meth:`HierStore.add_documents`)."""
        docs = check_documents(documents, policy)
        with self.batch():
            return write_documents(
                MilvusRows(self),
                docs,
                corpus=self._state.get("corpus", {}),
                max_passage_words=max_passage_words,
                policy=policy,
                show_progress_bar=show_progress_bar,
                encode=encode,
                encoder=self._require_encoder,
            )

    def _rewrite_fields(self, pairs: Sequence[tuple[Mapping[str, Any], Passage]]) -> None:
        """Kept passages whose stored fields (position, text, metadata, ...) changed get a new version."""
        b = self._require_batch()
        rows = []
        for old, p in pairs:
            same = (
                int(old["position"]) == p.position
                and int(old["section"]) == p.section
                and old["title_path"] == dumps(list(p.title_path))
                and old["text"] == p.text
                and (old["meta"] or {}) == dict(p.meta)
                and (old["extra"] or {}) == dict(p.extra)
            )
            if same:
                continue
            b.retired["p"].add(int(old["vid"]))
            vec = np.asarray(old["vector"], np.float32) if old["has_vector"] else None
            rows.append(
                self._passage_row(int(old["rowid"]), self._alloc("next_vid", 1), b.gen, p, vec, old["exact"], carry=old)
            )
        self._insert(self._collections.passages, rows)

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None = None,
        *,
        policy: WritePolicy = "upsert",
        encode_missing: bool | None = None,
        allow_moves: bool = False,
    ) -> WriteSummary:
        """Store passages as given (as :meth:`HierStore.add_passages`)."""
        items, vecs, encode = check_passages(
            passages,
            embeddings,
            policy=policy,
            encode_missing=encode_missing,
            dimension=self._state.get("dimension"),
            where=self.location,
            has_encoder=lambda: self.encoder is not None,
        )
        with self.batch():
            return write_passages(
                MilvusRows(self),
                items,
                vecs,
                policy=policy,
                encode_missing=encode,
                allow_moves=allow_moves,
                encoder=self._require_encoder,
            )

    def _rows_where(self, expr: str) -> list[dict[str, Any]]:
        return self._passage_rows(expr, self._view(), ["vid", "rowid", "doc_id"])

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id; returns how many."""
        ids = check_ids(passage_ids, "passage_ids")
        with self.batch():
            rows = self._query_in(
                self._collections.passages, "passage_id", ids, self._view().expr("p"), ["vid", "rowid", "doc_id"]
            )
            n = self._retire_rows(rows)
            self._drop_empty_documents(r["doc_id"] for r in rows)
            return n

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and their passages; returns how many passages."""
        ids = check_ids(doc_ids, "doc_ids")
        with self.batch():
            b = self._require_batch()
            rows = self._query_in(
                self._collections.passages, "doc_id", ids, self._view().expr("p"), ["vid", "rowid", "doc_id"]
            )
            n = self._retire_rows(rows)
            for row in self._doc_rows(ids).values():
                b.retired["d"].add(int(row["vid"]))
            b.changed_docs.update(ids)
            return n

    def delete_by_filter(self, filters: Filters) -> int:
        """Delete every passage matching ``filters``; returns how many."""
        with self.batch():
            expr = self._translate(filters)
            coarse = self._coarse_expr(filters) if isinstance(filters, Refined) else None
            if expr is not None:
                rows = self._rows_where(expr)
            elif coarse is not None and cast(Refined, filters).equivalent:
                rows = self._rows_where(coarse)
            else:
                keep = {r.rowid for r in self._filtered_records(filters, self._view())}
                rows = [r for r in self._rows_where(coarse or TRUE) if int(r["rowid"]) in keep]
            n = self._retire_rows(rows)
            self._drop_empty_documents(r["doc_id"] for r in rows)
            return n

    def delete_all(self, *, forget_dimension: bool = False) -> int:
        """Delete every passage and document (one commit; rowids are still never reused)."""
        if forget_dimension:
            raise StoreError(
                f"{self.location}: a Milvus collection's dimension is fixed at creation; create a new collection "
                "for vectors of another size"
            )
        with self.batch():
            b = self._require_batch()
            rows = self._rows_where(TRUE)
            removed = np.asarray(sorted(int(r["rowid"]) for r in rows), dtype=np.int64)
            b.changed_docs.update(r["doc_id"] for r in rows)
            b.changed_docs.update(self.document_ids())
            # every row written so far becomes invisible at once: the floor rises to this generation
            self._delete(self._collections.passages, f"gen == {b.gen}")
            self._delete(self._collections.documents, f"gen == {b.gen}")
            b.floor = b.gen
            b.gen += 1
            b.added.clear()
            if removed.size:
                for name, ext in self._extensions.items():
                    ext.on_passages_removed(cast("StoreBackend", self), removed)
                    b.dirty_ext.add(name)
            return int(removed.size)

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge (or replace) passage metadata; returns how many passages were updated."""
        ids = check_ids(passage_ids, "passage_ids")
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be a mapping, got {type(meta).__name__}")
        payload = dict(meta)
        check_json(payload, "meta")
        with self.batch():
            rows = self._query_in(
                self._collections.passages,
                "passage_id",
                ids,
                self._view().expr("p"),
                [*PASSAGE_FIELDS, "vector", *self._leaf_columns],
            )
            self._update_rows(rows, payload, merge=merge)
            return len(rows)

    def _update_rows(self, rows: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], *, merge: bool) -> None:
        b = self._require_batch()
        new_rows = []
        for r in rows:
            p = self._record(r).to_passage()
            meta = {**dict(r["meta"] or {}), **payload} if merge else dict(payload)
            p = Passage(p.id, p.doc_id, p.position, p.text, p.title_path, p.section, meta, dict(p.extra))
            vec = np.asarray(r["vector"], np.float32) if r["has_vector"] else None
            b.retired["p"].add(int(r["vid"]))
            new_rows.append(
                self._passage_row(int(r["rowid"]), self._alloc("next_vid", 1), b.gen, p, vec, r["exact"], carry=r)
            )
        self._insert(self._collections.passages, new_rows)

    def update_by_filter(self, filters: Filters, meta: Mapping[str, Any]) -> int:
        """Merge ``meta`` into every matching passage; returns how many."""
        with self.batch():
            recs = self._filtered_records(filters, self._view())
            return self.update_meta([r.passage_id for r in recs], meta)

    # ------------------------------------------------------------------------------------------------
    # imports for migration (rag_hier.store.milvus.migrate)
    # ------------------------------------------------------------------------------------------------
    def import_passages(
        self, records: Sequence[PassageRecord], vectors: Sequence[np.ndarray | None], exact: Sequence[str]
    ) -> None:
        """Insert stored records keeping their rowids (inside a batch; no extension hook runs)."""
        b = self._require_batch()
        dim = int(self._state["dimension"])
        rows = []
        vid0 = self._alloc("next_vid", len(records))
        for j, (rec, v, ex) in enumerate(zip(records, vectors, exact, strict=True)):
            if v is not None and v.shape[0] != dim:
                raise DimensionMismatchError(f"got {v.shape[0]}-d vectors; {self.location} holds {dim}-d")
            rows.append(self._passage_row(rec.rowid, vid0 + j, b.gen, rec.to_passage(), v, ex))
        if records:
            self._state["next_rowid"] = max(int(self._state["next_rowid"]), max(r.rowid for r in records) + 1)
        self._insert(self._collections.passages, rows)

    def import_document(self, doc_id: str, title: str, meta: Any, toc: Any) -> None:
        """Insert a document row (inside a batch)."""
        self._put_doc(doc_id, title, dumps(meta), dumps(toc), None)


class MilvusRows:
    """The :class:`~rag_hier.store.writes.RowStore` of a Milvus handle's open batch (for the shared write rules).

    A stored passage's ``row`` is its current row version (:meth:`Rows._retire_rows` retires it,
    :meth:`Rows._rewrite_fields` writes a new version when its fields changed).
    """

    def __init__(self, store: Rows) -> None:
        self.store = store

    def stored_documents(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """The stored documents among ``doc_ids``."""
        rows = self.store._doc_rows(doc_ids)
        return {d: StoredDocument((r["title"], r["meta"], r["toc"]), r) for d, r in rows.items()}

    def passages_of_documents(self, doc_ids: Sequence[str]) -> list[StoredPassage]:
        """Every stored passage of these documents, whole (a rewritten one keeps its vector and leaves)."""
        store = self.store
        fields = [*PASSAGE_FIELDS, "vector", *store._leaf_columns]
        rows = store._query_in(store._collections.passages, "doc_id", doc_ids, store._view().expr("p"), fields)
        return [_stored(r) for r in rows]

    def passages_by_id(self, passage_ids: Sequence[str], *, other_than: str | None = None) -> list[StoredPassage]:
        """The stored passages with these ids (``other_than``: only those of another document)."""
        store = self.store
        cond = store._view().expr("p")
        if other_than is not None:
            cond = f"doc_id != {str_list([other_than])[1:-1]} and {cond}"
        return [
            _stored(r)
            for r in store._query_in(store._collections.passages, "passage_id", passage_ids, cond, _STORED_FIELDS)
        ]

    def document_changed(self, doc_id: str) -> None:
        """Note that a document's fields changed."""
        self.store._require_batch().changed_docs.add(doc_id)

    def put_document(self, doc_id: str, fields: tuple[str, str, str], stored: StoredDocument | None) -> None:
        """A new version of the document's row (none when its fields are unchanged)."""
        self.store._put_doc(doc_id, *fields, stored.row if stored is not None else None)

    def name_documents(self, titles: Mapping[str, str]) -> None:
        """Insert the documents among ``titles`` that are not stored."""
        stored = self.store._doc_rows(sorted(titles))
        for doc_id, title in titles.items():
            if doc_id not in stored:
                self.store._put_doc(doc_id, title, "{}", "[]", None)

    def insert_passages(self, passages: Sequence[Passage], vectors: Sequence[np.ndarray | None]) -> None:
        """Insert new passages under new rowids, telling the extensions."""
        self.store._insert_passages(passages, vectors)

    def retire_passages(self, stored: Sequence[StoredPassage]) -> int:
        """Retire the current versions of stored passages, telling the extensions; returns how many."""
        return self.store._retire_rows([s.row for s in stored])

    def rewrite_passages(self, pairs: Sequence[tuple[StoredPassage, Passage]]) -> None:
        """A new version of each kept passage whose stored fields changed."""
        self.store._rewrite_fields([(s.row, p) for s, p in pairs])

    def drop_empty_documents(self, doc_ids: Iterable[str]) -> None:
        """Retire the rows of these documents that have no passage left."""
        self.store._drop_empty_documents(doc_ids)
