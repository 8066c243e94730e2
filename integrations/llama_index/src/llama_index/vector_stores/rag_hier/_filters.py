"""LlamaIndex ``MetadataFilters`` (plus ``doc_ids`` / ``node_ids``) as a predicate over rag-hier passage records.

The semantics are those of llama-index-core's reference evaluator
(``llama_index.core.vector_stores.utils.build_metadata_filter_fn``, used by ``SimpleVectorStore``), with
nested ``MetadataFilters`` added (the reference raises on them):

- a missing key (or a ``None`` value) matches only ``!=`` and ``nin``; ``is_empty`` matches a missing key,
  ``None``, ``""`` and ``[]``;
- ``contains`` is ``value in metadata_value``; ``any`` / ``all`` test list metadata against a list value;
  ``text_match`` (``_insensitive``) is a substring test on strings;
- ``and`` / ``or`` combine the filters; ``not`` matches when *none* of them match; an empty filter list
  matches everything;
- besides the node's own metadata, the keys ``doc_id``, ``ref_doc_id`` and ``document_id`` (the node's
  SOURCE document id, or ``"None"``) and ``_node_type`` can be filtered on, as in ``SimpleVectorStore``.

An ordering comparison between incompatible types (say ``>`` between a string and a number) raises
:class:`rag_hier.errors.FilterError` naming the key, where the reference raises a bare ``TypeError``.

:func:`build_filter` adds a coarse engine filter (:class:`rag_hier.store.filters.Refined`) for the parts whose
semantics the engine's filter dicts provably share, which the store pushes down (SQLite, a Milvus expression);
the predicate then runs only on the rows it selects. Translated (a superset of the predicate's answer, *exact*
where marked; anything else stays with the predicate alone):

- ``node_ids`` → ``id in``, ``doc_ids`` → ``doc_id in`` (exact);
- on a key of letters, digits, ``_`` and ``-``: ``==``, ``!=``, ``in``, ``nin`` with strings (exact: a missing
  key equals no string, and ``!=`` / ``nin`` match it on both sides); on the local store also with numbers and
  booleans, and ``>``/``>=``/``<``/``<=`` with a number (the engine's SQL flags every row holding a string,
  list or object there, on which the predicate raises, and then falls back to the predicate on every row);
- ``doc_id`` / ``ref_doc_id`` / ``document_id`` ``==`` / ``in`` strings other than ``"None"`` → the passage's
  ``doc_id`` (a superset: a node without SOURCE is stored under its own id and filtered as ``"None"``);
- ``and`` keeps the filters that translate and drops the others unless a dropped one may raise (orderings,
  ``contains``, ``any``, ``all``, ``text_match``, ``in``/``nin`` without a list), in which case the ``and`` does
  not translate; ``or`` when every filter translates; ``not`` when every filter translates exactly.

Where the whole filter translates exactly, the engine answers it alone (``Refined(equivalent=True)``: no record
is read to run the predicate where the store answers the engine filter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from rag_hier.errors import FilterError
from rag_hier.store.filters import CoarseTranslation, Predicate, Refined, coarse_and

__all__ = ["build_filter", "build_predicate", "coarse_filter", "record_value", "translate_filters"]

NODE_KEY = "llama_index"
"""Key of the LlamaIndex payload in a passage's ``extra`` (node JSON, class name, SOURCE id)."""

_REF_DOC_KEYS = frozenset({"doc_id", "ref_doc_id", "document_id"})


def record_value(record: Mapping[str, Any], key: str) -> Any:
    """The value a filter on ``key`` sees for a passage record (``None`` when absent)."""
    payload = record.get("extra", {}).get(NODE_KEY)
    if key in _REF_DOC_KEYS:
        if payload is None:  # a passage written by the engine itself: its document is its source
            return record.get("doc_id")
        ref = payload.get("ref_doc_id")
        return ref if ref is not None else "None"
    if key == "_node_type":
        return payload.get("type") if payload is not None else "TextNode"
    return record.get("meta", {}).get(key)


def _type_error(key: str, op: FilterOperator, actual: Any, value: Any, exc: Exception) -> FilterError:
    return FilterError(
        f"metadata filter on {key!r}: cannot apply {op.value!r} to the stored value {actual!r} "
        f"and the filter value {value!r} ({exc})"
    )


def _test(op: FilterOperator, value: Any, key: str) -> Callable[[Any], bool]:
    """``actual -> bool`` for one operator and value, with the reference's handling of ``None``."""
    if op == FilterOperator.IS_EMPTY:
        return lambda actual: actual is None or actual == "" or actual == []
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        insensitive = op == FilterOperator.TEXT_MATCH_INSENSITIVE
        needle = value.lower() if insensitive and isinstance(value, str) else value

        def text_match(actual: Any) -> bool:
            if actual is None:
                return False
            if not isinstance(value, str) or not isinstance(actual, str):
                raise FilterError(
                    f"metadata filter on {key!r}: {op.value!r} needs strings, got the stored value {actual!r} "
                    f"and the filter value {value!r}"
                )
            return needle in (actual.lower() if insensitive else actual)

        return text_match
    if op == FilterOperator.EQ:  # the common cases, without the TypeError guard (== never raises it)
        return lambda actual: actual is not None and bool(actual == value)
    if op == FilterOperator.NE:
        return lambda actual: actual is None or bool(actual != value)
    compare: dict[FilterOperator, Callable[[Any], bool]] = {
        FilterOperator.EQ: lambda a: bool(a == value),
        FilterOperator.NE: lambda a: bool(a != value),
        FilterOperator.GT: lambda a: bool(a > value),
        FilterOperator.GTE: lambda a: bool(a >= value),
        FilterOperator.LT: lambda a: bool(a < value),
        FilterOperator.LTE: lambda a: bool(a <= value),
        FilterOperator.IN: lambda a: a in value,
        FilterOperator.NIN: lambda a: a not in value,
        FilterOperator.CONTAINS: lambda a: value in a,
        FilterOperator.ANY: lambda a: any(v in a for v in value),
        FilterOperator.ALL: lambda a: all(v in a for v in value),
    }
    if op not in compare:
        raise FilterError(f"metadata filter on {key!r}: unsupported operator {op!r}")
    fn = compare[op]
    on_missing = op in (FilterOperator.NE, FilterOperator.NIN)

    def check(actual: Any) -> bool:
        if actual is None:
            return on_missing
        try:
            return fn(actual)
        except TypeError as exc:
            raise _type_error(key, op, actual, value, exc) from exc

    return check


def _compile(filters: MetadataFilters) -> Predicate:
    parts: list[Predicate] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            parts.append(_compile(f))
        elif isinstance(f, MetadataFilter):
            parts.append(_compile_one(f))
        else:
            raise FilterError(f"MetadataFilters.filters holds a {type(f).__name__}; expected MetadataFilter(s)")
    if not parts:
        return lambda rec: True
    condition = filters.condition or FilterCondition.AND
    if len(parts) == 1 and condition in (FilterCondition.AND, FilterCondition.OR):
        return parts[0]
    if condition == FilterCondition.AND:
        return lambda rec: all(p(rec) for p in parts)
    if condition == FilterCondition.OR:
        return lambda rec: any(p(rec) for p in parts)
    if condition == FilterCondition.NOT:
        return lambda rec: not any(p(rec) for p in parts)
    raise FilterError(f"unsupported filter condition {condition!r}; allowed: and, or, not")


def _compile_one(f: MetadataFilter) -> Predicate:
    key = f.key
    test = _test(FilterOperator(f.operator), f.value, key)
    if key in _REF_DOC_KEYS or key == "_node_type":
        return lambda rec: test(record_value(rec, key))
    return lambda rec: test(rec["meta"].get(key))


def build_predicate(
    filters: MetadataFilters | None = None,
    *,
    doc_ids: Iterable[str] | None = None,
    node_ids: Iterable[str] | None = None,
) -> Callable[[Mapping[str, Any]], bool] | None:
    """One predicate over passage records for metadata filters, document ids and node ids.

    An empty or ``None`` ``doc_ids`` / ``node_ids`` means no restriction (``VectorIndexRetriever`` sends
    ``node_ids=[]`` to stores that keep their own text). Returns ``None`` when nothing restricts.
    """
    checks: list[Predicate] = []
    node_set = set(node_ids or ())
    if node_set:
        checks.append(lambda rec: rec.get("id") in node_set)
    doc_set = set(doc_ids or ())
    if doc_set:
        checks.append(lambda rec: rec.get("doc_id") in doc_set)
    if filters is not None and filters.filters:
        checks.append(_compile(filters))
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]
    return lambda rec: all(c(rec) for c in checks)


# ----------------------------------------------------------------------------------------------------
# the coarse engine filter pushed down with the predicate
# ----------------------------------------------------------------------------------------------------
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")
_ORDER = {FilterOperator.GT: ">", FilterOperator.GTE: ">=", FilterOperator.LT: "<", FilterOperator.LTE: "<="}
_MAY_RAISE = frozenset(
    {
        *_ORDER,
        FilterOperator.CONTAINS,
        FilterOperator.ANY,
        FilterOperator.ALL,
        FilterOperator.TEXT_MATCH,
        FilterOperator.TEXT_MATCH_INSENSITIVE,
    }
)
_NUMBER_LIMIT = 2**53

Translation = CoarseTranslation
"""``(engine filter or None when untranslatable, whether it is exact)``."""
_NONE: Translation = (None, False)


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and abs(value) < _NUMBER_LIMIT


def _equatable(value: Any, numbers: bool) -> bool:
    if isinstance(value, str):
        return True
    return numbers and (isinstance(value, bool) or _number(value))


def _leaf(f: MetadataFilter, numbers: bool, max_members: int) -> Translation:
    op, key, value = FilterOperator(f.operator), f.key, f.value
    members = value if op in (FilterOperator.IN, FilterOperator.NIN) else [value]
    if not isinstance(members, list) or len(members) > max_members:
        return _NONE
    if key in _REF_DOC_KEYS:
        if op in (FilterOperator.EQ, FilterOperator.IN) and all(isinstance(v, str) and v != "None" for v in members):
            return {"field": "doc_id", "operator": "in", "value": list(members)}, False
        return _NONE
    if not _KEY.match(key) or key == "_node_type":
        return _NONE
    field = f"meta.{key}"
    if op in _ORDER:
        if numbers and _number(value):
            return {"field": field, "operator": _ORDER[op], "value": value}, True
        return _NONE
    ops = {FilterOperator.EQ: "==", FilterOperator.NE: "!=", FilterOperator.IN: "in", FilterOperator.NIN: "not in"}
    if op not in ops or not all(_equatable(v, numbers) for v in members):
        return _NONE
    return {"field": field, "operator": ops[op], "value": value}, True


def _may_raise(f: MetadataFilter | MetadataFilters) -> bool:
    if isinstance(f, MetadataFilters):
        return any(_may_raise(g) for g in f.filters)
    op = FilterOperator(f.operator)
    return op in _MAY_RAISE or (op in (FilterOperator.IN, FilterOperator.NIN) and not isinstance(f.value, list))


def _node(filters: MetadataFilters, numbers: bool, max_members: int) -> Translation:
    parts = [
        _node(f, numbers, max_members) if isinstance(f, MetadataFilters) else _leaf(f, numbers, max_members)
        for f in filters.filters
    ]
    if not parts:  # the predicate matches everything
        return {"operator": "AND", "conditions": []}, True
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return coarse_and(parts, filters.filters, _may_raise)
    if any(cond is None for cond, _ in parts):
        return _NONE
    either = {"operator": "OR", "conditions": [cond for cond, _ in parts]}
    if condition == FilterCondition.OR:
        return either, all(ex for _, ex in parts)
    if condition == FilterCondition.NOT and all(ex for _, ex in parts):
        return {"operator": "NOT", "conditions": [either]}, True
    return _NONE


def coarse_filter(
    filters: MetadataFilters | None = None,
    *,
    doc_ids: Iterable[str] | None = None,
    node_ids: Iterable[str] | None = None,
    numbers: bool,
    max_members: int,
) -> dict[str, Any] | None:
    """The engine filter of :func:`translate_filters` alone."""
    return translate_filters(filters, doc_ids=doc_ids, node_ids=node_ids, numbers=numbers, max_members=max_members)[0]


def translate_filters(
    filters: MetadataFilters | None = None,
    *,
    doc_ids: Iterable[str] | None = None,
    node_ids: Iterable[str] | None = None,
    numbers: bool,
    max_members: int,
) -> Translation:
    """``(engine filter, exact)`` for LlamaIndex filters: the engine filter selecting a superset.

    The engine filter selects a superset of what :func:`build_predicate` accepts (``None`` when nothing
    translates); ``exact`` tells whether it selects exactly that (the predicate then raises on none of its rows).

    Args:
        filters: The metadata filters (already compiled by :func:`build_predicate`, which checks them).
        doc_ids: Document ids (empty: no restriction).
        node_ids: Node ids (empty: no restriction).
        numbers: Translate numbers and booleans (``==``, ``in``, orderings): the local store's SQL compares them
            as Python does; a Milvus expression is not relied on for them.
        max_members: Longest ``in`` list translated (longer ones stay with the predicate).

    """
    conditions: list[dict[str, Any]] = []
    exact = True
    # the predicate tests node_ids, then doc_ids, then the filters: rows these exclude never reach the filters
    for field, ids in (("id", node_ids), ("doc_id", doc_ids)):
        members = list(dict.fromkeys(ids or ()))
        if members and len(members) <= max_members and all(isinstance(m, str) for m in members):
            conditions.append({"field": field, "operator": "in", "value": members})
        elif members:
            exact = False
    if filters is not None and filters.filters:
        cond, cond_exact = _node(filters, numbers, max_members)
        if cond is not None:
            conditions.append(cond)
        exact = exact and cond_exact
    if not conditions:
        return _NONE
    return (conditions[0] if len(conditions) == 1 else {"operator": "AND", "conditions": conditions}), exact


def build_filter(
    filters: MetadataFilters | None = None,
    *,
    doc_ids: Iterable[str] | None = None,
    node_ids: Iterable[str] | None = None,
    numbers: bool,
    max_members: int,
) -> Predicate | None:
    """:func:`build_predicate`, as a :class:`~rag_hier.store.filters.Refined` where part of it can be pushed down.

    ``numbers`` and ``max_members``: see :func:`coarse_filter`.
    """
    doc_ids = None if doc_ids is None else list(doc_ids)
    node_ids = None if node_ids is None else list(node_ids)
    predicate = build_predicate(filters, doc_ids=doc_ids, node_ids=node_ids)
    if predicate is None:
        return None
    coarse, exact = translate_filters(
        filters, doc_ids=doc_ids, node_ids=node_ids, numbers=numbers, max_members=max_members
    )
    return predicate if coarse is None else Refined(coarse, predicate, equivalent=exact)
