"""Stored passages as typed records, and the reads that return them.

A :class:`PassageRecord` is what the store holds about one passage (text, document, position, title path,
metadata, extras, whether it has a dense vector) plus its *rowid*: the SQLite row id that is also its FAISS
id and is never reused. Filters see records through the mapping interface (``record["meta"]``,
``record.get("doc_id")``), with ``"content"`` as Haystack's name for the text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_hier.corpus.model import Passage
from rag_hier.store.schema import PASSAGE_COLUMNS, rows_in

__all__ = ["PassageRecord", "iter_records", "record_from_row", "records_by_rowid"]

_ALIASES = {"content": "text", "id": "passage_id", "_rowid": "rowid", "_has_vector": "has_vector"}
_KEYS = ("id", "doc_id", "content", "text", "position", "section", "title_path", "meta", "extra")


@dataclass(frozen=True, slots=True)
class PassageRecord:
    """One stored passage.

    Args:
        rowid: The passage's row id: its FAISS id, never reused after a delete.
        passage_id: The passage id (``<doc_id>#<n>`` or the id it was written with).
        doc_id: Its document's id.
        position: Its index within the document.
        section: Index of its section in the document (0: the lead paragraphs).
        title_path: Document title, then section titles.
        text: The passage text.
        meta: Its metadata.
        extra: Integration payloads kept with it (a framework's node or document fields).
        has_vector: Whether the dense index holds a vector for it.

    """

    rowid: int
    passage_id: str
    doc_id: str
    position: int
    section: int = 0
    title_path: tuple[str, ...] = ()
    text: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    has_vector: bool = False

    # -- the mapping view that filters and integrations read ------------------------------------------
    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, _ALIASES.get(key, key))
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        """Mapping-style access (``id``, ``doc_id``, ``content``/``text``, ``position``, ``meta``, ...)."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in _KEYS

    def keys(self) -> tuple[str, ...]:
        """The keys of the mapping view."""
        return _KEYS

    def to_passage(self) -> Passage:
        """The :class:`~rag_hier.corpus.model.Passage` this record stores (metadata copied)."""
        return Passage(
            id=self.passage_id,
            doc_id=self.doc_id,
            position=self.position,
            text=self.text,
            title_path=self.title_path,
            section=self.section,
            meta=dict(self.meta),
            extra=dict(self.extra),
        )

    @property
    def embedding_text(self) -> str:
        """The text its vector encodes (title path prefixed), as :attr:`Passage.embedding_text`."""
        return Passage(self.passage_id, self.doc_id, self.position, self.text, self.title_path).embedding_text


def record_from_row(row: Sequence[Any]) -> PassageRecord:
    """A record from a row of :data:`~rag_hier.store.schema.PASSAGE_COLUMNS`."""
    rowid, pid, doc_id, position, section, title_path, text, meta, extra, has_vector = row
    return PassageRecord(
        rowid,
        pid,
        doc_id,
        position,
        section,
        # most rows have no title path, metadata or extras: skip decoding the empty JSON literals
        () if title_path == "[]" else tuple(json.loads(title_path)),
        text,
        {} if meta == "{}" else json.loads(meta),
        {} if extra == "{}" else json.loads(extra),
        bool(has_vector),
    )


def iter_records(db: sqlite3.Connection, where: str = "", params: Sequence[Any] = ()) -> Iterator[PassageRecord]:
    """Records in insertion order (``where``: an SQL ``WHERE`` clause over the passages table)."""
    cur = db.execute(f"SELECT {PASSAGE_COLUMNS} FROM passages {where} ORDER BY id", tuple(params))
    while rows := cur.fetchmany(2048):
        for row in rows:
            yield record_from_row(row)


def records_by_rowid(db: sqlite3.Connection, rowids: Iterable[int]) -> dict[int, PassageRecord]:
    """Records by rowid (unknown and negative rowids are left out)."""
    ids = sorted({int(r) for r in rowids if r >= 0})
    return {
        row[0]: record_from_row(row)
        for row in rows_in(db, f"SELECT {PASSAGE_COLUMNS} FROM passages WHERE id IN ({{marks}})", ids)
    }
