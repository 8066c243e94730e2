"""The part of a Haystack filter the engine can push down: a coarse engine filter that selects a superset.

:class:`RagHierDocumentStore` answers every filter with Haystack's reference matcher
(``haystack.utils.filters.document_matches_filter``) over a view of each stored passage
(:func:`._convert.record_view`). :func:`coarse_filter` translates the parts of a filter whose reference
semantics the engine's filter dicts (:mod:`rag_hier.store.filters`, pushed down to SQLite or a Milvus
expression) provably share, so the matcher runs only on the rows the coarse filter selects
(:class:`rag_hier.store.filters.Refined`). A translation is a superset of the matcher's answer; it is *exact*
(the same answer) where negating it (``!=``, ``not in``, ``NOT``) stays a superset, and a whole filter that
translates exactly is answered by the engine alone (``Refined(equivalent=True)``: no record is read to run
the matcher where the store answers the engine filter).

What is translated (anything else stays with the matcher alone):

- fields: ``id`` (the passage id), ``meta.<key>`` and a bare ``<key>`` that is not a ``Document`` field
  (Haystack reads it from ``meta``), where ``<key>`` is one key of letters, digits, ``_`` and ``-``
  (nested keys are not translated: the engine also tries the flat key ``"a.b"``, Haystack does not);
  ``meta.source_id`` becomes "``meta.source_id`` or the passage's ``doc_id``" and ``meta.split_id`` "it or the
  passage's ``position``" (supersets: passages the engine wrote get those in the view, which is what
  ``SentenceWindowRetriever``'s filters read); ``title_path`` (also filled in for them) is not translated;
- ``==`` / ``in`` with strings that cannot be ISO dates (Haystack's ``==`` also matches two spellings of one
  instant; a string without ``-`` at positions 4 and 7 or shorter than 10 characters never parses as one) and
  ``None`` (a missing key or a JSON ``null`` on both sides); on the local store also numbers and booleans
  (SQLite compares ``True == 1 == 1.0`` as Python does), and ``>``/``>=``/``<``/``<=`` with a number (the
  engine's SQL flags every row holding a string, list or object there, on which Haystack raises, and then
  falls back to the matcher on every row, so errors stay as they were);
- ``!=``, ``not in`` and ``NOT`` over exact translations; ``OR`` when every branch translates; ``AND``
  keeps the branches that translate and drops the others, unless a dropped branch holds an ordering
  comparison (which raises on some values: dropping it could hide that error), in which case the ``AND``
  does not translate.

Stored metadata is the JSON form of a Document's ``meta``; the view restores tuples and datetimes from the
exact copy. No restored value that is not a string equals a string, and a datetime's JSON form is an ISO
string, which a non-date string never equals, so equality on strings reads the same on both.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from haystack import Document

from rag_hier.store.filters import CoarseTranslation, coarse_and

__all__ = ["coarse_filter", "translate_filter"]

_DOCUMENT_FIELDS = frozenset(f.name for f in dataclasses.fields(Document))
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")
_VIEW_FILLED = frozenset({"title_path"})
"""A meta key the filter view fills in for passages the engine wrote, not translated."""
_FILLED_FROM = {"source_id": "doc_id", "split_id": "position"}
"""Meta keys the filter view fills in for passages the engine wrote, and the passage column it fills them from."""
_ORDER = frozenset({">", ">=", "<", "<="})
_NUMBER_LIMIT = 2**53

Translation = CoarseTranslation
"""``(engine filter or None when untranslatable, whether it is exact)``."""
_NONE: Translation = (None, False)


def _maybe_date(value: str) -> bool:
    """Whether Haystack's ``==`` may read ``value`` as an ISO date (a superset of its own test)."""
    return len(value) >= 10 and value[4] == "-" and value[7] == "-"


def _equatable(value: Any, numbers: bool) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not _maybe_date(value)
    if not numbers:
        return False
    if isinstance(value, bool):
        return True
    return type(value) in (int, float) and math.isfinite(value) and abs(value) < _NUMBER_LIMIT


def _target(field: str) -> str | None:
    """``"id"``, ``"source_id"``, ``"split_id"``, ``"meta.<key>"``, or ``None`` when the field is not translated."""
    if field == "id":
        return "id"
    if field.startswith("meta."):
        key = field[5:]
    elif "." in field or field in _DOCUMENT_FIELDS:
        return None
    else:
        key = field
    if not _KEY.match(key) or key in _VIEW_FILLED:
        return None
    return key if key in _FILLED_FROM else f"meta.{key}"


def _leaf(node: Mapping[str, Any], numbers: bool, max_members: int) -> Translation:
    target = _target(node["field"])
    op, value = node["operator"], node["value"]
    if target is None:
        return _NONE
    if op in _ORDER:
        number = type(value) in (int, float) and math.isfinite(value) and abs(value) < _NUMBER_LIMIT
        if not numbers or not number or target in ("id", "source_id"):
            return _NONE
        if target == "split_id":  # the stored key, else (passages the engine wrote) the position
            either = [{"field": f, "operator": op, "value": value} for f in ("meta.split_id", "position")]
            return {"operator": "OR", "conditions": either}, False
        return {"field": target, "operator": op, "value": value}, True
    values = [value] if op in ("==", "!=") else value
    if not isinstance(values, list) or len(values) > max_members or not all(_equatable(v, numbers) for v in values):
        return _NONE
    if target == "id" and not all(isinstance(v, str) for v in values):
        return _NONE
    exact = True
    positive: dict[str, Any] = {"field": target, "operator": "in", "value": values}
    if target in _FILLED_FROM:  # the stored key, else (passages the engine wrote) the column it is filled from
        exact = False
        positive = {
            "operator": "OR",
            "conditions": [
                {"field": f"meta.{target}", "operator": "in", "value": values},
                {"field": _FILLED_FROM[target], "operator": "in", "value": [v for v in values if v is not None]},
            ],
        }
    if op in ("!=", "not in"):
        return ({"operator": "NOT", "conditions": [positive]}, True) if exact else _NONE
    return positive, exact


def _may_raise(node: Mapping[str, Any]) -> bool:
    """Whether the reference matcher may raise on some document for this (validated) filter."""
    if "field" in node:
        return node["operator"] in _ORDER
    return any(_may_raise(c) for c in node["conditions"])


def _node(node: Mapping[str, Any], numbers: bool, max_members: int) -> Translation:
    if "field" in node:
        return _leaf(node, numbers, max_members)
    op, conditions = node["operator"], node["conditions"]
    if not conditions:  # AND: true, OR and NOT: false, for both
        return {"operator": op, "conditions": []}, True
    parts = [_node(c, numbers, max_members) for c in conditions]
    if op == "AND":
        return coarse_and(parts, conditions, _may_raise)
    if any(cond is None for cond, _ in parts):
        return _NONE
    conds = [cond for cond, _ in parts if cond is not None]
    if op == "OR":
        return {"operator": "OR", "conditions": conds}, all(ex for _, ex in parts)
    if not all(ex for _, ex in parts):  # NOT
        return _NONE
    return {"operator": "NOT", "conditions": conds}, True


def translate_filter(filters: Mapping[str, Any], *, numbers: bool, max_members: int) -> Translation:
    """``(engine filter, exact)`` for a Haystack filter: the engine filter selecting a superset.

    The engine filter is ``None`` when nothing translates; ``exact`` tells whether it selects exactly what the
    matcher accepts (the matcher then raises on none of its rows).

    Args:
        filters: A Haystack filter (non-empty), already checked by :func:`._convert.validate_filters`.
        numbers: Translate numbers and booleans (``==``, ``in``, orderings): the local store's SQL compares them
            as Python does; a Milvus expression is not relied on for them.
        max_members: Longest ``in`` list translated (longer ones stay with the matcher).

    """
    return _node(filters, numbers, max_members)


def coarse_filter(filters: Mapping[str, Any], *, numbers: bool, max_members: int) -> dict[str, Any] | None:
    """The engine filter of :func:`translate_filter` alone."""
    return translate_filter(filters, numbers=numbers, max_members=max_members)[0]
