"""Haystack-syntax filters translated to Milvus boolean expressions (evaluated inside Milvus: a pre-filter).

The translation keeps the semantics of :mod:`rag_hier.store.filters` (the local store's reference):

- fields: ``id`` → ``passage_id``, ``doc_id``, ``content``/``text`` → ``text``, ``position``, ``section``,
  ``meta.<key>`` (and any other bare name) → the JSON field ``meta["<key>"]``; ``meta.a.b`` → ``meta["a"]["b"]``;
- a missing key or a JSON ``null`` is ``None``: ``== None`` matches it, ``!=`` and ``not in`` match it, ordering
  never does — every leaf is written two-valued (``is null`` guards; ``exists`` on servers without ``is null``), so
  ``NOT`` negates exactly as in Python,
  never Milvus' three-valued "unknown";
- ``in`` on a JSON key is written as ``==`` alternatives (Milvus Lite has no ``in`` on JSON paths).

Values are written as literals with every quote and backslash escaped (strings) or as ``repr`` of finite
numbers, so a value can never end a literal and inject an expression; field names are checked against
:data:`FIELD_NAME` and refused with a :class:`~rag_hier.errors.FilterError` naming them.

What Milvus cannot evaluate the same way is answered client-side by the local predicate (the smallest step):
ordering on date strings (Milvus compares strings, Haystack compares datetimes), comparisons with lists or
dicts, ``title_path`` (a JSON-encoded list), keys that need the flat-key fallback (``meta.a.b`` where the
key itself is ``"a.b"``), and callables. :func:`translate` returns ``None`` for those.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rag_hier.errors import FilterError
from rag_hier.store.filters import compile_filter

__all__ = ["FIELD_NAME", "escape_string", "ids_expr", "literal", "str_list", "translate"]

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
"""A metadata key usable in a Milvus JSON path (letters, digits, ``_``, ``-``; not starting with a digit)."""

_SCALAR_FIELDS = {"id": "passage_id", "doc_id": "doc_id", "content": "text", "text": "text"}
_INT_FIELDS = {"position": "position", "section": "section"}
_ORDER = (">", ">=", "<", "<=")
TRUE = "(vid >= 0)"  # no boolean literal: `true` / `false` do not parse on every server (.capabilities)
FALSE = "(vid < 0)"


class _Untranslatable(Exception):
    """The filter needs the client-side predicate."""


def escape_string(value: str) -> str:
    """A double-quoted Milvus string literal of ``value`` (backslash, quotes and line breaks escaped)."""
    out = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("'", "\\'")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    if any(ord(c) < 32 or ord(c) == 127 for c in out):
        raise _Untranslatable  # other control characters have no escape in Milvus' grammar
    return f'"{out}"'


def str_list(values: Sequence[str]) -> str:
    """A Milvus list literal of strings (``["a","b"]``), each escaped by :func:`escape_string`."""
    return "[" + ",".join(escape_string(v) for v in values) + "]"


def ids_expr(field_name: str, ids: Sequence[int]) -> str:
    """``field in [1,2,...]`` over integer ids (no id: an always-false condition on ``vid``)."""
    return f"{field_name} in [{','.join(str(int(i)) for i in ids)}]" if len(ids) else FALSE


def literal(value: Any) -> str:
    """A Milvus literal of a scalar filter value (``bool``, ``int``, finite ``float``, ``str``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise _Untranslatable
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Untranslatable
        return repr(float(value))
    if isinstance(value, str):
        return escape_string(value)
    raise _Untranslatable


def _json_path(field: str) -> str:
    parts = field.split(".")
    for p in parts:
        if not FIELD_NAME.match(p):
            raise FilterError(
                f"filter field {field!r} is not a valid Milvus field name: each key must match "
                f"{FIELD_NAME.pattern} (letters, digits, '_' or '-')"
            )
    if len(parts) > 1:
        raise _Untranslatable  # the local store also tries the flat key "a.b": evaluated client-side
    return "meta" + "".join(f'["{p}"]' for p in parts)


def _field(field: str) -> tuple[str, str]:
    """``(kind, expression)``: kind ``json`` (nullable JSON path), ``str`` or ``int`` (never null)."""
    if not isinstance(field, str):
        raise FilterError(f"filter field must be a string, got {field!r}")
    if field in _SCALAR_FIELDS:
        return "str", _SCALAR_FIELDS[field]
    if field in _INT_FIELDS:
        return "int", _INT_FIELDS[field]
    if field == "title_path":
        raise _Untranslatable
    key = field[5:] if field.startswith("meta.") else field
    return "json", _json_path(key)


def _present(path: str, nulls: bool) -> str:
    """``path`` holds a value (``nulls``: the server has ``is null``; else ``exists``, guarding a comparison only)."""
    return f"{path} is not null" if nulls else f"(exists {path})"


def _eq(kind: str, path: str, value: Any, nulls: bool) -> str:
    """A two-valued ``path == value`` (``None``: missing or null)."""
    if value is None:
        if kind != "json":
            return FALSE
        if not nulls:  # `exists` counts a stored JSON null as present: the local rules decide
            raise _Untranslatable
        return f"({path} is null)"
    if isinstance(value, list | tuple | set | dict):
        raise _Untranslatable
    if kind == "str" and not isinstance(value, str):
        return FALSE
    if kind == "int" and (isinstance(value, str) or not isinstance(value, int | float)):
        return FALSE
    lit = literal(value)
    return f"({_present(path, nulls)} and {path} == {lit})" if kind == "json" else f"({path} == {lit})"


def _leaf(node: Mapping[str, Any], nulls: bool) -> str:
    field, op, value = node["field"], node["operator"], node["value"]
    kind, path = _field(field)
    if op == "==":
        return _eq(kind, path, value, nulls)
    if op == "!=":
        return f"(not {_eq(kind, path, value, nulls)})"
    if op in _ORDER:
        if isinstance(value, list | tuple | set | dict):
            raise FilterError(f"operator {op!r} needs a single value, got {type(value).__name__}")
        if value is None:
            return FALSE
        if isinstance(value, (str, bool)) or kind == "str":
            raise _Untranslatable  # dates (Haystack compares datetimes) and type errors: the local rules
        lit = literal(value)
        return f"({_present(path, nulls)} and {path} {op} {lit})" if kind == "json" else f"({path} {op} {lit})"
    if op in ("in", "not in"):
        if not isinstance(value, list | tuple | set):
            raise FilterError(f"operator {op!r} needs a list value, got {type(value).__name__}")
        alts = [_eq(kind, path, v, nulls) for v in value]
        expr = "(" + " or ".join(alts) + ")" if alts else FALSE
        return expr if op == "in" else f"(not {expr})"
    raise FilterError(f"unknown comparison operator {op!r}")


def _node(node: Mapping[str, Any], nulls: bool) -> str:
    if "field" in node:
        return _leaf(node, nulls)
    op = node["operator"]
    parts = [_node(c, nulls) for c in node["conditions"]]
    if op == "AND":
        return "(" + " and ".join(parts) + ")" if parts else TRUE
    if op == "OR":
        return "(" + " or ".join(parts) + ")" if parts else FALSE
    return "(not (" + " and ".join(parts) + "))" if parts else FALSE


def translate(filters: Mapping[str, Any] | Any, *, json_null_check: bool = True) -> str | None:
    """The Milvus expression of a Haystack filter, or ``None`` when it must be evaluated client-side.

    The filter is validated first (the same errors as the local store: :class:`~rag_hier.errors.FilterError`);
    an empty filter or ``None`` gives an always-true condition (``(vid >= 0)``). ``json_null_check``: the server
    has ``is null`` on JSON paths (``Capabilities.json_null_check``); without it a comparison is guarded by
    ``exists`` and a comparison with ``None`` is left to the client.

    Raises:
        FilterError: A malformed filter, or a field that is not a valid Milvus field name.

    """
    if filters is None:
        return TRUE
    if callable(filters):
        return None
    compile_filter(filters)  # validation with the local rules and messages
    if not filters:
        return TRUE
    try:
        return _node(filters, json_null_check)
    except _Untranslatable:
        return None
