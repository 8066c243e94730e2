"""Indexes on metadata fields that a user asks for: the values SQLite reads at ``meta.<field>``, kept in a table.

``store.index_meta_field("category")`` makes ``meta.category == x`` (and ``in``, ``<``, ...) look up the
passages holding ``x`` through an SQLite index instead of reading every passage's metadata. An expression
index on ``json_extract(meta, ...)`` would be the natural shape, but the store opens its database with
``trusted_schema=OFF`` (a database from a stranger runs no schema code), and SQLite (3.40) refuses JSON
functions inside the schema then ("unsafe use of json_extract()"). So the values live in the table
``meta_index(field, value, passage)`` with an index on ``(field, value)``, written by the store's writes in
the same transaction as the passages (:func:`refresh` after every insert, update and delete of passages), and
filled for every stored passage when the field is added. The field list is part of the committed state
(``meta_indexes``).

Values are what ``json_extract`` reads — numbers (booleans as 0 and 1, as Python compares them) and strings;
JSON ``null`` and missing keys are not stored — and three markers (blobs, which equal and order with no
number or string): :data:`CONTAINER` for lists and objects, :data:`MAYBE_CUT` for strings that may hold
NUL, :data:`UNREADABLE` for metadata SQLite's JSON reader refuses. A lookup ``value = x`` therefore selects
exactly the passages whose value Python finds equal to ``x``; filters on a field holding
:data:`UNREADABLE` or :data:`MAYBE_CUT` markers (or, for ordering, any string or marker) go to the Python
evaluator (see :mod:`rag_hier.store.sql_filters`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.schema import OPTIONAL_OBJECTS, rows_in

__all__ = ["CONTAINER", "FIELD", "MAYBE_CUT", "UNREADABLE", "check_field", "create", "fields", "json_path", "refresh"]

FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
"""A metadata key that can be indexed: letters, digits, ``_`` and ``-`` (a top-level key of ``meta``)."""


UNREADABLE = b"\x00"
"""The value stored for a passage whose metadata SQLite's JSON reader refuses (``NaN``, ``Infinity``)."""
CONTAINER = b"\x01"
"""The value stored for a list or an object (which equal no scalar and cannot be ordered)."""
MAYBE_CUT = b"\x02"
"""The value stored for a string whose JSON text holds ``\\u0000`` (SQLite's JSON reader cuts at NUL)."""

_VALUE = (
    "CASE WHEN NOT json_valid(meta) THEN x'00' "
    "WHEN json_type(meta, {path}) IN ('array', 'object') THEN x'01' "
    "WHEN json_type(meta, {path}) = 'text' AND instr(meta -> {path}, '\\u0000') > 0 THEN x'02' "
    "ELSE json_extract(meta, {path}) END"
)


def json_path(field: str) -> str:
    """The JSON path of an indexed top-level key."""
    return f'$."{field}"'


def fields(state: Mapping[str, Any], where: str | Path = "") -> list[str]:
    """The indexed metadata fields recorded in a committed state."""
    value = state.get("meta_indexes", [])
    if not isinstance(value, list) or not all(isinstance(f, str) and FIELD.match(f) for f in value):
        raise StoreCorruptedError(f"{where}: meta_indexes must be a list of metadata keys, got {value!r:.200}")
    return value


def check_field(field: Any) -> str:
    """``field`` (``"category"`` or ``"meta.category"``) as an indexable key, or a clear error."""
    if not isinstance(field, str):
        raise StoreError(f"a metadata field to index must be a string, got {field!r:.80}")
    key = field[5:] if field.startswith("meta.") else field
    if not FIELD.match(key):
        raise StoreError(
            f"cannot index metadata field {field!r:.80}: only top-level keys of letters, digits, '_' and '-' "
            "(at most 64, not starting with a digit or '-') can be indexed"
        )
    return key


def create(db: sqlite3.Connection, field: str) -> None:
    """Create the table (if needed) and fill it for ``field`` from every stored passage (inside a write)."""
    present = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'meta_index%'")}
    for (_, name), sql in OPTIONAL_OBJECTS.items():
        if name not in present:
            db.execute(sql)
    db.execute("DELETE FROM meta_index WHERE field = ?", (field,))
    db.execute(
        "INSERT INTO meta_index(field, value, passage) SELECT :field, v, id FROM "
        f"(SELECT id, {_VALUE.format(path=':path')} AS v FROM passages) WHERE v IS NOT NULL",
        {"field": field, "path": json_path(field)},
    )


def refresh(db: sqlite3.Connection, indexed: Sequence[str], rowids: Iterable[int]) -> None:
    """Re-read the indexed values of passages ``rowids`` (inserted, updated or deleted) inside a write."""
    if not indexed:
        return
    ids = [int(r) for r in rowids]
    for _ in rows_in(db, "DELETE FROM meta_index WHERE passage IN ({marks})", ids):
        pass
    value = _VALUE.format(path="?1").replace("{", "{{").replace("}", "}}")
    for field in indexed:
        for _ in rows_in(
            db,
            f"INSERT INTO meta_index(field, value, passage) SELECT ?2, v, id FROM (SELECT id, {value} AS v "
            "FROM passages WHERE id IN ({marks})) WHERE v IS NOT NULL",
            ids,
            [json_path(field), field],
        ):
            pass
