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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from rag_hier.errors import FilterError
from rag_hier.store.filters import Predicate

__all__ = ["build_predicate", "record_value"]

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
