"""Writing rows: documents and passages in, passages and documents out, metadata updates, imports.

Every write runs inside a batch (:meth:`~rag_hier.store.milvus.generations.GenerationLog.batch`): a changed row
gets a new version under the batch's generation and its old version is retired (``Batch.retired``); nothing is
visible until the batch commits. The extensions hear of every change through their hooks, as on the local store.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.errors import DimensionMismatchError, DuplicateIdError, StoreError
from rag_hier.store.contract import Filters
from rag_hier.store.filters import Refined
from rag_hier.store.milvus.filters import str_list, translate
from rag_hier.store.milvus.reads import Reads
from rag_hier.store.milvus.schema import DUMMY_DIM, PASSAGE_FIELDS, VARCHAR
from rag_hier.store.records import POLICIES, PassageRecord, WritePolicy, WriteSummary
from rag_hier.store.schema import dumps, hash_text
from rag_hier.store.writes import _check_id, _check_json, check_ids, check_passage_owners, normalize_embeddings

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

__all__ = ["Rows"]


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
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if isinstance(documents, Document):
            raise TypeError("add_documents() takes a list of Documents, not a single Document")
        docs = list(documents)
        seen: set[str] = set()
        for d in docs:
            if not isinstance(d, Document):
                raise TypeError(f"add_documents() takes Document objects, got {type(d).__name__}")
            _check_id(d.doc_id, "document id")
            if d.doc_id in seen:
                raise DuplicateIdError(f"document id {d.doc_id!r} appears twice in the input")
            seen.add(d.doc_id)
        with self.batch():
            b = self._require_batch()
            if max_passage_words is None:
                max_passage_words = int(self._state.get("corpus", {}).get("max_passage_words", 100))
            existing = self._doc_rows([d.doc_id for d in docs])
            if policy == "fail" and existing:
                raise DuplicateIdError(f"{len(existing)} document(s) already stored, e.g. {sorted(existing)[0]!r}")
            view = self._view()
            stored_rows: dict[str, list[dict[str, Any]]] = {}
            for r in self._query_in(
                self._collections.passages,
                "doc_id",
                [d.doc_id for d in docs],
                view.expr("p"),
                [*PASSAGE_FIELDS, "vector", *self._leaf_columns],
            ):
                stored_rows.setdefault(r["doc_id"], []).append(r)
            added = updated = unchanged = skipped = empty = removed = kept = 0
            new_passages: list[Passage] = []
            rewrite: list[tuple[dict[str, Any], Passage]] = []
            for d in docs:
                if d.doc_id in existing and policy == "skip":
                    skipped += 1
                    continue
                _check_json(d.metadata, f"metadata of document {d.doc_id!r}")
                passages = split_document(d, max_passage_words)
                if not passages:
                    empty += 1
                self._check_collisions(d.doc_id, passages)
                fields = (d.title, dumps(dict(d.metadata)), dumps(d.table_of_contents()))
                old_doc = existing.get(d.doc_id)
                if old_doc is None or (old_doc["title"], old_doc["meta"], old_doc["toc"]) != fields:
                    b.changed_docs.add(d.doc_id)
                self._put_doc(d.doc_id, *fields, old_doc)
                rows = stored_rows.get(d.doc_id, [])
                old = {r["passage_id"]: r for r in rows if r["has_vector"] or not encode}
                stale = {int(r["vid"]): r for r in rows}
                changed = False
                for p in passages:
                    prev = old.get(p.id)
                    if prev is not None and prev["content_hash"] == hash_text(p.embedding_text):
                        stale.pop(int(prev["vid"]), None)
                        rewrite.append((prev, p))
                        kept += 1
                    else:
                        new_passages.append(p)
                        changed = True
                if stale:
                    changed = True
                    removed += self._retire_rows(list(stale.values()))
                if d.doc_id not in existing:
                    added += 1
                elif changed:
                    updated += 1
                else:
                    unchanged += 1
            self._rewrite_fields(rewrite)
            vectors = None
            if new_passages and encode:
                vectors = self._require_encoder("add_documents()").encode_documents(
                    [p.embedding_text for p in new_passages], show_progress_bar=show_progress_bar
                )
            self._insert_passages(new_passages, list(vectors) if vectors is not None else [None] * len(new_passages))
        return WriteSummary(
            documents_added=added,
            documents_updated=updated,
            documents_unchanged=unchanged,
            documents_skipped=skipped,
            documents_empty=empty,
            passages_added=len(new_passages),
            passages_removed=removed,
            passages_unchanged=kept,
            encoded=len(new_passages) if vectors is not None else 0,
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

    def _check_collisions(self, doc_id: str, passages: Sequence[Passage]) -> None:
        if not passages:
            return
        view = self._view()
        taken = self._query_in(
            self._collections.passages,
            "passage_id",
            [p.id for p in passages],
            f"doc_id != {str_list([doc_id])[1:-1]} and {view.expr('p')}",
            ["passage_id", "doc_id"],
        )
        if taken:
            raise DuplicateIdError(
                f"passage id {taken[0]['passage_id']!r} of document {doc_id!r} is already stored as a passage of "
                f"document {taken[0]['doc_id']!r}"
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
        """Store passages as given (as :meth:`HierStore.add_passages`)."""
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if isinstance(passages, Passage):
            raise TypeError("add_passages() takes a list of Passages, not a single Passage")
        items = list(passages)
        for p in items:
            if not isinstance(p, Passage):
                raise TypeError(f"add_passages() takes Passage objects, got {type(p).__name__}")
            _check_id(p.id, "passage id")
            _check_id(p.doc_id, f"document id of passage {p.id!r}")
            _check_json(p.meta, f"metadata of passage {p.id!r}")
            _check_json(p.extra, f"extra of passage {p.id!r}")
        vecs = normalize_embeddings(embeddings, len(items), self._state.get("dimension"), self.location)
        if encode_missing is None:
            encode_missing = embeddings is None and self.encoder is not None
        order: dict[str, int] = {}
        for i, p in enumerate(items):
            if policy == "skip" and p.id in order:
                continue
            order[p.id] = i
        idx = sorted(order.values())
        items = [items[i] for i in idx]
        vecs = [vecs[i] for i in idx]
        with self.batch():
            view = self._view()
            stored = self._query_in(
                self._collections.passages,
                "passage_id",
                [p.id for p in items],
                view.expr("p"),
                ["vid", "rowid", "passage_id", "doc_id"],
            )
            if policy == "upsert" and not allow_moves:
                check_passage_owners(items, {r["passage_id"]: r["doc_id"] for r in stored})
            if policy == "fail" and stored:
                raise DuplicateIdError(f"passage id {sorted(r['passage_id'] for r in stored)[0]!r} is already stored")
            if policy == "skip":
                have = {r["passage_id"] for r in stored}
                keep = [i for i, p in enumerate(items) if p.id not in have]
                items, vecs = [items[i] for i in keep], [vecs[i] for i in keep]
                stored = []
            if encode_missing:
                todo = [i for i, v in enumerate(vecs) if v is None]
                if todo:
                    enc = self._require_encoder("encoding passages").encode_documents(
                        [items[i].embedding_text for i in todo]
                    )
                    for j, i in enumerate(todo):
                        vecs[i] = enc[j]
            removed = self._retire_rows(stored)
            docs = self._doc_rows(sorted({p.doc_id for p in items}))
            for p in items:
                if p.doc_id not in docs:
                    self._put_doc(p.doc_id, p.title_path[0] if p.title_path else "", "{}", "[]", None)
                    docs[p.doc_id] = {}
            self._insert_passages(items, vecs)
            self._drop_empty_documents(r["doc_id"] for r in stored)
        return WriteSummary(
            passages_added=len(items),
            passages_removed=removed,
            encoded=sum(1 for v in vecs if v is not None) if encode_missing else 0,
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
            expr = translate(filters)
            coarse = self._coarse_expr(filters) if isinstance(filters, Refined) else None
            if expr is not None:
                rows = self._rows_where(expr)
            elif coarse is not None and cast(Refined, filters).equivalent:
                rows = self._rows_where(coarse)
            else:
                keep = {r.rowid for r in self._filtered_records(filters, self._view())}
                rows = [r for r in self._rows_where(coarse or "true") if int(r["rowid"]) in keep]
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
            rows = self._rows_where("true")
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
        _check_json(payload, "meta")
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
