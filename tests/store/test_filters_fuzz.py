"""Filters on hostile input: random nested structures compile to a predicate or raise FilterError (and the
predicate answers True/False or raises FilterError), never another exception; deep nesting is refused."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_hier.errors import FilterError
from rag_hier.store.filters import compile_filter

RECORDS = [
    {"id": "d#0", "doc_id": "d", "content": "text", "position": 0, "title_path": ["T"], "meta": {}},
    {
        "id": "e#1",
        "doc_id": "e",
        "content": "more",
        "position": 1,
        "title_path": [],
        "meta": {"year": 2021, "date": "2021-03-04", "tags": ["a", "b"], "n": None, "nested": {"k": [1, {"x": 2}]}},
    },
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["2021-01-01", "AND", "OR", "NOT", "==", ">=", "in", "not in", "meta.year", "meta.tags"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(scalars, max_size=3)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
OPERATORS = ["==", "!=", ">", ">=", "<", "<=", "in", "not in", "AND", "OR", "NOT", "and", "", "~"]
FIELDS = ["meta.year", "meta.date", "meta.tags", "meta.nested.k", "meta.n", "id", "doc_id", "content", "position",
          "title_path", "year", "meta.", "meta.missing.deeper"]  # fmt: skip
comparisons = st.fixed_dictionaries(
    {"field": st.sampled_from(FIELDS) | values, "operator": st.sampled_from(OPERATORS) | values, "value": values}
)


def nodes(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    logical = st.fixed_dictionaries(
        {"operator": st.sampled_from(OPERATORS) | values, "conditions": st.lists(inner, max_size=3) | values}
    )
    partial = st.dictionaries(
        st.sampled_from(["field", "operator", "value", "conditions", "other"]), values, max_size=4
    )
    return logical | partial | inner


filters = st.recursive(comparisons, nodes, max_leaves=8) | values


def run(spec: Any) -> None:
    try:
        predicate = compile_filter(spec)
    except FilterError:
        return
    if predicate is None:
        return
    for record in RECORDS:
        with contextlib.suppress(FilterError):
            assert predicate(record) in (True, False)


@given(spec=filters)
@settings(max_examples=300, deadline=None)
def test_random_filters_give_a_result_or_a_filter_error(spec: Any) -> None:
    run(spec)


@given(spec=filters)
@settings(max_examples=100, deadline=None)
def test_random_filters_through_json(spec: Any) -> None:
    # what the CLI's --filters and the framework adapters hand over: JSON-shaped data
    try:
        text = json.dumps(spec, default=list)
    except (TypeError, ValueError):
        return
    run(json.loads(text))


def nest(depth: int, kind: str) -> Any:
    if kind == "logical":
        node: Any = {"field": "meta.year", "operator": "==", "value": 1}
        for _ in range(depth):
            node = {"operator": "AND", "conditions": [node]}
        return node
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return {"field": "meta.year", "operator": "in", "value": value}


@pytest.mark.parametrize("kind", ["logical", "value"])
@pytest.mark.parametrize("depth", [400, 1000, 5000])
def test_deep_filters_are_one_clear_error(kind: str, depth: int) -> None:
    with pytest.raises(FilterError, match="more than 100 levels deep"):
        compile_filter(nest(depth, kind))


def test_filters_within_the_limit_work() -> None:
    predicate = compile_filter(nest(49, "logical"))  # 49 logical levels = 98 dict/list levels, + 1 comparison
    assert predicate is not None
    assert predicate(RECORDS[1]) is False


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"field": "meta.year", "operator": ["=="], "value": 1}, "unknown comparison operator ['==']"),
        ({"operator": {"AND": 1}, "conditions": []}, "unknown logical operator {'AND': 1}"),
    ],
)
def test_unhashable_operators_are_filter_errors(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(FilterError, match=re.escape(fragment)):
        compile_filter(spec)


def test_in_with_a_set_and_a_list_valued_field() -> None:
    predicate = compile_filter({"field": "meta.tags", "operator": "in", "value": {"a", "b"}})
    assert predicate is not None
    assert predicate(RECORDS[1]) is False  # the list ["a", "b"] is not one of the values (and no TypeError)
    predicate = compile_filter({"field": "meta.tags", "operator": "not in", "value": frozenset({"a"})})
    assert predicate is not None
    assert predicate(RECORDS[1]) is True
