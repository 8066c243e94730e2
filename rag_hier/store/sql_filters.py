"""Haystack-syntax filters translated to one parameterised SQLite condition over the ``passages`` table.

:mod:`rag_hier.store.filters` is the reference: a translated filter selects exactly the passages its Python
predicate accepts, or the caller falls back to that predicate. The translation keeps its semantics:

- fields: ``id`` → ``passage_id``, ``doc_id``, ``content``/``text`` → ``text``, ``position``, ``section``;
  ``meta.<key>`` and any other bare name → ``json_extract(meta, '$."<key>"')``; ``meta.a.b`` descends into
  nested objects and, where a key on the way is missing, reads the flat key ``"a.b"`` (as the Python
  resolver does); a value on the way that is not an object gives ``None``;
- ``==``/``!=``/``in``/``not in`` compare like Python: ``True == 1 == 1.0``, a string equals only a string,
  a missing key or JSON ``null`` is ``None``; lists and objects in the data equal no scalar;
- ``>``/``>=``/``<``/``<=`` with a number order numbers and booleans; ``None`` on either side is false;
- every condition is two-valued (``1`` exactly when the Python predicate is true), so ``NOT`` and the
  negated operators are ``(...) IS NOT 1``.

What SQL cannot answer the same way makes :func:`translate` return ``None`` (the caller evaluates the
whole filter in Python): ordering on strings (Haystack compares ISO dates), values that are lists, dicts
or other objects, ``title_path``, numbers at or beyond the 64-bit range or NaN, strings holding NUL, keys
holding ``"``, a backslash or a control character, and empty keys. Some rows can still make the SQL answer
differ from Python's, and a translated filter flags them (:attr:`SqlFilter.bad`) so the caller falls back
when one is among the rows it reads: a metadata value that an ordering would raise
:class:`~rag_hier.errors.FilterError` on (a string, list or object against a number: the Python error is
kept), and a metadata string holding NUL (SQLite's JSON functions cut it there). Metadata holding
``NaN``/``Infinity`` (which Python's JSON writes and SQLite 3.40's JSON reader refuses) makes the query fail;
the caller falls back then too.

A top-level key the store indexes (:mod:`rag_hier.store.meta_index`) is compared through the index table
instead (``id IN (SELECT passage FROM meta_index WHERE field = ? AND value ...)``), exact by the way the
table stores values; *prechecks* send the filter to Python when that field holds values the lookup cannot
answer for (unreadable metadata, strings that may hold NUL, and for an ordering any string, list or object).

Field names and values never enter the SQL text: every path and value is a bound (named) parameter.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

from rag_hier._limits import CONTROL_CHARACTERS
from rag_hier.store.meta_index import MAYBE_CUT, UNREADABLE

__all__ = ["SqlFilter", "select_matching", "translate"]

logger = logging.getLogger(__name__)

_STR_COLUMNS = {"id": "passage_id", "doc_id": "doc_id", "content": "text", "text": "text"}
_INT_COLUMNS = {"position": "position", "section": "section"}
_TOP_LEVEL = {"id", "doc_id", "content", "text", "position", "title_path", "section"}
_ORDER = (">", ">=", "<", "<=")
_NEGATED = {"!=": "==", "not in": "in"}
_LIMIT = 2.0**63
_MAX_MEMBERS = 10_000
"""``in`` lists longer than this are evaluated in Python (bound parameters per statement are limited)."""
TRUE, FALSE = "1", "0"
_NUL_ESCAPE = "\\u0000"
"""How Python's JSON writes a NUL character: its presence in a row's metadata text flags the row."""


class _Untranslatable(Exception):
    """The filter needs the Python predicate."""


@dataclass
class SqlFilter:
    """A translated filter: ``where`` is ``1`` for exactly the matching rows, unless a ``bad`` row is read.

    Attributes:
        where: An SQL condition over ``passages`` (1 exactly where the Python predicate is true, for rows that
            no part of ``bad`` flags).
        params: The named parameters of ``where`` and ``bad``.
        bad: Conditions that flag rows for which ``where`` may differ from Python (or where Python raises).
        contained: Whether every flagged row that matters already satisfies ``where`` (true for filters
            without negation, whose only flags are false positives), so a query need not add ``bad``
            to its ``WHERE`` to see them.
        raising: Flags of rows where the Python predicate may raise (always added to the ``WHERE``).
        prechecks: Statements (``SELECT EXISTS(...)``) that answer 1 when the filter must go to Python
            (indexed metadata fields holding values that a comparison would raise on, or unreadable metadata).

    """

    where: str
    params: dict[str, Any] = field(default_factory=dict)
    prechecks: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    raising: list[str] = field(default_factory=list)
    contained: bool = True
    scanned: tuple[str, ...] = ()

    def query(self, select: str, restrict: str = "") -> tuple[str, bool]:
        """``SELECT <select>[, <flag>] FROM passages WHERE ...`` and whether it has the flag column."""
        pre = f"{restrict} AND " if restrict else ""
        flags = self.bad + self.raising
        if not flags and not restrict and select == "id" and _single_lookup(self.where):
            # one indexed lookup: its covering index answers alone
            return self.where[len("id IN (") : -1], False
        if not flags:
            return f"SELECT {select} FROM passages WHERE {pre}({self.where})", False
        flag = " OR ".join(f"({b})" for b in flags)
        extra = self.raising if self.contained else flags
        cond = " OR ".join([f"({self.where})", *(f"({b})" for b in extra)])
        return f"SELECT {select}, coalesce({flag}, 0) FROM passages WHERE {pre}({cond})", True


def _single_lookup(where: str) -> bool:
    return where.startswith(_LOOKUP) and where.count("SELECT") == 1 and where.endswith(")")


_LOOKUP = "id IN (SELECT passage FROM meta_index WHERE "


class _Builder:
    def __init__(self, indexed: frozenset[str]) -> None:
        self.indexed = indexed
        self.prechecks: list[str] = []
        self.params: dict[str, Any] = {}
        self.bad: list[str] = []
        self.raising: list[str] = []
        self.negated = False
        self.scanned: set[str] = set()

    def bind(self, value: Any) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f":{name}"

    # -- values ------------------------------------------------------------------------------------------
    @staticmethod
    def _number(value: Any) -> bool:
        """Whether ``value`` is a number SQLite compares exactly like Python (see the module docstring)."""
        if isinstance(value, bool):
            return True
        if isinstance(value, int | float) and type(value) in (int, float):
            return -_LIMIT < value < _LIMIT  # NaN and infinities fail this too
        return False

    def _text(self, value: str) -> str:
        if "\x00" in value:
            raise _Untranslatable
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates cannot be bound
            raise _Untranslatable from exc
        return self.bind(value)

    # -- fields ------------------------------------------------------------------------------------------
    def _path(self, keys: list[str]) -> str:
        for key in keys:
            if not key or '"' in key or "\\" in key or CONTROL_CHARACTERS.search(key):
                raise _Untranslatable
        return self.bind("$" + "".join(f'."{k}"' for k in keys))

    def leaf(self, field_name: Any, op: str, value: Any) -> str:
        if not isinstance(field_name, str):  # pragma: no cover - compile_filter refused it
            raise _Untranslatable
        if op in _NEGATED:
            self.negated = True
            inner = self.leaf(field_name, _NEGATED[op], value)
            return _negate(inner)
        if field_name in _STR_COLUMNS:
            return self._str_column(_STR_COLUMNS[field_name], op, value)
        if field_name in _INT_COLUMNS:
            return self._int_column(_INT_COLUMNS[field_name], op, value)
        if field_name == "title_path":
            raise _Untranslatable
        if field_name.startswith("meta."):
            keys = field_name[5:].split(".")
        elif field_name in _TOP_LEVEL:  # pragma: no cover - handled above
            raise _Untranslatable
        else:
            return self._json(self._path([field_name]), op, value, key=field_name)
        if len(keys) == 1:
            return self._json(self._path(keys), op, value, key=keys[0])
        return self._nested(keys, op, value)

    def _nested(self, keys: list[str], op: str, value: Any) -> str:
        """``meta.a.b``: the nested value, else the flat key ``"a.b"`` where a key on the way is missing."""
        full = self._path(keys)
        flat = self._path([".".join(keys)])
        prefixes = [self._path(keys[: j + 1]) for j in range(len(keys) - 1)]
        exists = f"json_type(meta, {full}) IS NOT NULL"
        # the first missing key: at the top (no prefix), or below a prefix that is an object
        below = [*prefixes[1:], full]
        gaps = [f"json_type(meta, {prefixes[0]}) IS NULL"]
        gaps += [
            f"(json_type(meta, {p}) IS 'object' AND json_type(meta, {q}) IS NULL)"
            for p, q in zip(prefixes, below, strict=True)
        ]
        use_flat = "(" + " OR ".join(gaps) + ")"
        bad_before = len(self.bad), len(self.raising)
        nested_cond = self._json(full, op, value)
        flat_cond = self._json(flat, op, value)
        none_cond = self._json(None, op, value)
        parts = [f"({exists} AND {nested_cond})", f"(NOT ({exists}) AND {use_flat} AND {flat_cond})"]
        if none_cond == TRUE:
            parts.append(f"(NOT ({exists}) AND NOT {use_flat})")
        # flags of the nested and flat reads hold only where that read is the one Python makes
        self.bad[bad_before[0] :] = [f"(({exists} OR {use_flat}) AND {b})" for b in self.bad[bad_before[0] :]]
        self.raising[bad_before[1] :] = [f"(({exists} OR {use_flat}) AND {b})" for b in self.raising[bad_before[1] :]]
        return "(" + " OR ".join(parts) + ")"

    # -- comparisons ---------------------------------------------------------------------------------
    def _str_column(self, col: str, op: str, value: Any) -> str:
        if op == "==":
            return self._str_members(col, [value])
        if op == "in":
            return self._str_members(col, self._members(value))
        if value is None:  # ordering: None never orders
            return FALSE
        raise _Untranslatable  # dates, or the error Python raises

    def _str_members(self, col: str, values: list[Any]) -> str:
        texts = []
        for v in values:
            if isinstance(v, str):
                texts.append(self._text(v))
            elif v is not None and not self._number(v) and not (isinstance(v, float) and math.isnan(v)):
                raise _Untranslatable
        if not texts:
            return FALSE
        return f"{col} = {texts[0]}" if len(texts) == 1 else f"{col} IN ({', '.join(texts)})"

    def _int_column(self, col: str, op: str, value: Any) -> str:
        if op in ("==", "in"):
            members = [value] if op == "==" else self._members(value)
            nums = []
            for v in members:
                if self._number(v):
                    nums.append(self.bind(v))
                elif not (v is None or isinstance(v, str) or (isinstance(v, float) and math.isnan(v))):
                    raise _Untranslatable
            if not nums:
                return FALSE
            return f"{col} = {nums[0]}" if len(nums) == 1 else f"{col} IN ({', '.join(nums)})"
        if value is None:
            return FALSE
        if not self._number(value):
            raise _Untranslatable
        return f"{col} {op} {self.bind(value)}"

    @staticmethod
    def _members(value: Any) -> list[Any]:
        if not isinstance(value, list | tuple | set | frozenset) or len(value) > _MAX_MEMBERS:
            raise _Untranslatable  # Python raises its own error for a non-list
        return list(value)

    def _lookup(self, key: str | None, cond: str, python_if: str) -> str:
        """The passages whose indexed value of ``key`` meets ``cond`` (exact: see :mod:`~rag_hier.store.meta_index`).

        ``python_if``: a condition on the field's stored values under which the filter goes to Python.
        """
        f = self.bind(key)
        self.prechecks.append(f"SELECT EXISTS(SELECT 1 FROM meta_index WHERE field = {f} AND {python_if})")
        return f"{_LOOKUP}field = {f} AND value {cond})"

    def _json(self, path: str | None, op: str, value: Any, key: str | None = None) -> str:
        """A comparison on the JSON value at ``path`` (``None``: the value is ``None``, a constant).

        ``key``: the top-level metadata key ``path`` names, when it is one (for the metadata index).
        """
        indexed = key is not None and key in self.indexed
        if op in _ORDER:
            if value is None:
                return FALSE
            if not self._number(value):
                raise _Untranslatable
            if path is None:
                return FALSE
            v = f"json_extract(meta, {path})"
            mark = self.bind(value)
            if indexed:
                # a string, list, object or unreadable row anywhere in the field (text and blobs sort above
                # numbers): Python, which raises on some of them
                return self._lookup(key, f"{op} {mark}", "value >= ''")
            if key is not None:
                self.scanned.add(key)
            # a string, list or object here makes Python raise: those rows are flagged (text sorts above numbers)
            self.raising.append(f"{v} >= ''")
            return f"{v} {op} {mark}"
        members = [value] if op == "==" else self._members(value)
        want_none = False
        nums: list[Any] = []
        texts: list[str] = []
        for m in members:
            if m is None:
                want_none = True
            elif isinstance(m, str):
                texts.append(m)
            elif self._number(m):
                nums.append(m)
            elif isinstance(m, float) and math.isnan(m):
                continue  # equals nothing
            else:
                raise _Untranslatable  # containers, big numbers, infinities, other objects
        if path is None:
            return TRUE if want_none else FALSE
        if indexed and not want_none and (nums or texts):  # missing keys and nulls are not in the index
            marks = [self.bind(n) for n in nums] + [self._text(x) for x in texts]
            stale = f"value IN ({self.bind(UNREADABLE)}, {self.bind(MAYBE_CUT)})" if texts else None
            return self._lookup(key, f"IN ({', '.join(marks)})", stale or f"value = {self.bind(UNREADABLE)}")
        v, t = f"json_extract(meta, {path})", f"json_type(meta, {path})"
        if key is not None:
            self.scanned.add(key)
        parts = []
        if want_none:
            parts.append(f"({v} IS NULL AND coalesce({t}, 'null') = 'null')")
        if nums:
            marks = [self.bind(n) for n in nums]
            parts.append(f"{v} = {marks[0]}" if len(marks) == 1 else f"{v} IN ({', '.join(marks)})")
        if texts:
            marks = [self._text(s) for s in texts]
            same = f"{v} = {marks[0]}" if len(marks) == 1 else f"{v} IN ({', '.join(marks)})"
            parts.append(f"({same} AND {t} = 'text')")
            # a stored string holding NUL is cut there by SQLite: such a row may match falsely
            self.bad.append(f"({same} AND {t} = 'text' AND instr(meta, {self.bind(_NUL_ESCAPE)}) > 0)")
        if not parts:
            return FALSE
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    # -- logic ---------------------------------------------------------------------------------------
    def node(self, node: Mapping[str, Any]) -> str:
        if "field" in node:
            return self.leaf(node["field"], node["operator"], node["value"])
        op = node["operator"]
        parts = [self.node(c) for c in node["conditions"]]
        if op == "OR":
            parts = [p for p in parts if p != FALSE]
            if TRUE in parts:
                return TRUE
            return "(" + " OR ".join(parts) + ")" if parts else FALSE
        parts = [p for p in parts if p != TRUE]
        conj = FALSE if FALSE in parts else ("(" + " AND ".join(parts) + ")" if parts else TRUE)
        if op == "AND":
            return conj
        self.negated = True
        return _negate(conj)


def _negate(cond: str) -> str:
    if cond == TRUE:
        return FALSE
    if cond == FALSE:
        return TRUE
    return f"(({cond}) IS NOT 1)"


def translate(filters: Mapping[str, Any], indexed: Iterable[str] = ()) -> SqlFilter | None:
    """The SQL form of a validated, non-empty Haystack filter, or ``None`` when Python must evaluate it.

    Call :func:`~rag_hier.store.filters.compile_filter` first: this assumes a well-formed filter.
    ``indexed``: metadata keys with a metadata index (:mod:`rag_hier.store.meta_index`).
    """
    builder = _Builder(frozenset(indexed))
    try:
        where = builder.node(filters)
    except (_Untranslatable, RecursionError):
        return None
    return SqlFilter(
        where=where,
        params=builder.params,
        bad=builder.bad,
        raising=builder.raising,
        contained=not builder.negated,
        prechecks=builder.prechecks,
        scanned=tuple(sorted(builder.scanned)),
    )


SCAN_HINT_SECONDS = 0.05
"""A filter that reads unindexed metadata for longer than this logs, once per key and process, how to index it."""
_hinted: set[str] = set()


def _hint_unindexed(keys: tuple[str, ...], seconds: float) -> None:
    new = [k for k in keys if k not in _hinted]
    if seconds < SCAN_HINT_SECONDS or not new:
        return
    _hinted.update(new)
    calls = " and ".join(f"store.index_meta_field({k!r})" for k in new)
    logger.warning(
        "a filter on %s read every passage's metadata (%.0f ms); %s makes it an index lookup "
        "(a committed write, once; later writes keep it current)",
        ", ".join(f"meta.{k}" for k in new),
        seconds * 1000,
        calls,
    )


def select_matching(
    db: sqlite3.Connection, filters: Any, *, column: str = "id", restrict: str = "", indexed: Iterable[str] = ()
) -> list[Any] | None:
    """``column`` of the passages matching ``filters`` (a validated, non-empty filter), by one SQL statement.

    ``restrict``: a fixed SQL condition on the rows read (``"has_vector=1"``); the Python predicate is only
    ever evaluated on those rows, so flags on other rows do not matter. ``None`` when the filter must be
    evaluated in Python: it cannot be translated, a row read is flagged (see :class:`SqlFilter`), or SQLite
    refuses the statement (metadata its JSON reader cannot parse, an expression nested too deep).
    ``indexed``: the store's indexed metadata keys (lookups through ``meta_index``).
    """
    if not isinstance(filters, Mapping):
        return None
    sf = translate(filters, indexed)
    if sf is None:
        return None
    sql, flagged = sf.query(column, restrict)
    try:
        for check in sf.prechecks:
            if db.execute(check, sf.params).fetchone()[0]:
                logger.debug("filter evaluated in Python: an indexed field holds values SQL cannot compare")
                return None
        started = time.perf_counter()
        rows = db.execute(sql, sf.params).fetchall()
        if sf.scanned:
            _hint_unindexed(sf.scanned, time.perf_counter() - started)
    except (sqlite3.Error, OverflowError, UnicodeEncodeError, ValueError) as exc:
        logger.debug("filter evaluated in Python: SQLite refused its translation (%s)", exc)
        return None
    if flagged:
        if any(map(itemgetter(1), rows)):
            logger.debug("filter evaluated in Python: a row needs the Python rules")
            return None
        return list(map(itemgetter(0), rows))
    return list(chain.from_iterable(rows))
