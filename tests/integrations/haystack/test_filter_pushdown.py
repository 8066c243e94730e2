"""Haystack filters pushed down to the engine (``_pushdown.coarse_filter`` + ``Refined``): the same answers as the
reference matcher alone, on random filters over mixed-type metadata, on the local store and on Milvus Lite.

For every generated filter: the coarse engine filter selects a superset of what the reference matcher accepts,
and ``filter_documents``, ``count_documents_by_filter`` and ``embedding_retrieval`` give what they give with no
coarse filter at all (the same documents in the same order, or the same error).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any
from unittest import mock

import numpy as np
import pytest
from haystack import Document
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore, _pushdown
from haystack_integrations.document_stores.rag_hier import document_store as document_store_module
from haystack_integrations.document_stores.rag_hier._pushdown import coarse_filter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_hier.corpus.model import Passage
from rag_hier.errors import FilterError as EngineFilterError
from rag_hier.store import HierStore, Refined
from rag_hier.testing import check_coarse_translation

DIM = 4
VALUES: list[Any] = [
    "a", "b", "A", "", "a b", "2021-01-01", "2021-01-01T00:00:00", "2021-01-01 00:00:00+00:00", "d1", "e1",
    0, 1, 2, -1, 1.0, 1.5, 2**60, True, False, None,
    ["a"], ["a", "b"], [1], {"a": 1}, ("a",),
    datetime(2021, 1, 1), datetime(2021, 1, 1, tzinfo=timezone.utc),
]  # fmt: skip
KEYS = ["k", "n", "source_id", "split_id", "doc_id", "title_path"]
FIELDS = [
    "id", "meta.k", "k", "meta.n", "n", "meta.source_id", "source_id", "meta.split_id", "meta.doc_id", "doc_id",
    "meta.title_path", "meta.missing", "content", "meta.k.x", "meta.bad key", "embedding",
]  # fmt: skip
FILTER_VALUES = st.sampled_from([v for v in VALUES if not isinstance(v, tuple | dict)] + ["p3", "p7", "e0#0", "zz"])


def _meta(rng: random.Random) -> dict[str, Any]:
    return {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.6}


def _documents(n: int = 40) -> list[Document]:
    rng = random.Random(7)
    vecs = np.random.default_rng(7).standard_normal((n, DIM))
    return [Document(id=f"p{i}", content=f"text {i}", meta=_meta(rng), embedding=vecs[i].tolist()) for i in range(n)]


def _engine_passages(n: int = 8) -> list[Passage]:
    """Passages written by the engine itself (the Haystack view fills in source_id, split_id, title_path)."""
    rng = random.Random(8)
    out = []
    for i in range(n):
        meta = {k: rng.choice(VALUES) for k in ("k", "n", "source_id") if rng.random() < 0.5}
        meta = {k: list(v) if isinstance(v, tuple) else v for k, v in meta.items() if not isinstance(v, datetime)}
        out.append(Passage(f"e{i % 3}#{i}", f"e{i % 3}", i, f"engine {i}", ("T",), meta=meta))
    return out


@pytest.fixture(scope="module", params=["local", "milvus"])
def document_store(request, tmp_path_factory) -> Iterator[RagHierDocumentStore]:
    if request.param == "local":
        ds = RagHierDocumentStore(path=str(tmp_path_factory.mktemp("pushdown") / "store"))
    else:
        ds = RagHierDocumentStore(uri=request.getfixturevalue("milvus_collections")(DIM).location)
    ds.write_documents(_documents())
    engine = _engine_passages()
    vecs = np.random.default_rng(8).standard_normal((len(engine), DIM))
    ds._write_handle().add_passages(engine, embeddings=list(vecs))
    yield ds


leaves = st.fixed_dictionaries(
    {
        "field": st.sampled_from(FIELDS),
        "operator": st.sampled_from(["==", "!=", ">", ">=", "<", "<=", "in", "not in"]),
        "value": FILTER_VALUES | st.lists(FILTER_VALUES, max_size=3),
    }
)
filters = st.recursive(
    leaves,
    lambda inner: st.fixed_dictionaries(
        {"operator": st.sampled_from(["AND", "OR", "NOT"]), "conditions": st.lists(inner, max_size=3)}
    ),
    max_leaves=5,
)


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:
        return "error", type(exc).__name__


def _answers(ds: RagHierDocumentStore, spec: dict[str, Any]) -> list[tuple[str, Any]]:
    query = [1.0, 0.5, -0.25, 0.125]
    return [
        _outcome(lambda: [d.id for d in ds.filter_documents(spec)]),
        _outcome(lambda: ds.count_documents_by_filter(spec)),
        _outcome(lambda: [(d.id, round(d.score, 5)) for d in ds.embedding_retrieval(query, spec, top_k=60)]),
    ]


def _leaf(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"field": field, "operator": op, "value": value}


def _not(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"operator": "NOT", "conditions": list(conditions)}


def _no_pushdown() -> Any:
    return mock.patch.object(document_store_module, "translate_filter", lambda *a, **k: (None, False))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=filters)
@example(spec=_not({"operator": "AND", "conditions": [_leaf("meta.k", "==", "a"), _leaf("content", "==", "text 3")]}))
@example(spec=_not(_leaf("meta.source_id", "==", "e1")))
@example(  # SentenceWindowRetriever's filter
    spec={
        "operator": "AND",
        "conditions": [
            _leaf("meta.source_id", "==", "e1"),
            _leaf("meta.split_id", ">=", 1),
            _leaf("meta.split_id", "<=", 4),
        ],
    }
)
@example(spec=_not(_leaf("meta.split_id", ">", 1)))
@example(spec={"operator": "OR", "conditions": [_leaf("k", "==", "a"), _leaf("n", ">", 1)]})
@example(spec={"operator": "AND", "conditions": [_leaf("meta.n", ">=", 1), _leaf("meta.k", "in", ["a", "b"])]})
@example(spec={"operator": "AND", "conditions": [_leaf("meta.k", "==", "a"), _leaf("meta.n", "<", "2021-01-02")]})
def test_pushdown_gives_the_reference_answers(document_store: RagHierDocumentStore, spec: dict[str, Any]) -> None:
    after = _answers(document_store, spec)
    with _no_pushdown():
        before = _answers(document_store, spec)
    assert after == before
    if before[0][0] != "ok":
        return
    store = document_store._read_handle()
    local = isinstance(store, HierStore)
    coarse = coarse_filter(spec, numbers=local, max_members=1000)
    if coarse is None:
        return
    try:
        selected = {p.id for p in store.filter_passages(coarse)}
    except EngineFilterError:  # the engine's Python rules raise: the store never uses them for a coarse filter
        return
    assert set(before[0][1]) <= selected


LEAF_VALUES = [v for v in VALUES if not isinstance(v, tuple | dict)] + ["p3", "e1", "zz", ["a", None], ["d1", "e1"]]


def test_every_translated_leaf_is_a_superset_and_exact_where_it_says(document_store: RagHierDocumentStore) -> None:
    """Every comparison the generators use, on every field: the rows the backend selects for its translation
    contain the rows the reference matcher accepts, and are exactly those where the translation says it is exact
    (which is what makes ``!=``, ``not in`` and ``NOT`` over it safe)."""
    store = document_store._read_handle()
    local = isinstance(store, HierStore)
    records = list(store.iter_records())
    checked = 0
    for field in FIELDS:
        for op in ["==", "!=", ">", ">=", "<", "<=", "in", "not in"]:
            for value in LEAF_VALUES:
                if op in ("in", "not in") and not isinstance(value, list):
                    value = [value]
                if op not in ("in", "not in") and isinstance(value, list) and op not in ("==", "!="):
                    continue
                leaf = {"field": field, "operator": op, "value": value}
                coarse, exact = _pushdown._node(leaf, local, 1000)
                if coarse is None:
                    continue
                predicate = document_store._predicate(leaf, store)
                checked += check_coarse_translation(
                    store, records, predicate, coarse, exact, label=leaf, predicate_errors=(Exception,)
                )
    assert checked > (300 if local else 100)


def test_predicate_sees_only_the_rows_the_coarse_filter_selects(document_store: RagHierDocumentStore) -> None:
    spec = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.k", "operator": "in", "value": ["a", "b"]},
            {"field": "content", "operator": "!=", "value": "zz"},  # not translated, never raises
        ],
    }
    store = document_store._read_handle()
    pred = document_store._predicate(spec, store)
    assert isinstance(pred, Refined)
    assert pred.coarse == {
        "operator": "AND",
        "conditions": [{"field": "meta.k", "operator": "in", "value": ["a", "b"]}],
    }
    calls = []
    real = document_store_module.document_matches_filter
    with mock.patch.object(
        document_store_module, "document_matches_filter", lambda *a, **k: calls.append(1) or real(*a, **k)
    ):
        got = [d.id for d in document_store.filter_documents(spec)]
    every = document_store.filter_documents()
    expected = [d.id for d in every if d.meta.get("k") in ("a", "b")]
    assert got == expected and len(calls) == len(expected) < len(every)


def test_ordering_that_cannot_be_pushed_down_keeps_the_whole_filter_with_the_matcher() -> None:
    with_date = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.k", "operator": "==", "value": "a"},
            {"field": "meta.n", "operator": ">", "value": "2021-01-01"},  # may raise: not dropped from an AND
        ],
    }
    assert coarse_filter(with_date, numbers=True, max_members=10) is None
    numeric = {**with_date, "conditions": [with_date["conditions"][0], {"field": "n", "operator": ">", "value": 1}]}
    assert coarse_filter(numeric, numbers=True, max_members=10) == {
        "operator": "AND",
        "conditions": [
            {"field": "meta.k", "operator": "in", "value": ["a"]},
            {"field": "meta.n", "operator": ">", "value": 1},
        ],
    }
    assert coarse_filter(numeric, numbers=False, max_members=10) is None  # Milvus: orderings are not relied on
    # strings that may be ISO dates match other spellings of the instant in Haystack: not translated
    assert (
        coarse_filter({"field": "meta.k", "operator": "==", "value": "2021-01-01"}, numbers=True, max_members=9) is None
    )
    # source_id: the engine's own passages get their document id in the view
    assert coarse_filter(
        {"field": "meta.source_id", "operator": "==", "value": "d1"}, numbers=False, max_members=9
    ) == {
        "operator": "OR",
        "conditions": [
            {"field": "meta.source_id", "operator": "in", "value": ["d1"]},
            {"field": "doc_id", "operator": "in", "value": ["d1"]},
        ],
    }
    assert (
        coarse_filter({"field": "meta.source_id", "operator": "!=", "value": "d1"}, numbers=True, max_members=9) is None
    )
    # split_id: the engine's own passages get their position in the view
    assert coarse_filter({"field": "meta.split_id", "operator": ">=", "value": 2}, numbers=True, max_members=9) == {
        "operator": "OR",
        "conditions": [
            {"field": "meta.split_id", "operator": ">=", "value": 2},
            {"field": "position", "operator": ">=", "value": 2},
        ],
    }
    assert (
        coarse_filter({"field": "meta.title_path", "operator": "==", "value": "T"}, numbers=True, max_members=9) is None
    )
