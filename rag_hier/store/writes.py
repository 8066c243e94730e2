"""The store's writes: the write rules every backend shares, and the local store's rows under them.

The rules decide what a write does: the policy (``upsert``, ``skip``, ``fail``), duplicate ids within the input,
splitting documents into passages, which stored passages keep their vectors (same content hash), passage ids
another document already holds, and the :class:`WriteSummary`. :func:`check_documents` and :func:`check_passages`
check the input; :func:`write_documents` and :func:`write_passages` then run inside a backend's write batch on
its :class:`RowStore`, the small interface a backend offers them (its rows of documents, inserting passages,
retiring and rewriting stored ones). :class:`Writer` is the local store's: SQLite rows, the passage index and,
through their hooks, the extensions, all committed at once by the core's write batch
(:meth:`StoreCore.writing`); the Milvus backend's is :class:`rag_hier.store.milvus.rows.MilvusRows`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth, first_control_character
from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.errors import DimensionMismatchError, DuplicateIdError, InvalidInputError, StoreError
from rag_hier.index.dense import DenseIndex
from rag_hier.store import meta_index
from rag_hier.store.records import POLICIES, WritePolicy, WriteSummary
from rag_hier.store.schema import dumps, hash_text, query_in

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.store.contract import StoreBackend
    from rag_hier.store.core import StoreCore

logger = logging.getLogger(__name__)

__all__ = [
    "POLICIES",
    "RowStore",
    "StoredDocument",
    "StoredPassage",
    "WritePolicy",
    "WriteSummary",
    "Writer",
    "check_documents",
    "check_ids",
    "check_json",
    "check_passage_owners",
    "check_passages",
    "write_documents",
    "write_passages",
]


def check_ids(ids: Any, what: str) -> list[str]:
    """``ids`` as a list of strings (a single string is refused: it would be iterated character by character)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"{what} must be a list of ids, got {type(ids).__name__} {ids!r:.80}")
    out = list(ids)
    for i in out:
        if not isinstance(i, str):
            raise TypeError(f"{what} must hold strings, got {type(i).__name__} {i!r:.80}")
    return list(dict.fromkeys(out))


# The limits themselves (nesting depth, control characters) live in rag_hier._limits, shared with the
# corpus readers, the document model, the filters and the TREC writer. Documents check their own id and
# metadata when they are built (rag_hier.corpus.model.Document); these checks cover what reaches the
# store as raw Passages and metadata updates.


_JSON_SCALARS = (str, int, float, bool, type(None))


def check_json(value: Mapping[str, Any], what: str) -> None:
    """Raise a :class:`StoreError` naming ``what`` unless ``value`` can be stored as JSON (at most 100 levels deep)."""
    if not value:  # {} (most passages): nothing to check
        return
    flat = all(isinstance(v, _JSON_SCALARS) for v in value.values())  # depth 1: no walk
    if not flat and exceeds_depth(value, MAX_NESTING_DEPTH):
        raise StoreError(f"{what} is nested more than {MAX_NESTING_DEPTH} levels deep")
    try:
        dumps(dict(value))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} cannot be stored as JSON ({exc})") from exc


def _check_id(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise StoreError(f"{what} must be a non-empty string, got {value!r:.80}")
    bad = first_control_character(value)
    if bad is not None:
        raise StoreError(
            f"{what} {value!r:.80} contains the control character {bad!r}; ids may not hold tabs, line breaks "
            "or other control characters"
        )


def _policy(policy: Any) -> WritePolicy:
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


# -- the write rules --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredPassage:
    """A stored passage as the write rules see it; ``row`` is the backend's own handle on it (or ``None``)."""

    rowid: int
    passage_id: str
    doc_id: str
    content_hash: str
    has_vector: bool
    row: Any = None


@dataclass(frozen=True)
class StoredDocument:
    """A stored document's fields as written (title, metadata JSON, table-of-contents JSON) and the backend's row."""

    fields: tuple[str, str, str]
    row: Any = None


class RowStore(Protocol):
    """What the write rules need from a backend, inside its write batch."""

    def stored_documents(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """The stored documents among ``doc_ids``."""
        ...

    def passages_of_documents(self, doc_ids: Sequence[str]) -> list[StoredPassage]:
        """Every stored passage of these documents."""
        ...

    def passages_by_id(self, passage_ids: Sequence[str], *, other_than: str | None = None) -> list[StoredPassage]:
        """The stored passages with these ids (``other_than``: only those of another document than that one)."""
        ...

    def document_changed(self, doc_id: str) -> None:
        """Note that a document's fields changed (its extensions hear of it at the commit)."""
        ...

    def put_document(self, doc_id: str, fields: tuple[str, str, str], stored: StoredDocument | None) -> None:
        """Write a document's fields (``stored``: its stored row, or ``None`` for a new document)."""
        ...

    def name_documents(self, titles: Mapping[str, str]) -> None:
        """Create the documents among ``titles`` (doc id → title) that are not stored, in that order."""
        ...

    def insert_passages(self, passages: Sequence[Passage], vectors: Sequence[np.ndarray | None]) -> None:
        """Insert new passages with their vectors (``None``: none), telling the extensions."""
        ...

    def retire_passages(self, stored: Sequence[StoredPassage]) -> int:
        """Delete stored passages, telling the extensions (their documents stay); returns how many."""
        ...

    def rewrite_passages(self, pairs: Sequence[tuple[StoredPassage, Passage]]) -> None:
        """Store the fields of passages kept with their vectors (same content hash: position, text, metadata...)."""
        ...

    def drop_empty_documents(self, doc_ids: Iterable[str]) -> None:
        """Delete those of these documents that have no passage left."""
        ...


def check_documents(documents: Iterable[Document], policy: Any) -> list[Document]:
    """The documents of a write as a list, checked (type, id, no id twice) with the policy.

    Raises:
        ValueError: An unknown policy.
        TypeError: A single document, or something that is not a :class:`Document`.
        DuplicateIdError: A document id appears twice.

    """
    _policy(policy)
    if isinstance(documents, Document):
        raise TypeError("add_documents() takes a list of Documents, not a single Document")
    docs = list(documents)
    seen: set[str] = set()
    for d in docs:
        if not isinstance(d, Document):
            raise TypeError(f"add_documents() takes Document objects, got {type(d).__name__}")
        _check_id(d.doc_id, "document id")  # (a Document checked its id when it was built)
        if d.doc_id in seen:
            raise DuplicateIdError(f"document id {d.doc_id!r} appears twice in the input")
        seen.add(d.doc_id)
    return docs


def write_documents(
    rows: RowStore,
    docs: Sequence[Document],
    *,
    corpus: Mapping[str, Any],
    max_passage_words: int | None,
    policy: WritePolicy,
    show_progress_bar: bool,
    encode: bool,
    encoder: Callable[[str], DenseEncoder],
) -> WriteSummary:
    """Split, encode what changed and store checked documents (see :meth:`HierStore.add_documents`).

    A stored passage whose id and content hash come back keeps its vector (its other fields are rewritten);
    the document's other stored passages are retired, and the new ones encoded (``encode``) and inserted.
    """
    if max_passage_words is None:
        max_passage_words = int(corpus.get("max_passage_words", 100))
    existing = rows.stored_documents([d.doc_id for d in docs])
    if policy == "fail" and existing:
        raise DuplicateIdError(f"{len(existing)} document(s) already stored, e.g. {sorted(existing)[0]!r}")
    held: dict[str, list[StoredPassage]] = {}
    for s in rows.passages_of_documents([d.doc_id for d in docs]):
        held.setdefault(s.doc_id, []).append(s)
    added = updated = unchanged = skipped = empty = removed = kept = 0
    new_passages: list[Passage] = []
    rewrite: list[tuple[StoredPassage, Passage]] = []
    for d in docs:
        if d.doc_id in existing and policy == "skip":
            skipped += 1
            continue
        check_json(d.metadata, f"metadata of document {d.doc_id!r}")
        passages = split_document(d, max_passage_words)
        if not passages:
            empty += 1
        _check_collisions(rows, d.doc_id, passages)
        fields = (d.title, dumps(dict(d.metadata)), dumps(d.table_of_contents()))
        old_doc = existing.get(d.doc_id)
        if old_doc is None or old_doc.fields != fields:
            rows.document_changed(d.doc_id)
        rows.put_document(d.doc_id, fields, old_doc)
        stored = held.get(d.doc_id, [])
        old = {s.passage_id: s for s in stored if s.has_vector or not encode}
        stale = {s.rowid: s for s in stored}
        changed = False
        for p in passages:
            prev = old.get(p.id)
            if prev is not None and prev.content_hash == hash_text(p.embedding_text):
                stale.pop(prev.rowid, None)
                rewrite.append((prev, p))
                kept += 1
            else:
                new_passages.append(p)
                changed = True
        if stale:
            changed = True
            # the document row stays: its replacement passages are inserted below
            removed += rows.retire_passages([stale[r] for r in sorted(stale)])
        if d.doc_id not in existing:
            added += 1
        elif changed:
            updated += 1
        else:
            unchanged += 1
    rows.rewrite_passages(rewrite)
    vectors = None
    if new_passages and encode:
        vectors = encoder("add_documents()").encode_documents(
            [p.embedding_text for p in new_passages], show_progress_bar=show_progress_bar
        )
    rows.insert_passages(new_passages, list(vectors) if vectors is not None else [None] * len(new_passages))
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


def _check_collisions(rows: RowStore, doc_id: str, passages: Sequence[Passage]) -> None:
    """A passage id of this document that another document already holds is an error, not an overwrite."""
    if not passages:
        return
    taken = rows.passages_by_id([p.id for p in passages], other_than=doc_id)
    if taken:
        raise DuplicateIdError(
            f"passage id {taken[0].passage_id!r} of document {doc_id!r} is already stored as a passage of "
            f"document {taken[0].doc_id!r}"
        )


def check_passages(
    passages: Sequence[Passage],
    embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None,
    *,
    policy: Any,
    encode_missing: bool | None,
    dimension: int | None,
    where: Any,
    has_encoder: Callable[[], bool],
) -> tuple[list[Passage], list[np.ndarray | None], bool]:
    """The passages and vectors of a write, checked and de-duplicated, and whether to encode those without one.

    Within the input the last occurrence of an id wins (the first under ``"skip"``). ``encode_missing`` defaults
    to: no ``embeddings`` given and ``has_encoder()``.

    Raises:
        ValueError: An unknown policy.
        TypeError: A single passage, or something that is not a :class:`Passage`.
        StoreError: A bad id, or metadata / extra that is not JSON.
        InvalidInputError: Embeddings that are not one finite real vector per passage.
        DimensionMismatchError: Embeddings of another dimension than ``dimension``.

    """
    _policy(policy)
    if isinstance(passages, Passage):
        raise TypeError("add_passages() takes a list of Passages, not a single Passage")
    items = list(passages)
    for p in items:
        if not isinstance(p, Passage):
            raise TypeError(f"add_passages() takes Passage objects, got {type(p).__name__}")
        _check_id(p.id, "passage id")
        _check_id(p.doc_id, f"document id of passage {p.id!r}")
        check_json(p.meta, f"metadata of passage {p.id!r}")
        check_json(p.extra, f"extra of passage {p.id!r}")
    vecs = normalize_embeddings(embeddings, len(items), dimension, where)
    if encode_missing is None:
        encode_missing = embeddings is None and has_encoder()
    order: dict[str, int] = {}  # de-duplicate within the input: the last occurrence wins (the first under skip)
    for i, p in enumerate(items):
        if policy == "skip" and p.id in order:
            continue
        order[p.id] = i
    idx = sorted(order.values())
    return [items[i] for i in idx], [vecs[i] for i in idx], encode_missing


def write_passages(
    rows: RowStore,
    items: Sequence[Passage],
    vecs: Sequence[np.ndarray | None],
    *,
    policy: WritePolicy,
    encode_missing: bool,
    allow_moves: bool,
    encoder: Callable[[str], DenseEncoder],
) -> WriteSummary:
    """Store checked passages as given (see :meth:`HierStore.add_passages`); documents are created as needed."""
    items, vecs = list(items), list(vecs)
    stored = rows.passages_by_id([p.id for p in items])
    if policy == "upsert" and not allow_moves:
        check_passage_owners(items, {s.passage_id: s.doc_id for s in stored})
    if policy == "fail" and stored:
        raise DuplicateIdError(f"passage id {sorted(s.passage_id for s in stored)[0]!r} is already stored")
    if policy == "skip":
        have = {s.passage_id for s in stored}
        keep = [i for i, p in enumerate(items) if p.id not in have]
        items, vecs = [items[i] for i in keep], [vecs[i] for i in keep]
        stored = []
    if encode_missing:
        todo = [i for i, v in enumerate(vecs) if v is None]
        if todo:
            enc = encoder("encoding passages").encode_documents([items[i].embedding_text for i in todo])
            for j, i in enumerate(todo):
                vecs[i] = enc[j]
    removed = rows.retire_passages(stored)
    titles: dict[str, str] = {}  # the first passage of a new document names it
    for p in items:
        if p.doc_id not in titles:
            titles[p.doc_id] = p.title_path[0] if p.title_path else ""
    rows.name_documents(titles)
    rows.insert_passages(items, vecs)
    rows.drop_empty_documents({s.doc_id for s in stored})
    return WriteSummary(
        passages_added=len(items),
        passages_removed=removed,
        encoded=sum(1 for v in vecs if v is not None) if encode_missing else 0,
    )


# -- the local store's rows -------------------------------------------------------------------------
class Writer:
    """The write operations of one store handle over its core (called by :class:`~rag_hier.store.HierStore`).

    Its rows are the :class:`RowStore` the write rules (:func:`write_documents`, :func:`write_passages`) run on.

    Args:
        core: The shared core (a write batch must be open).
        store: The handle, passed to extension hooks.
        encoder: Returns the handle's checked encoder, or raises naming the operation that needs one.

    """

    def __init__(self, core: StoreCore, store: StoreBackend, encoder: Callable[[str], DenseEncoder]) -> None:
        self.core = core
        self.store = store
        self.encoder = encoder

    @property
    def db(self) -> Any:
        """The core's SQLite connection."""
        return self.core.db

    # -- the passage index --------------------------------------------------------------------------
    def ensure_index(self, dimension: int) -> DenseIndex:
        """The passage index, created (and the store's dimension fixed) by the first vectors."""
        state = self.core.state
        if state.get("dimension") is None:
            state["dimension"] = dimension
        elif dimension != state["dimension"]:
            raise DimensionMismatchError(
                f"got {dimension}-d vectors; the store at {self.core.root} holds {state['dimension']}-d"
            )
        index = self.core.indexes.get("dense")
        if index is None:
            index = DenseIndex(dimension, self.core.index_config)
            self.core.indexes["dense"] = index
            self.core.dirty.add("dense")
        return index

    # -- documents and passages: the rules over this store's rows ------------------------------------
    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None,
        policy: WritePolicy,
        show_progress_bar: bool,
        encode: bool,
    ) -> WriteSummary:
        """See :meth:`HierStore.add_documents`."""
        docs = check_documents(documents, policy)
        return write_documents(
            self,
            docs,
            corpus=self.core.state.get("corpus", {}),
            max_passage_words=max_passage_words,
            policy=policy,
            show_progress_bar=show_progress_bar,
            encode=encode,
            encoder=self.encoder,
        )

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None,
        *,
        policy: WritePolicy,
        encode_missing: bool | None,
        allow_moves: bool = False,
    ) -> WriteSummary:
        """See :meth:`HierStore.add_passages`."""
        items, vecs, encode = check_passages(
            passages,
            embeddings,
            policy=policy,
            encode_missing=encode_missing,
            dimension=self.core.state.get("dimension"),
            where=self.core.root,
            has_encoder=lambda: self.store.encoder is not None,
        )
        return write_passages(
            self, items, vecs, policy=policy, encode_missing=encode, allow_moves=allow_moves, encoder=self.encoder
        )

    # -- the RowStore of the write rules -------------------------------------------------------------
    def stored_documents(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """The stored documents among ``doc_ids``."""
        rows = query_in(self.db, "SELECT doc_id, title, meta, toc FROM documents WHERE doc_id IN ({marks})", doc_ids)
        return {doc_id: StoredDocument((title, meta, toc)) for doc_id, title, meta, toc in rows}

    def passages_of_documents(self, doc_ids: Sequence[str]) -> list[StoredPassage]:
        """Every stored passage of these documents."""
        return self._stored("doc_id IN ({marks})", doc_ids)

    def passages_by_id(self, passage_ids: Sequence[str], *, other_than: str | None = None) -> list[StoredPassage]:
        """The stored passages with these ids (``other_than``: only those of another document), by passage id."""
        if other_than is None:
            return self._stored("passage_id IN ({marks})", sorted(passage_ids))
        return self._stored("doc_id != ? AND passage_id IN ({marks})", passage_ids, (other_than,))

    def _stored(self, where: str, values: Sequence[Any], params: Sequence[Any] = ()) -> list[StoredPassage]:
        sql = f"SELECT id, passage_id, doc_id, content_hash, has_vector FROM passages WHERE {where}"
        return [StoredPassage(r, pid, doc, h, bool(v)) for r, pid, doc, h, v in query_in(self.db, sql, values, params)]

    def document_changed(self, doc_id: str) -> None:
        """Note that a document's fields changed."""
        self.core.changed_docs.add(doc_id)

    def put_document(self, doc_id: str, fields: tuple[str, str, str], stored: StoredDocument | None) -> None:
        """Insert or update a document's row."""
        self.db.execute(
            "INSERT INTO documents(doc_id, title, meta, toc) VALUES (?,?,?,?) ON CONFLICT(doc_id) DO "
            "UPDATE SET title=excluded.title, meta=excluded.meta, toc=excluded.toc",
            (doc_id, *fields),
        )

    def name_documents(self, titles: Mapping[str, str]) -> None:
        """Insert the documents among ``titles`` that are not stored."""
        self.db.executemany(
            "INSERT INTO documents(doc_id, title) VALUES (?, ?) ON CONFLICT(doc_id) DO NOTHING", titles.items()
        )

    def retire_passages(self, stored: Sequence[StoredPassage]) -> int:
        """Delete stored passages, keeping their documents; returns how many."""
        return self.delete_rowids([s.rowid for s in stored], drop_empty_documents=False)

    def rewrite_passages(self, pairs: Sequence[tuple[StoredPassage, Passage]]) -> None:
        """Store the fields of kept passages."""
        for s, p in pairs:
            self._update_passage_fields(s.rowid, p)

    def insert_passages(self, passages: Sequence[Passage], vectors: Sequence[np.ndarray | None] | np.ndarray) -> None:
        """Insert passages (ids not stored) with their vectors (``None``: no vector), telling the extensions."""
        if not passages:
            return
        vec_list = list(vectors)
        rows = []
        for p, v in zip(passages, vec_list, strict=True):
            blob = None
            if v is not None and v.dtype != np.float32:
                as64 = np.asarray(v, dtype=np.float64)
                if not np.array_equal(as64.astype(np.float32).astype(np.float64), as64):
                    blob = as64.astype("<f8").tobytes()
            rows.append(
                (
                    p.id,
                    p.doc_id,
                    int(p.position),
                    int(p.section),
                    dumps(list(p.title_path)) if p.title_path else "[]",
                    p.text,
                    dumps(dict(p.meta)) if p.meta else "{}",
                    dumps(dict(p.extra)) if p.extra else "{}",
                    hash_text(p.embedding_text),
                    int(v is not None),
                    blob,
                )
            )
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name='passages'").fetchone()
        first = (int(row[0]) if row else 0) + 1
        self.db.executemany(
            "INSERT INTO passages(passage_id, doc_id, position, section, title_path, text, meta, extra,"
            " content_hash, has_vector, exact_embedding) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        rowids = np.arange(first, first + len(rows), dtype=np.int64)
        self._reindex_meta(rowids.tolist())
        with_vec = [i for i, v in enumerate(vec_list) if v is not None]
        mat: np.ndarray | None = None
        if with_vec:
            mat = np.stack([np.asarray(vec_list[i], dtype=np.float32) for i in with_vec])
            self.ensure_index(int(mat.shape[1])).add(rowids[with_vec], mat)
            self.core.dirty.add("dense")
        self.core.changed_docs.update(p.doc_id for p in passages)
        for name, ext in self.core.extensions.items():
            ext.on_passages_added(self.store, rowids, passages, mat if len(with_vec) == len(passages) else None)
            self.core.dirty_ext.add(name)

    def _update_passage_fields(self, rowid: int, p: Passage) -> None:
        self.db.execute(
            "UPDATE passages SET position=?, section=?, title_path=?, text=?, meta=?, extra=? WHERE id=?",
            (
                p.position,
                p.section,
                dumps(list(p.title_path)),
                p.text,
                dumps(dict(p.meta)),
                dumps(dict(p.extra)),
                rowid,
            ),
        )
        self.core.changed_rows.add(rowid)
        self._reindex_meta([rowid])

    def _reindex_meta(self, rowids: Sequence[int]) -> None:
        """Bring the indexed metadata fields of these passages up to date (see :mod:`rag_hier.store.meta_index`)."""
        indexed = meta_index.fields(self.core.state, self.core.root)
        if indexed:
            meta_index.refresh(self.db, indexed, rowids)

    # -- deletes ------------------------------------------------------------------------------------
    def delete_rowids(self, rowids: Sequence[int], *, drop_empty_documents: bool = True) -> int:
        """Delete passages by rowid (from SQLite, the index and every extension); returns how many."""
        if not rowids:
            return 0
        db = self.db
        docs = query_in(db, "SELECT DISTINCT doc_id FROM passages WHERE id IN ({marks})", rowids)
        self.core.changed_docs.update(docs)
        with_vec = query_in(db, "SELECT id FROM passages WHERE has_vector=1 AND id IN ({marks})", rowids)
        query_in(db, "DELETE FROM passages WHERE id IN ({marks})", rowids)
        self.core.changed_rows.update(rowids)
        self._reindex_meta(rowids)
        index = self.core.indexes.get("dense")
        if with_vec and index is not None:
            index.remove(np.asarray(with_vec, dtype=np.int64))
            self.core.dirty.add("dense")
        removed = np.asarray(rowids, dtype=np.int64)
        for name, ext in self.core.extensions.items():
            ext.on_passages_removed(self.store, removed)
            self.core.dirty_ext.add(name)
        if drop_empty_documents:
            self.drop_empty_documents(docs)
        return len(rowids)

    def drop_empty_documents(self, doc_ids: Iterable[str]) -> None:
        """Delete the rows of these documents that have no passage left (a cost of the documents named, not of N)."""
        query_in(
            self.db,
            "DELETE FROM documents WHERE doc_id IN ({marks})"
            " AND NOT EXISTS (SELECT 1 FROM passages WHERE passages.doc_id = documents.doc_id)",
            sorted(set(doc_ids)),
        )

    def rowids_of_passages(self, passage_ids: Sequence[str]) -> list[int]:
        """Rowids of these passage ids (unknown ids are left out)."""
        return query_in(self.db, "SELECT id FROM passages WHERE passage_id IN ({marks})", passage_ids)

    def delete_documents(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (their rows too, even those without passages); returns passages deleted."""
        rowids = query_in(self.db, "SELECT id FROM passages WHERE doc_id IN ({marks})", doc_ids)
        n = self.delete_rowids(rowids)
        query_in(self.db, "DELETE FROM documents WHERE doc_id IN ({marks})", doc_ids)
        self.core.changed_docs.update(doc_ids)
        return n

    def delete_all(self, *, forget_dimension: bool = False) -> int:
        """Delete every passage and document; returns passages deleted.

        With ``forget_dimension`` (stores without an encoder), the vector dimension is forgotten too: the
        passage index is dropped and every extension rebuilt empty from its configuration (one whose build
        needs passages, like the cluster tree, is removed), so vectors of another size can be written next.
        """
        rowids = [r for (r,) in self.db.execute("SELECT id FROM passages")]
        n = self.delete_rowids(rowids)
        self.db.execute("DELETE FROM documents")
        if forget_dimension:
            if self.store.encoder is not None:
                raise StoreError(f"the store at {self.core.root} has an encoder: its dimension is that of the model")
            self.core.state["dimension"] = None
            self.core.indexes.pop("dense", None)
            self.core.dirty.discard("dense")
            for name, ext in list(self.core.extensions.items()):
                fresh = type(ext).from_config(ext.config())
                try:
                    fresh.build(self.store)
                except StoreError as exc:
                    logger.warning("%s: removing the %s extension (%s)", self.core.root, name, exc)
                    del self.core.extensions[name]
                    continue
                self.core.extensions[name] = fresh
                self.core.dirty_ext.add(name)
        return n

    # -- metadata -----------------------------------------------------------------------------------
    def update_meta(self, passage_ids: Sequence[str], meta: Mapping[str, Any], *, merge: bool) -> int:
        """Merge (or replace) passage metadata; returns how many passages were updated."""
        payload = dict(meta)
        check_json(payload, "meta")  # fail before changing anything
        updated = []
        for rowid, old in query_in(self.db, "SELECT id, meta FROM passages WHERE passage_id IN ({marks})", passage_ids):
            new = {**json.loads(old), **payload} if merge else payload
            self.db.execute("UPDATE passages SET meta=? WHERE id=?", (dumps(new), rowid))
            updated.append(rowid)
        self.core.changed_rows.update(updated)
        self._reindex_meta(updated)
        return len(updated)


def _sound_matrix(m: np.ndarray) -> bool:
    """Whether every row of a 2-D array passes the per-row checks of :func:`normalize_embeddings`."""
    if m.shape[1] == 0 or m.dtype == np.bool_ or np.iscomplexobj(m):
        return False
    if np.issubdtype(m.dtype, np.integer):
        return True
    if not np.issubdtype(m.dtype, np.floating) or not np.isfinite(m).all():
        return False
    return bool(np.abs(m).max(initial=0.0) <= np.finfo(np.float32).max)


def normalize_embeddings(
    embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None,
    n: int,
    dimension: int | None,
    where: Any,
) -> list[np.ndarray | None]:
    """One vector (or ``None``) per passage, checked: real finite numbers, one dimension, the store's."""
    if embeddings is None:
        return [None] * n
    if isinstance(embeddings, np.ndarray):
        if embeddings.ndim != 2 or embeddings.shape[0] != n:
            raise InvalidInputError(f"embeddings has shape {embeddings.shape}; expected ({n}, dimension)")
        if _sound_matrix(embeddings):  # the common bulk case, checked at once instead of row by row
            if n and dimension is not None and embeddings.shape[1] != dimension:
                raise DimensionMismatchError(
                    f"got {embeddings.shape[1]}-d embeddings; the store at {where} holds {dimension}-d"
                )
            return list(embeddings)
        rows: list[np.ndarray | None] = list(embeddings)
    else:
        if isinstance(embeddings, str | bytes):
            raise InvalidInputError("embeddings must be an array or a list of vectors")
        rows = []
        for i, e in enumerate(embeddings):
            try:
                rows.append(None if e is None else np.asarray(e))
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"embedding {i} is not a vector of numbers ({exc})") from exc
        if len(rows) != n:
            raise InvalidInputError(f"got {len(rows)} embeddings for {n} passages")
    for i, r in enumerate(rows):
        if r is None:
            continue
        if r.ndim != 1 or r.shape[0] == 0:
            raise InvalidInputError(f"embedding {i} is not a non-empty vector (shape {r.shape})")
        if np.iscomplexobj(r):
            raise InvalidInputError(f"embedding {i} holds complex numbers; vectors must be real")
        if not (np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.integer)) or r.dtype == np.bool_:
            raise InvalidInputError(f"embedding {i} is not a vector of numbers (dtype {r.dtype})")
        if not np.isfinite(r).all():
            raise InvalidInputError(f"embedding {i} contains NaN or infinite values")
        if np.issubdtype(r.dtype, np.floating) and np.abs(r).max(initial=0.0) > np.finfo(np.float32).max:
            raise InvalidInputError(f"embedding {i} holds values beyond float32's range")
    dims = {int(r.shape[0]) for r in rows if r is not None}
    if len(dims) > 1:
        raise DimensionMismatchError(f"embeddings of different dimensions in one write: {sorted(dims)}")
    if dims and dimension is not None and next(iter(dims)) != dimension:
        raise DimensionMismatchError(f"got {next(iter(dims))}-d embeddings; the store at {where} holds {dimension}-d")
    return rows


def check_passage_owners(passages: Sequence[Passage], owners: Mapping[str, str]) -> None:
    """An upserted passage must keep its document: a passage id another document holds is an error, not a move.

    Args:
        passages: The passages to write.
        owners: The stored document of each of their ids that is already stored.

    Raises:
        DuplicateIdError: A passage names another document than the stored passage of that id.

    """
    for p in passages:
        owner = owners.get(p.id)
        if owner is not None and owner != p.doc_id:
            raise DuplicateIdError(
                f"passage id {p.id!r} of document {p.doc_id!r} is already stored as a passage of document {owner!r} "
                "(delete it first to move it)"
            )
