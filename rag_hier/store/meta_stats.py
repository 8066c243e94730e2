"""Metadata aggregates: distinct counts, min/max and field kinds over passages' top-level metadata keys.

What :meth:`~rag_hier.store.contract.StoreBackend.count_unique_meta`, ``meta_min_max``, ``meta_field_types`` and
``count_with_extra`` answer, in two forms that give the same result:

- the reference, in Python over decoded metadata (:func:`count_unique`, :func:`min_max`, :func:`field_types`,
  :func:`count_present`): what a backend without aggregates (Milvus) runs on the rows its engine filtered, and
  what the local store falls back to;
- the SQLite form (:func:`sql_count_unique`, :func:`sql_min_max`, :func:`sql_field_types`,
  :func:`sql_count_present`): one or two statements over ``passages.meta`` / ``passages.extra`` with
  ``json_extract`` / ``json_type`` / ``json_each``, restricted to the rows of a filter (``rowids``) or none.
  Each returns ``None`` when SQLite cannot answer exactly as the reference does (keys holding ``"``, a
  backslash or a control character, metadata holding a NUL character or a number SQLite may read differently
  from Python, metadata SQLite's JSON reader refuses such as ``NaN``); the caller runs the reference then.

Semantics (the reference's): a field is a top-level metadata key (``"a.b"`` is the key ``"a.b"``); ``null`` and
a missing key are no value. Values compare as Python compares them: ``1 == 1.0 == True`` and ``0 == 0.0 ==
False``; lists and objects by content (object keys unordered); a string equals only a string.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rag_hier._limits import CONTROL_CHARACTERS
from rag_hier.errors import InvalidInputError

__all__ = [
    "check_field",
    "check_fields",
    "check_path",
    "count_present",
    "count_unique",
    "field_types",
    "kind_of",
    "min_max",
    "sql_count_present",
    "sql_count_unique",
    "sql_field_types",
    "sql_min_max",
]

logger = logging.getLogger(__name__)

_EXACT_FLOAT = 2.0**53
"""Reals at or beyond this magnitude may be integers SQLite's JSON reader turned into floats: the reference decides."""
_NUL = "\\u0000"
"""How Python's JSON writes a NUL character (SQLite's JSON functions cut a string there)."""
_SQL_ERRORS = (sqlite3.Error, OverflowError, ValueError, UnicodeEncodeError)


# ----------------------------------------------------------------------------------------------------
# field names
# ----------------------------------------------------------------------------------------------------
def check_field(field: Any, parameter: str = "field") -> str:
    """``field`` if it names a metadata key (a non-empty string without control characters), else an error."""
    if not isinstance(field, str):
        raise InvalidInputError(
            f"{parameter}: a metadata field name must be a string, got {field!r} ({type(field).__name__})"
        )
    if not field:
        raise InvalidInputError(f"{parameter}: a metadata field name must not be empty, got {field!r}")
    if CONTROL_CHARACTERS.search(field):
        raise InvalidInputError(f"{parameter}: the metadata field name {field!r} holds a control character")
    return field


def check_fields(fields: Any, parameter: str = "fields") -> list[str]:
    """The field names of ``fields`` (a list or tuple of names), each checked by :func:`check_field`."""
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidInputError(f"{parameter} must be a list of metadata field names, got {fields!r}")
    return [check_field(f, parameter) for f in fields]


def check_path(path: Any, parameter: str = "paths") -> tuple[str, ...]:
    """A non-empty sequence of keys into ``extra``, each checked by :func:`check_field`."""
    if isinstance(path, str) or not isinstance(path, Sequence) or not path:
        raise InvalidInputError(f"{parameter}: a path into extra must be a non-empty tuple of keys, got {path!r}")
    return tuple(check_field(k, parameter) for k in path)


# ----------------------------------------------------------------------------------------------------
# the reference (Python)
# ----------------------------------------------------------------------------------------------------
def _hashable(value: Any) -> Any:
    """A hashable stand-in that is equal exactly when the values are (lists and dicts included)."""
    if isinstance(value, list | tuple):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _hashable(v)) for k, v in value.items()))
    return value


def kind_of(value: Any) -> str:
    """The kind of a metadata value: ``boolean``, ``int``, ``float`` or ``keyword`` (anything else)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "keyword"


def count_unique(metas: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> dict[str, int]:
    """Distinct non-null values of each field among ``metas``."""
    seen: dict[str, set[Any]] = {f: set() for f in fields}
    for meta in metas:
        for f, values in seen.items():
            value = meta.get(f)
            if value is not None:
                values.add(_hashable(value))
    return {f: len(v) for f, v in seen.items()}


def min_max(metas: Iterable[Mapping[str, Any]], field: str) -> tuple[Any, Any]:
    """Smallest and largest of the field's numbers (booleans included) or strings, first of equals kept.

    ``(None, None)`` when it holds none, or holds both numbers and strings (which do not compare).
    """
    values = [m[field] for m in metas if m.get(field) is not None and isinstance(m[field], int | float | str)]
    if not values:
        return None, None
    try:
        return min(values), max(values)
    except TypeError:
        return None, None


def field_types(metas: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each key holding a non-null value with the :func:`kind_of` its value in the last of ``metas`` holding one."""
    kinds: dict[str, str] = {}
    for meta in metas:
        for key, value in meta.items():
            if value is not None:
                kinds[key] = kind_of(value)
    return kinds


def _at(extra: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = extra
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def count_present(extras: Iterable[Mapping[str, Any]], paths: Sequence[Sequence[str]]) -> tuple[int, list[int]]:
    """``(number of extras, number of them holding a non-null value at each path)``."""
    total = 0
    counts = [0] * len(paths)
    for extra in extras:
        total += 1
        for i, path in enumerate(paths):
            if _at(extra, path) is not None:
                counts[i] += 1
    return total, counts


# ----------------------------------------------------------------------------------------------------
# SQLite
# ----------------------------------------------------------------------------------------------------
def _json_path(keys: Sequence[str]) -> str | None:
    """``$."a"."b"``, or ``None`` for a key SQLite's path syntax cannot quote."""
    if any('"' in k or "\\" in k or CONTROL_CHARACTERS.search(k) for k in keys):
        return None
    return "$" + "".join(f'."{k}"' for k in keys)


def _rows(rowids: Sequence[int] | None, column: str = "id") -> tuple[str, dict[str, Any]]:
    """The condition restricting ``passages`` to ``rowids`` (``None``: every row), with its parameter."""
    if rowids is None:
        return "1", {}
    return f"{column} IN (SELECT value FROM json_each(:rowids))", {"rowids": json.dumps([int(r) for r in rowids])}


def _has_nul(db: sqlite3.Connection, column: str, where: str, params: Mapping[str, Any]) -> bool:
    sql = f"SELECT EXISTS(SELECT 1 FROM passages WHERE {where} AND instr({column}, :nul) > 0)"
    return bool(db.execute(sql, {**params, "nul": _NUL}).fetchone()[0])


def _python_value(kind: str, value: Any) -> Any:
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind == "integer":
        return int(value)
    if kind == "real":
        return float(value)
    return value


def _numeric(i: int) -> str:
    return f"CASE t{i} WHEN 'true' THEN 1 WHEN 'false' THEN 0 WHEN 'integer' THEN v{i} WHEN 'real' THEN v{i} END"


def _scalar(i: int) -> str:
    containers = f"t{i} IN ('array', 'object')"
    return f"CASE WHEN {containers} THEN NULL WHEN t{i} = 'true' THEN 1 WHEN t{i} = 'false' THEN 0 ELSE v{i} END"


def _big(i: int) -> str:
    return f"max(t{i} = 'real' AND abs(v{i}) >= {_EXACT_FLOAT!r})"


def _values(paths: Sequence[str], where: str) -> tuple[str, dict[str, Any]]:
    """A materialized CTE ``x`` (each row's JSON read once): rowid, NUL flag, type ``t<i>`` and value ``v<i>``."""
    columns = "".join(f", json_type(meta, :p{i}) AS t{i}, json_extract(meta, :p{i}) AS v{i}" for i in range(len(paths)))
    sql = f"WITH x AS MATERIALIZED (SELECT id, instr(meta, :nul) AS nul{columns} FROM passages WHERE {where}) "
    return sql, {"nul": _NUL, **{f"p{i}": p for i, p in enumerate(paths)}}


def _paths(fields: Sequence[str]) -> list[str] | None:
    paths = [_json_path([f]) for f in fields]
    return None if any(p is None for p in paths) else [p for p in paths if p is not None]


def sql_count_unique(
    db: sqlite3.Connection, fields: Sequence[str], rowids: Sequence[int] | None
) -> dict[str, int] | None:
    """:func:`count_unique` in SQL over the rows ``rowids`` (``None``: all), or ``None`` (run the reference).

    One statement reads every field: distinct scalars counted in SQL; for lists and objects, their distinct
    JSON texts are read (a second statement, only for fields holding any) and compared as Python compares them.
    """
    paths = _paths(fields)
    if paths is None:
        return None
    where, params = _rows(rowids)
    cte, more = _values(paths, where)
    params.update(more)
    aggregates = "".join(
        f", count(DISTINCT {_scalar(i)}), sum(t{i} IN ('array', 'object')), {_big(i)}" for i in range(len(paths))
    )
    try:
        row = db.execute(f"{cte}SELECT max(nul){aggregates} FROM x", params).fetchone()
        if row[0]:
            return None
        out: dict[str, int] = {}
        for i, f in enumerate(fields):
            scalars, containers, big = row[1 + 3 * i : 4 + 3 * i]
            if big:
                return None
            if containers:
                texts = db.execute(
                    f"SELECT DISTINCT json_extract(meta, :path) FROM passages WHERE {where} "
                    "AND json_type(meta, :path) IN ('array', 'object')",
                    {**params, "path": paths[i]},
                ).fetchall()
                containers = len({_hashable(json.loads(t)) for (t,) in texts})
            out[f] = int(scalars) + int(containers or 0)
    except _SQL_ERRORS as exc:
        logger.debug("metadata counted in Python: SQLite refused the query (%s)", exc)
        return None
    return out


def sql_min_max(db: sqlite3.Connection, field: str, rowids: Sequence[int] | None) -> tuple[Any, Any] | None:
    """:func:`min_max` in SQL over the rows ``rowids`` (``None``: all), or ``None`` (run the reference)."""
    paths = _paths([field])
    if paths is None:
        return None
    where, params = _rows(rowids)
    cte, more = _values(paths, where)
    params.update(more)
    number, text = _numeric(0), "CASE t0 WHEN 'text' THEN v0 END"
    try:
        nul, numbers, texts, lo, hi, text_lo, text_hi, big = db.execute(
            f"{cte}SELECT max(nul), count({number}), count({text}), min({number}), max({number}), "
            f"min({text}), max({text}), {_big(0)} FROM x",
            params,
        ).fetchone()
        if nul or big:
            return None
        if (numbers and texts) or not (numbers or texts):
            return None, None
        if texts:
            return text_lo, text_hi
        # of equal numbers (1, 1.0, True) Python keeps the first: read the first row holding each
        # (in rowid order, without the CTE: the scan stops at the first row holding it)
        first = (
            "SELECT t0, v0 FROM (SELECT id, json_type(meta, :p0) AS t0, json_extract(meta, :p0) AS v0 "
            f"FROM passages WHERE {where}) WHERE ({number}) = :target ORDER BY id LIMIT 1"
        )
        low = db.execute(first, {**params, "target": lo}).fetchone()
        high = db.execute(first, {**params, "target": hi}).fetchone()
    except _SQL_ERRORS as exc:
        logger.debug("metadata min/max computed in Python: SQLite refused the query (%s)", exc)
        return None
    return _python_value(*low), _python_value(*high)


_SQL_KINDS = {"true": "boolean", "false": "boolean", "integer": "int", "real": "float"}


def sql_field_types(db: sqlite3.Connection, rowids: Sequence[int] | None) -> dict[str, str] | None:
    """:func:`field_types` in SQL over the rows ``rowids`` (``None``: all), or ``None`` (run the reference).

    One ``GROUP BY`` over ``json_each``: with a single ``max(p.id)`` aggregate SQLite takes the bare columns
    (type, value) from the row holding the maximum, the last passage holding a non-null value.
    """
    where, params = _rows(rowids, "p.id")
    sql = (
        "SELECT j.key, j.type, j.atom, max(p.id) FROM passages AS p, json_each(p.meta) AS j "
        f"WHERE {where} AND j.type != 'null' GROUP BY j.key"
    )
    try:
        if _has_nul(db, "meta", where.replace("p.id", "id"), params):
            return None
        rows = db.execute(sql, params).fetchall()
    except _SQL_ERRORS as exc:
        logger.debug("metadata field kinds read in Python: SQLite refused the query (%s)", exc)
        return None
    out: dict[str, str] = {}
    for key, kind, atom, _ in rows:
        if kind == "real" and abs(atom) >= _EXACT_FLOAT:
            return None
        out[key] = _SQL_KINDS.get(kind, "keyword")
    return out


def sql_count_present(
    db: sqlite3.Connection, paths: Sequence[Sequence[str]], rowids: Sequence[int] | None
) -> tuple[int, list[int]] | None:
    """:func:`count_present` in SQL over ``passages.extra`` of the rows ``rowids``, or ``None``."""
    where, params = _rows(rowids)
    columns = ["count(*)"]
    for i, path in enumerate(paths):
        json_path = _json_path(path)
        if json_path is None:
            return None
        params[f"p{i}"] = json_path
        columns.append(f"coalesce(sum(coalesce(json_type(extra, :p{i}), 'null') != 'null'), 0)")
    try:
        if _has_nul(db, "extra", where, params):
            return None
        row = db.execute(f"SELECT {', '.join(columns)} FROM passages WHERE {where}", params).fetchone()
    except _SQL_ERRORS as exc:
        logger.debug("extra counted in Python: SQLite refused the query (%s)", exc)
        return None
    return int(row[0]), [int(c) for c in row[1:]]
