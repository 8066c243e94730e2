"""Metadata filters in the Haystack filter syntax, evaluated against stored passages.

A filter is either a comparison ``{"field": "meta.year", "operator": ">=", "value": 2020}`` or a logical
node ``{"operator": "AND"|"OR"|"NOT", "conditions": [...]}``. Fields: ``id`` (passage id), ``doc_id``,
``content`` (alias ``text``), ``position``, ``title_path``, and ``meta.<key>`` (dots descend into nested
dicts); any other bare name is looked up in the metadata. Semantics follow Haystack's reference
(``==``/``!=`` compare anything, ``None`` never orders, strings in ``>``/``<`` comparisons must be ISO
dates, ``in``/``not in`` need a list; ``NOT`` negates the conjunction of its conditions). Errors raise
:class:`~rag_hier.errors.FilterError`.

A framework adapter whose filters have their own semantics passes them as a predicate; :class:`Refined` adds
a coarse filter dict that the backend can push down (SQLite, a Milvus expression), the predicate then being
evaluated only on the rows the coarse filter selects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth
from rag_hier.errors import FilterError

__all__ = ["CoarseTranslation", "Predicate", "Refined", "coarse_and", "compile_filter", "record_field"]

Predicate = Callable[[Mapping[str, Any]], bool]
"""A compiled filter: takes a passage record (``id``, ``doc_id``, ``content``, ``meta``, ...)."""


@dataclass(frozen=True, eq=False)
class Refined:
    """A filter given twice: a coarse filter dict a backend can push down, and the exact predicate.

    ``coarse`` (a filter in this module's syntax) must select a **superset** of the passages ``exact``
    accepts; the caller (a framework adapter translating its own filter language) guarantees it. A backend
    evaluates ``coarse`` where it can answer it without Python (SQLite on the local store, a Milvus
    expression) and runs ``exact`` only on the rows it returns; where it cannot (an untranslatable coarse
    filter, or rows the translation flags), it runs ``exact`` on every passage, as for a plain predicate,
    and never evaluates ``coarse`` in Python. So the answer is always ``exact``'s, and ``exact`` sees a row
    the coarse filter rejects only on that fallback: an ``exact`` that raises on some rows may stay silent
    when those rows fall outside ``coarse`` (adapters keep leaves that may raise in ``coarse`` or give no
    coarse filter at all).

    ``equivalent=True`` states more: ``coarse`` selects exactly the passages ``exact`` accepts, and ``exact``
    raises on none of them. A backend that answers ``coarse`` then skips the predicate (no record is read to
    run it); on the fallback the predicate still decides.

    A ``Refined`` is itself a predicate (calling it calls ``exact``), so every place that accepts
    :data:`~rag_hier.store.contract.Filters` accepts it, and code that only knows predicates stays exact.

    Raises:
        FilterError: ``coarse`` is not a non-empty, well-formed filter dict, or ``exact`` is not callable.

    """

    coarse: Mapping[str, Any]
    exact: Predicate
    equivalent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.coarse, Mapping) or not self.coarse:
            raise FilterError(f"Refined.coarse must be a non-empty filter dict, got {self.coarse!r:.200}")
        if not callable(self.exact):
            raise FilterError(f"Refined.exact must be a predicate, got {type(self.exact).__name__}")
        compile_filter(self.coarse)  # validated once, with this module's errors

    def __call__(self, record: Mapping[str, Any]) -> bool:
        """The exact predicate."""
        return self.exact(record)


CoarseTranslation = tuple[dict[str, Any] | None, bool]
"""An adapter's translation of part of its filter for :class:`Refined`: ``(coarse filter or None, exact)``."""


def coarse_and(
    parts: Sequence[CoarseTranslation], raws: Sequence[Any], may_raise: Callable[[Any], bool]
) -> CoarseTranslation:
    """The coarse translation of an AND of ``raws`` (framework conditions) from their translated ``parts``.

    Untranslated parts are dropped (the AND of the rest is a superset, no longer exact) unless one of them could
    raise in the framework's predicate (``may_raise``): then nothing is translated, so pushing down never hides
    an error the framework would raise. ``(None, False)`` when nothing is kept.
    """
    kept: list[dict[str, Any]] = []
    exact = True
    for (cond, ex), raw in zip(parts, raws, strict=True):
        if cond is None:
            if may_raise(raw):
                return None, False
            exact = False
        else:
            kept.append(cond)
            exact = exact and ex
    return ({"operator": "AND", "conditions": kept}, exact) if kept else (None, False)


_TOP_LEVEL = {"id", "doc_id", "content", "text", "position", "title_path", "section"}
_MISSING = object()


def record_field(record: Mapping[str, Any], field: str) -> Any:
    """Resolve a filter field against a record; missing values are ``None``."""
    if field.startswith("meta."):
        value: Any = record.get("meta", {})
        for part in field[5:].split("."):
            if not isinstance(value, Mapping):
                return None
            value = value.get(part, _MISSING)
            if value is _MISSING:
                # Haystack also accepts flat keys that themselves contain dots.
                flat = record.get("meta", {}).get(field[5:], None)
                return flat
        return value
    if field == "text":
        field = "content"
    if field in _TOP_LEVEL:
        return record.get(field)
    return record.get("meta", {}).get(field)


def _parse_date(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise FilterError(f"cannot compare {value!r} ({type(value).__name__}) with a date string")
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise FilterError(
            f"can only order strings that are ISO dates; {value!r} is not (use == / != / in for text)"
        ) from exc


def _comparable(doc_value: Any, filter_value: Any, op: str) -> tuple[Any, Any] | None:
    if doc_value is None or filter_value is None:
        return None
    if isinstance(filter_value, list | tuple | set | dict):
        raise FilterError(f"operator {op!r} needs a single value, got {type(filter_value).__name__}")
    if isinstance(doc_value, str) or isinstance(filter_value, str):
        a, b = _parse_date(doc_value), _parse_date(filter_value)
        if (a.tzinfo is None) != (b.tzinfo is None):
            a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
        return a, b
    return doc_value, filter_value


def _order(op: str) -> Callable[[Any, Any], bool]:
    cmp: dict[str, Callable[[Any, Any], bool]] = {
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
    }
    fn = cmp[op]

    def check(doc_value: Any, filter_value: Any) -> bool:
        pair = _comparable(doc_value, filter_value, op)
        if pair is None:
            return False
        try:
            return fn(*pair)
        except TypeError as exc:
            raise FilterError(f"cannot apply {op!r} to {pair[0]!r} and {pair[1]!r}") from exc

    return check


def _contains(values: Any, doc_value: Any, op: str) -> bool:
    if not isinstance(values, list | tuple | set | frozenset):
        raise FilterError(f"operator {op!r} needs a list value, got {type(values).__name__}")
    try:
        return doc_value in values
    except TypeError:  # an unhashable stored value (a list) tested against a set
        return any(doc_value == v for v in values)


def _in(doc_value: Any, filter_value: Any) -> bool:
    return _contains(filter_value, doc_value, "in")


def _not_in(doc_value: Any, filter_value: Any) -> bool:
    return not _contains(filter_value, doc_value, "not in")


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": _order(">"),
    ">=": _order(">="),
    "<": _order("<"),
    "<=": _order("<="),
    "in": _in,
    "not in": _not_in,
}
_LOGICAL = ("AND", "OR", "NOT")


def compile_filter(filters: Mapping[str, Any] | Predicate | None) -> Predicate | None:
    """Validate ``filters`` and return a predicate over passage records (``None`` for no filter).

    A callable is returned unchanged, so integrations can pass their host framework's own matcher (a
    :class:`Refined` too: the caller that can push its coarse part down looks for it).
    An empty dict means "no filter". Filters (conditions and values together) may nest lists and dicts
    at most :data:`~rag_hier._limits.MAX_NESTING_DEPTH` (100) levels deep; deeper ones raise a
    :class:`FilterError` (never a ``RecursionError``).
    """
    if filters is None:
        return None
    if callable(filters):
        return filters
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be a dict, got {type(filters).__name__}")
    if not filters:
        return None
    if exceeds_depth(filters, MAX_NESTING_DEPTH):
        raise FilterError(f"filters nest lists and dicts more than {MAX_NESTING_DEPTH} levels deep")
    return _compile(filters)


def _compile(node: Mapping[str, Any]) -> Predicate:
    if not isinstance(node, Mapping):
        raise FilterError(f"a filter condition must be a dict, got {node!r}")
    if "field" in node:
        missing = [k for k in ("operator", "value") if k not in node]
        if missing:
            raise FilterError(f"comparison on {node['field']!r} lacks {' and '.join(missing)}: {dict(node)!r}")
        field, op, value = node["field"], node["operator"], node["value"]
        if not isinstance(op, str) or op not in _COMPARISONS:
            raise FilterError(f"unknown comparison operator {op!r}; allowed: {', '.join(_COMPARISONS)}")
        if not isinstance(field, str):
            raise FilterError(f"filter field must be a string, got {field!r}")
        fn = _COMPARISONS[op]
        return lambda rec: fn(record_field(rec, field), value)
    if "operator" not in node or "conditions" not in node:
        raise FilterError(f"a filter needs 'field'/'operator'/'value' or 'operator'/'conditions': {dict(node)!r}")
    op = node["operator"]
    if not isinstance(op, str) or op not in _LOGICAL:
        raise FilterError(f"unknown logical operator {op!r}; allowed: AND, OR, NOT")
    conditions = node["conditions"]
    if not isinstance(conditions, list | tuple):
        raise FilterError(f"'conditions' must be a list, got {type(conditions).__name__}")
    parts = [_compile(c) for c in conditions]
    if op == "AND":
        return lambda rec: all(p(rec) for p in parts)
    if op == "OR":
        return lambda rec: any(p(rec) for p in parts)
    return lambda rec: not all(p(rec) for p in parts)
