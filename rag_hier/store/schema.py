"""The store's SQLite schema, the check that a database holds exactly that schema, and the one chunked ``IN`` helper.

A store's ``store.sqlite`` may come from a stranger: before anything is read or written, :func:`check_schema`
compares every object in ``sqlite_master`` with the objects this schema defines, so a trigger, view or extra
table planted in the file is refused (a trigger would otherwise run silently on the next write).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rag_hier.errors import StoreCorruptedError

__all__ = [
    "EXTENSION_SEGMENTS_SCHEMA",
    "INCREMENTAL_SCHEMA",
    "OPTIONAL_OBJECTS",
    "PASSAGE_COLUMNS",
    "SCHEMA",
    "VECTOR_ROWIDS_SCHEMA",
    "check_schema",
    "dumps",
    "ensure_incremental_schema",
    "has_incremental_schema",
    "hash_text",
    "query_in",
    "rows_in",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}',
    toc TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    passage_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    section INTEGER NOT NULL DEFAULT 0,
    title_path TEXT NOT NULL DEFAULT '[]',
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    content_hash TEXT NOT NULL,
    has_vector INTEGER NOT NULL DEFAULT 0,
    exact_embedding BLOB
);
CREATE INDEX IF NOT EXISTS passages_by_doc ON passages(doc_id, position);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

INCREMENTAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS dense_segments (
    generation INTEGER PRIMARY KEY,
    added INTEGER NOT NULL,
    removed INTEGER NOT NULL,
    ids BLOB NOT NULL,
    vectors BLOB NOT NULL,
    removed_ids BLOB NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS row_counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS count_documents_insert AFTER INSERT ON documents BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'documents';
END;
CREATE TRIGGER IF NOT EXISTS count_documents_delete AFTER DELETE ON documents BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'documents';
END;
CREATE TRIGGER IF NOT EXISTS count_passages_insert AFTER INSERT ON passages BEGIN
    UPDATE row_counts SET n = n + 1 WHERE name = 'passages';
    UPDATE row_counts SET n = n + NEW.has_vector WHERE name = 'vectors';
END;
CREATE TRIGGER IF NOT EXISTS count_passages_delete AFTER DELETE ON passages BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'passages';
    UPDATE row_counts SET n = n - OLD.has_vector WHERE name = 'vectors';
END;
CREATE TRIGGER IF NOT EXISTS count_vectors_update AFTER UPDATE OF has_vector ON passages BEGIN
    UPDATE row_counts SET n = n + NEW.has_vector - OLD.has_vector WHERE name = 'vectors';
END;
"""
"""What makes a write cost what it changes (stores written before it existed get it with their next write).

``dense_segments``: the changes to the passage index committed since ``dense.faiss`` was last written whole,
one row per commit (added ids and float32 vectors, removed ids, a SHA-256 over the three); merged into
``dense.faiss`` when they grow past a fraction of it, or on ``HierStore.optimize()``. ``row_counts``: the
committed row counts, kept exact by the triggers, so a commit never counts every row.
"""

EXTENSION_SEGMENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS extension_segments (
    extension TEXT NOT NULL,
    generation INTEGER NOT NULL,
    entries INTEGER NOT NULL,
    layout TEXT NOT NULL,
    data BLOB NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (extension, generation)
);
"""
"""The changes of store extensions committed since their files were last written whole, one row per extension
and commit (:func:`rag_hier.store.segments.read_extension_segments`). A group of its own: stores written with
:data:`INCREMENTAL_SCHEMA` but before this table existed get it with their next write."""

VECTOR_ROWIDS_SCHEMA = """
CREATE INDEX IF NOT EXISTS passages_with_vector ON passages(id, has_vector) WHERE has_vector=1;
"""
"""An index of the rowids of the passages with a vector: opening a store reads them from it (a few bytes a passage)
instead of scanning the passages table, text and all. Partial (only the passages with a vector) and led by the rowid,
so that the query planner never takes it for a selective index on ``has_vector``: it serves the queries that need
every passage with a vector. Stores written before it existed get it with their next write; until then, open reads
the table."""

_GROUPS = (INCREMENTAL_SCHEMA, EXTENSION_SEGMENTS_SCHEMA, VECTOR_ROWIDS_SCHEMA)
"""The schema added after the first format, in the order it was added; each group is all there or absent."""

OPTIONAL_OBJECTS: dict[tuple[str, str], str] = {
    ("table", "meta_index"): "CREATE TABLE meta_index (field TEXT NOT NULL, value, passage INTEGER NOT NULL)",
    ("index", "meta_index_by_value"): "CREATE INDEX meta_index_by_value ON meta_index(field, value, passage)",
    ("index", "meta_index_by_passage"): "CREATE INDEX meta_index_by_passage ON meta_index(passage)",
}
"""Objects a store holds once a metadata field is indexed (:mod:`rag_hier.store.meta_index`), as created."""

PASSAGE_COLUMNS = "id, passage_id, doc_id, position, section, title_path, text, meta, extra, has_vector"
"""The columns a :class:`~rag_hier.store.records.PassageRecord` is read from, in its field order."""

CHUNK = 900
"""Values per ``IN (...)`` list (under SQLite's historical limit of 999 host parameters)."""

_EXPECTED: dict[tuple[str, str], str | None] | None = None
_GROUP_OBJECTS: list[set[tuple[str, str]]] | None = None


def _normalized(sql: str | None) -> str | None:
    return None if sql is None else " ".join(sql.replace("IF NOT EXISTS ", "").split())


def _expected_objects() -> dict[tuple[str, str], str | None]:
    """``(type, name) -> normalized SQL`` of every object :data:`SCHEMA` creates (SQLite's own included)."""
    global _EXPECTED
    if _EXPECTED is None:
        mem = sqlite3.connect(":memory:")
        try:
            mem.executescript(SCHEMA)
            groups: list[set[tuple[str, str]]] = []
            for script in _GROUPS:
                before = {(t, n) for t, n in mem.execute("SELECT type, name FROM sqlite_master")}
                mem.executescript(script)
                groups.append({(t, n) for t, n in mem.execute("SELECT type, name FROM sqlite_master")} - before)
            # sqlite_sequence appears with the first AUTOINCREMENT insert
            mem.execute(
                "INSERT INTO passages(passage_id, doc_id, position, text, content_hash) VALUES ('', '', 0, '', '')"
            )
            rows = mem.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        finally:
            mem.close()
        _EXPECTED = {(t, n): _normalized(s) for t, n, s in rows}
        global _GROUP_OBJECTS
        _GROUP_OBJECTS = groups
    return _EXPECTED


def _group_objects() -> list[set[tuple[str, str]]]:
    _expected_objects()
    assert _GROUP_OBJECTS is not None
    return _GROUP_OBJECTS


def has_incremental_schema(db: sqlite3.Connection) -> bool:
    """Whether the database holds :data:`INCREMENTAL_SCHEMA` (stores written before it was added do not)."""
    row = db.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='row_counts'").fetchone()
    return bool(row[0])


def ensure_incremental_schema(db: sqlite3.Connection) -> bool:
    """Add :data:`INCREMENTAL_SCHEMA` (and each later group) inside the open write transaction if missing.

    Returns True if :data:`INCREMENTAL_SCHEMA` itself was added.

    The counts start from one ``count(*)`` of each table (the only time a write counts every row).
    """
    present = {(t, n) for t, n in db.execute("SELECT type, name FROM sqlite_master")}
    for script, objects in zip(_GROUPS[1:], _group_objects()[1:], strict=True):
        if not objects <= present:
            for statement in _statements(script):
                db.execute(statement)
    if has_incremental_schema(db):
        return False
    for statement in _statements(INCREMENTAL_SCHEMA):
        db.execute(statement)
    counts = {
        "documents": "SELECT count(*) FROM documents",
        "passages": "SELECT count(*) FROM passages",
        "vectors": "SELECT count(*) FROM passages WHERE has_vector=1",
    }
    for name, sql in counts.items():
        db.execute("INSERT INTO row_counts(name, n) VALUES (?, (" + sql + "))", (name,))
    return True


def _statements(script: str) -> list[str]:
    """The statements of a schema script (``executescript`` would commit the open transaction)."""
    out: list[str] = []
    current = ""
    for line in script.strip().splitlines():
        current += line + "\n"
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


def check_schema(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a database whose objects differ from :data:`SCHEMA` (triggers, views, extra or altered tables)."""
    expected = _expected_objects()
    try:
        rows = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreCorruptedError(f"{path}: not a readable SQLite database ({exc})") from exc
    for kind, name, sql in rows:
        want = expected.get((kind, name), "missing")
        if want == "missing" and (kind, name) in OPTIONAL_OBJECTS:
            want = _normalized(OPTIONAL_OBJECTS[kind, name])
        if want == "missing":
            raise StoreCorruptedError(
                f"{path}: holds a {kind} {name!r} that the rag-hier schema does not define; refusing to use it"
            )
        if _normalized(sql) != want:
            raise StoreCorruptedError(f"{path}: the {kind} {name!r} differs from the rag-hier schema")
    present = {(k, n) for k, n, _ in rows}
    # each group added since the first format is all there, or absent (a store written before it)
    optional = {o for group in _group_objects() if not present & group for o in group}
    missing = [n for (k, n) in expected if (k, n) not in present and n != "sqlite_sequence" and (k, n) not in optional]
    if missing:
        raise StoreCorruptedError(f"{path}: lacks {', '.join(sorted(missing))} of the rag-hier schema")


def rows_in(
    db: sqlite3.Connection, sql: str, values: Iterable[Any], params: Sequence[Any] = ()
) -> Iterator[tuple[Any, ...]]:
    """Run ``sql`` once per chunk of ``values``, its ``{marks}`` replaced by that chunk's placeholders.

    ``params`` are bound before the chunk (for placeholders that precede ``{marks}``). Yields the rows of
    every chunk; statements that return none (``DELETE``, ``UPDATE``) simply run.

    Example:
        >>> rows_in(db, "SELECT id FROM passages WHERE passage_id IN ({marks})", ids)  # doctest: +SKIP

    """
    vals = list(values)
    for start in range(0, len(vals), CHUNK):
        chunk = vals[start : start + CHUNK]
        yield from db.execute(sql.format(marks=",".join("?" * len(chunk))), (*params, *chunk))


def query_in(db: sqlite3.Connection, sql: str, values: Iterable[Any], params: Sequence[Any] = ()) -> list[Any]:
    """:func:`rows_in` as a list (single-column rows unwrapped)."""
    out = []
    for row in rows_in(db, sql, values, params):
        out.append(row[0] if len(row) == 1 else row)
    return out


def dumps(obj: Any) -> str:
    """Compact JSON as stored in the database."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def hash_text(text: str) -> str:
    """The content hash of a passage's embedding text (unchanged text is never re-encoded)."""
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()
