"""Stored passages as typed records, the reads that return them, and search results (:class:`Hit`).

A :class:`PassageRecord` is what the store holds about one passage (text, document, position, title path,
metadata, extras, whether it has a dense vector) plus its *rowid*: the SQLite row id that is also its FAISS
id and is never reused. Filters see records through the mapping interface (``record["meta"]``,
``record.get("doc_id")``), with ``"content"`` as Haystack's name for the text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from rag_hier.corpus.model import Passage
from rag_hier.store.schema import CHUNK, PASSAGE_COLUMNS, rows_in

__all__ = [
    "POLICIES",
    "Hit",
    "ModelSwitch",
    "PassageRecord",
    "QueryResult",
    "SwitchDirection",
    "WritePolicy",
    "WriteSummary",
    "hit_rows",
    "iter_records",
    "new_hit",
    "record_from_row",
    "records_by_rowid",
]

WritePolicy = Literal["upsert", "skip", "fail"]
"""What a write does with ids already stored: replace them, keep them, or fail."""
POLICIES: tuple[str, ...] = ("upsert", "skip", "fail")

_ALIASES = {"content": "text", "id": "passage_id"}
_KEYS = ("id", "doc_id", "content", "text", "position", "section", "title_path", "meta", "extra")
"""The mapping view's keys (``content`` is Haystack's name for the text)."""


@dataclass(frozen=True, slots=True)
class PassageRecord(Mapping[str, Any]):
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
        if key not in _KEYS:
            raise KeyError(key)
        return getattr(self, _ALIASES.get(key, key))

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)

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


# ----------------------------------------------------------------------------------------------------
# search results: one Hit type for every strategy
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hit:
    """One ranked result.

    Args:
        passage_id: ``<doc_id>#<n>`` (or the id the passage was written with).
        doc_id: The parent document's id.
        text: The passage text.
        title_path: Document title, then section titles.
        meta: The passage's metadata.
        score: The ranking score (higher is better).
        rank: 1-based rank in its result list.
        position: The passage's index within its document.
        scores: Component scores of strategies that combine several; the keys are documented per
            strategy (``hierarchical``: ``passage``, ``document``, ``fused``; ``svdr-*``: ``beta``, ``rerank``,
            ``full``, ``alpha``, ``lexical``; ``fusion``: the component strategies' names and ``fused``).
            Empty for single-score strategies (``dense``, ``tree``).
        rowid: The passage's store rowid (its FAISS id, never reused).
        extra: Integration payloads stored with the passage (a framework's node or document fields).

    """

    passage_id: str
    doc_id: str
    text: str
    title_path: tuple[str, ...]
    meta: Mapping[str, Any]
    score: float
    rank: int
    position: int = 0
    scores: Mapping[str, float] = field(default_factory=dict)
    rowid: int = -1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def with_rank(self, rank: int) -> Hit:
        """The same hit at another rank."""
        return replace(self, rank=rank)

    def json_text(self, name: str) -> str | None:
        """The stored JSON text of ``title_path``, ``meta`` or ``extra`` while it is still undecoded, else ``None``.

        Lets an adapter recognise a value it wrote (e.g. an empty payload of its own) without decoding it.
        """
        key = _RAW.get(name)
        if key is None:
            raise ValueError(f"json_text names title_path, meta or extra, got {name!r}")
        raw = self.__dict__.get(key)
        return raw if isinstance(raw, str) else None

    if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt attribute stays an error

        def __getattr__(self, name: str) -> Any:
            # Hits built from a store row (new_hit) keep the JSON columns undecoded until first read.
            # The raw text is dropped only after the value is stored, so a thread reading the same hit
            # concurrently finds one or the other.
            d = self.__dict__
            key = _RAW.get(name)
            raw = d.get(key, _NO_RAW) if key is not None else _NO_RAW
            if raw is _NO_RAW:
                if name in d:  # decoded by another thread meanwhile
                    return d[name]
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            value = tuple(json.loads(raw)) if name == "title_path" else json.loads(raw)
            d[name] = value
            d.pop(key, None)
            return value


_RAW = {"title_path": "_raw_title_path", "meta": "_raw_meta", "extra": "_raw_extra"}
_NO_RAW = object()
_new = object.__new__

HIT_COLUMNS = "id, passage_id, doc_id, text, title_path, meta, position, extra"
"""The columns a :class:`Hit` is built from (:func:`hit_rows`, :func:`new_hit`)."""


def new_hit(row: Sequence[Any], score: float, rank: int, scores: Mapping[str, float] | None = None) -> Hit:
    """A :class:`Hit` from a row of :data:`HIT_COLUMNS`, built without an intermediate record.

    The JSON columns (title path, metadata, extras) are decoded on first access; the empty literals most rows
    hold are not decoded at all.
    """
    rowid, pid, doc_id, text, title_path, meta, position, extra = row
    h = _new(Hit)
    d = h.__dict__
    d["passage_id"] = pid
    d["doc_id"] = doc_id
    d["text"] = text
    if title_path == "[]":
        d["title_path"] = ()
    else:
        d["_raw_title_path"] = title_path
    if meta == "{}":
        d["meta"] = {}
    else:
        d["_raw_meta"] = meta
    d["score"] = score
    d["rank"] = rank
    d["position"] = position
    d["scores"] = {} if scores is None else scores
    d["rowid"] = rowid
    if extra == "{}":
        d["extra"] = {}
    else:
        d["_raw_extra"] = extra
    return h


def hit_rows(db: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """Rows of :data:`HIT_COLUMNS` by rowid, read with one statement per 900 ids (unknown rowids left out)."""
    ids = [r for r in rowids if r >= 0]
    if len(ids) <= CHUNK:
        if not ids:
            return {}
        cur = db.execute(f"SELECT {HIT_COLUMNS} FROM passages WHERE id IN ({','.join('?' * len(ids))})", ids)
        return {row[0]: row for row in cur}
    return {row[0]: row for row in rows_in(db, f"SELECT {HIT_COLUMNS} FROM passages WHERE id IN ({{marks}})", ids)}


def hit_rows_if_current(db: sqlite3.Connection, rowids: Sequence[int], token: str) -> dict[int, tuple[Any, ...]] | None:
    """:func:`hit_rows` in one statement that also checks the stored state is ``token`` (see ``StoreCore.state_token``).

    ``None`` (the caller reads again within a read transaction) when it is not, when a rowid has no row (both
    mean another process committed since the caller's index was loaded), or when there is nothing to check.
    """
    ids = list(dict.fromkeys(r for r in rowids if r >= 0))
    if not ids:
        return None
    # every statement (one per chunk) checks the token: all of them read the token's generation
    n = len(ids)
    if n <= CHUNK:  # the search path: one statement, its text kept per number of ids
        sql = _IF_CURRENT_SQL.get(n)
        if sql is None:
            sql = _IF_CURRENT_SQL.setdefault(n, _IF_CURRENT.format(marks=",".join("?" * n)))
        rows = db.execute(sql, (token, *ids)).fetchall()
    else:
        rows = list(rows_in(db, _IF_CURRENT, ids, (token,)))
    if len(rows) != n or not all(row[-1] == 1 for row in rows):
        return None
    return {row[0]: row[:-1] for row in rows}


_IF_CURRENT = (
    f"SELECT {HIT_COLUMNS}, (SELECT value FROM state WHERE key='manifest') = ? FROM passages WHERE id IN ({{marks}})"
)
_IF_CURRENT_SQL: dict[int, str] = {}


@dataclass(frozen=True)
class QueryResult:
    """One query's ranked hits and what the search measured.

    Args:
        hits: Ranked hits.
        stats: Per-query facts a strategy reports (documented per strategy), e.g. ``passages_scored`` and
            ``fraction_scored`` (tree: the passages whose vectors were compared with the query, and their share
            of the collection) or ``documents_searched`` (hierarchical).

    """

    hits: list[Hit]
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteSummary:
    """What a write changed.

    Args:
        documents_added: Documents that were new.
        documents_updated: Stored documents whose passages changed.
        documents_unchanged: Stored documents written again as they were.
        documents_skipped: Stored documents left alone (``policy="skip"``).
        documents_empty: Documents that yielded no passage (no text): stored with their title and metadata only.
        passages_added: Passages inserted (new or replacing changed ones).
        passages_removed: Passages deleted (replaced or vanished).
        passages_unchanged: Passages kept with their vectors (not re-encoded).
        encoded: Passages encoded by the store's model.

    """

    documents_added: int = 0
    documents_updated: int = 0
    documents_unchanged: int = 0
    documents_skipped: int = 0
    documents_empty: int = 0
    passages_added: int = 0
    passages_removed: int = 0
    passages_unchanged: int = 0
    encoded: int = 0


SwitchDirection = Literal["back", "forward", "original"]
"""Which way a rollback went: to the model before the last switch, to the one a rollback left, or to the first."""


@dataclass(frozen=True)
class ModelSwitch:
    """What a rollback (``store.rollback_model()``, ``rag-hier tune --rollback``) switched, once committed.

    ``str(switch)`` is the line ``rag-hier tune --rollback`` prints.

    Args:
        generation: The store's generation (its count of commits) that the switch committed.
        model: The model the store encodes with now (a path, a name, or ``models/<name>`` inside the store).
        previous: The model it left, which a further ``rollback_model()`` returns to.
        direction: ``"back"``: to the model used before the last switch; ``"forward"``: to a newer model that an
            earlier rollback left; ``"original"``: to the model the store was built with (``to="original"``).

    """

    generation: int
    model: str
    previous: str
    direction: SwitchDirection

    def __str__(self) -> str:
        verb = {
            "back": "rolled back",
            "forward": "rolled forward",
            "original": "rolled back to the model the store was built with",
        }[self.direction]
        return f"{verb}: the store encodes with {self.model} (was {self.previous}); generation {self.generation}"
