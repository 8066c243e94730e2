"""The store's writes: documents and passages in, passages and documents out, metadata updates.

Every function here runs inside the core's write batch (:meth:`StoreCore.writing`): it changes SQLite rows,
the passage index and, through their hooks, the extensions; the batch commits all of it at once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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

__all__ = ["POLICIES", "WritePolicy", "WriteSummary", "Writer", "check_ids", "check_passage_owners"]


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


def _check_json(value: Mapping[str, Any], what: str) -> None:
    if not value:  # {} (most passages): nothing to check
        return
    if exceeds_depth(value, MAX_NESTING_DEPTH):
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


class Writer:
    """The write operations of one store handle over its core (called by :class:`~rag_hier.store.HierStore`).

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

    # -- documents ----------------------------------------------------------------------------------
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
        _policy(policy)
        if isinstance(documents, Document):
            raise TypeError("add_documents() takes a list of Documents, not a single Document")
        docs = list(documents)
        seen: set[str] = set()
        for d in docs:
            if not isinstance(d, Document):
                raise TypeError(f"add_documents() takes Document objects, got {type(d).__name__}")
            # a Document's id and metadata were checked when it was built (Document.__post_init__)
            if d.doc_id in seen:
                raise DuplicateIdError(f"document id {d.doc_id!r} appears twice in the input")
            seen.add(d.doc_id)
        if max_passage_words is None:
            max_passage_words = int(self.core.state.get("corpus", {}).get("max_passage_words", 100))
        db = self.db
        existing = set(query_in(db, "SELECT doc_id FROM documents WHERE doc_id IN ({marks})", [d.doc_id for d in docs]))
        if policy == "fail" and existing:
            raise DuplicateIdError(f"{len(existing)} document(s) already stored, e.g. {sorted(existing)[0]!r}")
        added = updated = unchanged = skipped = empty = removed = kept = 0
        new_passages: list[Passage] = []
        for d in docs:
            if d.doc_id in existing and policy == "skip":
                skipped += 1
                continue
            passages = split_document(d, max_passage_words)
            if not passages:
                empty += 1
            self._check_collisions(d.doc_id, passages)
            fields = (d.title, dumps(dict(d.metadata)), dumps(d.table_of_contents()))
            before = db.execute("SELECT title, meta, toc FROM documents WHERE doc_id=?", (d.doc_id,)).fetchone()
            if before != fields:
                self.core.changed_docs.add(d.doc_id)
            db.execute(
                "INSERT INTO documents(doc_id, title, meta, toc) VALUES (?,?,?,?) ON CONFLICT(doc_id) DO "
                "UPDATE SET title=excluded.title, meta=excluded.meta, toc=excluded.toc",
                (d.doc_id, *fields),
            )
            old = {
                pid: (rowid, h)
                for rowid, pid, h in db.execute(
                    "SELECT id, passage_id, content_hash FROM passages WHERE doc_id=?"
                    + (" AND has_vector=1" if encode else ""),
                    (d.doc_id,),
                )
            }
            stale = {r for (r,) in db.execute("SELECT id FROM passages WHERE doc_id=?", (d.doc_id,))}
            changed = False
            for p in passages:
                prev = old.get(p.id)
                if prev is not None and prev[1] == hash_text(p.embedding_text):
                    stale.discard(prev[0])
                    self._update_passage_fields(prev[0], p)
                    kept += 1
                else:
                    new_passages.append(p)
                    changed = True
            if stale:
                changed = True
                # the document row stays: its replacement passages are inserted below
                removed += self.delete_rowids(sorted(stale), drop_empty_documents=False)
            if d.doc_id not in existing:
                added += 1
            elif changed:
                updated += 1
            else:
                unchanged += 1
        vectors = None
        if new_passages and encode:
            vectors = self.encoder("add_documents()").encode_documents(
                [p.embedding_text for p in new_passages], show_progress_bar=show_progress_bar
            )
        self.insert_passages(new_passages, vectors if vectors is not None else [None] * len(new_passages))
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

    def _check_collisions(self, doc_id: str, passages: Sequence[Passage]) -> None:
        """A passage id of this document that another document already holds is an error, not an overwrite."""
        taken = query_in(
            self.db,
            "SELECT passage_id, doc_id FROM passages WHERE doc_id != ? AND passage_id IN ({marks})",
            [p.id for p in passages],
            params=(doc_id,),
        )
        if taken:
            pid, owner = taken[0]
            raise DuplicateIdError(
                f"passage id {pid!r} of document {doc_id!r} is already stored as a passage of document {owner!r}"
            )

    # -- passages -----------------------------------------------------------------------------------
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
        _policy(policy)
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
        vecs = normalize_embeddings(embeddings, len(items), self.core.state.get("dimension"), self.core.root)
        if encode_missing is None:
            encode_missing = embeddings is None and self.store.encoder is not None
        order: dict[str, int] = {}  # de-duplicate within the input: the last occurrence wins (the first under skip)
        for i, p in enumerate(items):
            if policy == "skip" and p.id in order:
                continue
            order[p.id] = i
        idx = sorted(order.values())
        items = [items[i] for i in idx]
        vecs = [vecs[i] for i in idx]
        db = self.db
        owners = dict(
            query_in(db, "SELECT passage_id, doc_id FROM passages WHERE passage_id IN ({marks})", [p.id for p in items])
        )
        stored = set(owners)
        if policy == "upsert" and not allow_moves:
            check_passage_owners(items, owners)
        if policy == "fail" and stored:
            raise DuplicateIdError(f"passage id {sorted(stored)[0]!r} is already stored")
        if policy == "skip":
            keep = [i for i, p in enumerate(items) if p.id not in stored]
            items, vecs = [items[i] for i in keep], [vecs[i] for i in keep]
            stored = set()
        if encode_missing:
            todo = [i for i, v in enumerate(vecs) if v is None]
            if todo:
                enc = self.encoder("encoding passages").encode_documents([items[i].embedding_text for i in todo])
                for j, i in enumerate(todo):
                    vecs[i] = enc[j]
        removed = 0
        replaced: set[str] = set()
        if stored:
            rows = query_in(db, "SELECT id, doc_id FROM passages WHERE passage_id IN ({marks})", sorted(stored))
            replaced = {doc for _, doc in rows}
            removed = self.delete_rowids([rowid for rowid, _ in rows], drop_empty_documents=False)
        first_title: dict[str, str] = {}  # the first passage of a new document names it
        for p in items:
            if p.doc_id not in first_title:
                first_title[p.doc_id] = p.title_path[0] if p.title_path else ""
        db.executemany(
            "INSERT INTO documents(doc_id, title) VALUES (?, ?) ON CONFLICT(doc_id) DO NOTHING", first_title.items()
        )
        self.insert_passages(items, vecs)
        self.drop_empty_documents(replaced)
        return WriteSummary(
            passages_added=len(items),
            passages_removed=removed,
            encoded=sum(1 for v in vecs if v is not None) if encode_missing else 0,
        )

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
        _check_json(payload, "meta")  # fail before changing anything
        updated = []
        for rowid, old in query_in(self.db, "SELECT id, meta FROM passages WHERE passage_id IN ({marks})", passage_ids):
            new = {**json.loads(old), **payload} if merge else payload
            self.db.execute("UPDATE passages SET meta=? WHERE id=?", (dumps(new), rowid))
            updated.append(rowid)
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
