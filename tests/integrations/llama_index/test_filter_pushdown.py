"""LlamaIndex filters pushed down to the engine (``_filters.coarse_filter`` + ``Refined``): the same answers as the
predicate alone, on random filters over mixed-type metadata, on the local store and on Milvus Lite.

For every translated comparison the rows the backend selects contain the rows the predicate accepts (exactly those
where the translation says it is exact), and for random nested filters with ``doc_ids`` / ``node_ids``,
``get_nodes`` and ``query`` give what they give with no coarse filter at all (or the same error).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.vector_stores.rag_hier import RagHierVectorStore, _filters
from pydantic import ValidationError

from rag_hier.corpus.model import Passage
from rag_hier.store import HierStore, Refined
from rag_hier.testing import check_coarse_translation

DIM = 4
VALUES: list[Any] = ["a", "b", "A", "", "None", "d1", "n3", 0, 1, 2, -1, 1.0, 1.5, 2**60, True, False, None,
                     ["a"], ["a", "b"], [1], {"x": 1}]  # fmt: skip
KEYS = ["k", "n", "doc_id", "ref_doc_id"]
FILTER_KEYS = ["k", "n", "doc_id", "ref_doc_id", "document_id", "_node_type", "bad key", "missing"]
SCALARS = ["a", "b", "A", "", "None", "d1", "n3", "e1", "zz", 0, 1, 2, -1, 1.0, 1.5, 2**60, None]
LISTS = [["a"], ["a", "b"], ["d1", "e1"], ["None"], [1], [1, 2], [1.5], []]
OPERATORS = list(FilterOperator)


def _nodes(n: int = 40) -> list[TextNode]:
    rng = random.Random(11)
    vecs = np.random.default_rng(11).standard_normal((n, DIM))
    out = []
    for i in range(n):
        meta = {k: rng.choice(VALUES) for k in KEYS if rng.random() < 0.6}
        rel = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"d{i % 5}")} if i % 4 else {}
        out.append(
            TextNode(id_=f"n{i}", text=f"text {i}", metadata=meta, embedding=vecs[i].tolist(), relationships=rel)
        )
    return out


def _engine_passages(n: int = 8) -> list[Passage]:
    rng = random.Random(12)
    return [
        Passage(f"e{i % 3}#{i}", f"e{i % 3}", i, f"engine {i}", meta={k: rng.choice(VALUES) for k in ("k", "n")})
        for i in range(n)
    ]


@pytest.fixture(scope="module", params=["local", "milvus"])
def vector_store(request, tmp_path_factory) -> Iterator[RagHierVectorStore]:
    if request.param == "local":
        vs = RagHierVectorStore(tmp_path_factory.mktemp("pushdown") / "store", dimension=DIM, similarity="dot_product")
    else:
        keeper = request.getfixturevalue("milvus_pool")(DIM, "dot_product")
        keeper.delete_all()
        vs = RagHierVectorStore(uri=keeper.location, similarity="dot_product")
    vs.add(_nodes())
    engine = _engine_passages()
    vs._writable().add_passages(engine, embeddings=list(np.random.default_rng(12).standard_normal((len(engine), DIM))))
    yield vs
    vs.close()


def _metadata_filter(key: str, op: FilterOperator, value: Any) -> MetadataFilter | None:
    try:
        return MetadataFilter(key=key, value=value, operator=op)
    except ValidationError:
        return None


leaves = st.builds(
    _metadata_filter,
    st.sampled_from(FILTER_KEYS),
    st.sampled_from(OPERATORS),
    st.sampled_from(SCALARS) | st.sampled_from(LISTS),
).filter(lambda f: f is not None)


def _group(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[MetadataFilters]:
    return st.builds(
        MetadataFilters,
        filters=st.lists(inner, max_size=3),
        condition=st.sampled_from([FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT, None]),
    )


filter_sets = _group(st.recursive(leaves, _group, max_leaves=5))
ids = st.none() | st.lists(st.sampled_from(["n1", "n2", "n3", "n17", "e1#1", "zz"]), max_size=4)
doc_ids = st.none() | st.lists(st.sampled_from(["d1", "d2", "e1", "n0", "zz"]), max_size=3)


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:
        return "error", type(exc).__name__


def _answers(vs: RagHierVectorStore, filters: MetadataFilters, node_ids: Any, doc_ids: Any) -> list[tuple[str, Any]]:
    query = VectorStoreQuery(
        query_embedding=[1.0, 0.5, -0.25, 0.125],
        similarity_top_k=60,
        filters=filters,
        node_ids=node_ids,
        doc_ids=doc_ids,
    )

    def search() -> list[tuple[str, float]]:
        result = vs.query(query)
        return [(i, round(s, 5)) for i, s in zip(result.ids or [], result.similarities or [], strict=True)]

    return [_outcome(lambda: [n.node_id for n in vs.get_nodes(filters=filters)]), _outcome(search)]


def _no_pushdown() -> Any:
    return mock.patch.object(_filters, "translate_filters", lambda *a, **k: (None, False))


def _f(key: str, op: str, value: Any) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=FilterOperator(op))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(filters=filter_sets, node_ids=ids, doc_ids=doc_ids)
@example(
    filters=MetadataFilters(
        filters=[MetadataFilters(filters=[_f("k", "==", "a"), _f("k", "is_empty", "")])], condition=FilterCondition.NOT
    ),
    node_ids=None,
    doc_ids=None,
)
@example(filters=MetadataFilters(filters=[_f("doc_id", "!=", "d1")]), node_ids=None, doc_ids=None)
@example(
    filters=MetadataFilters(filters=[_f("n", ">", 1), _f("k", "==", "a")], condition=FilterCondition.AND),
    node_ids=None,
    doc_ids=["d1", "e1"],
)
@example(filters=MetadataFilters(filters=[_f("k", "contains", "a"), _f("n", "==", 1)]), node_ids=["n3"], doc_ids=None)
def test_pushdown_gives_the_predicate_answers(
    vector_store: RagHierVectorStore, filters: MetadataFilters, node_ids: Any, doc_ids: Any
) -> None:
    after = _answers(vector_store, filters, node_ids, doc_ids)
    with _no_pushdown():
        before = _answers(vector_store, filters, node_ids, doc_ids)
    assert after == before


def test_every_translated_filter_is_a_superset_and_exact_where_it_says(vector_store: RagHierVectorStore) -> None:
    store = vector_store._reader
    local = isinstance(store, HierStore)
    records = list(store.iter_records())
    checked = 0
    for key in FILTER_KEYS:
        for op in OPERATORS:
            for value in SCALARS + LISTS:
                leaf = _metadata_filter(key, op, value)
                if leaf is None:
                    continue
                group = MetadataFilters(filters=[leaf])
                coarse, exact = _filters._node(group, local, 1000)
                if coarse is None:
                    continue
                predicate = _filters.build_predicate(group)
                assert predicate is not None
                # a predicate that raises here is not checked: the store falls back to it alone
                checked += check_coarse_translation(store, records, predicate, coarse, exact, label=leaf)
    assert checked > (150 if local else 50)


def test_predicate_sees_only_the_rows_the_coarse_filter_selects(vector_store: RagHierVectorStore) -> None:
    filters = MetadataFilters(filters=[_f("k", "in", ["a", "b"]), _f("k", "is_empty", "")], condition=None)
    refined = _filters.build_filter(filters, doc_ids=["d1", "d2", "e1"], numbers=False, max_members=10)
    assert isinstance(refined, Refined)
    assert refined.coarse == {
        "operator": "AND",
        "conditions": [
            {"field": "doc_id", "operator": "in", "value": ["d1", "d2", "e1"]},
            {"operator": "AND", "conditions": [{"field": "meta.k", "operator": "in", "value": ["a", "b"]}]},
        ],
    }
    seen = []
    spy = Refined(refined.coarse, lambda rec: seen.append(rec["id"]) or refined.exact(rec))
    got = [p.id for p in vector_store._reader.filter_passages(spy)]
    every = list(vector_store._reader.iter_records())
    coarse_rows = [r.passage_id for r in every if r.doc_id in ("d1", "d2", "e1") and r.meta.get("k") in ("a", "b")]
    assert seen == coarse_rows and len(seen) < len(every)
    assert got == [r.passage_id for r in every if refined.exact(r)]


def test_what_is_not_translated() -> None:
    def coarse(*fs: MetadataFilter, condition: FilterCondition = FilterCondition.AND, numbers: bool = True) -> Any:
        return _filters.coarse_filter(
            MetadataFilters(filters=list(fs), condition=condition), numbers=numbers, max_members=9
        )

    # a filter that may raise (ordering, contains, ...) is never dropped from an AND
    assert coarse(_f("k", "==", "a"), _f("n", ">", "b")) is None
    assert coarse(_f("k", "==", "a"), _f("n", "contains", "b")) is None
    # one that never raises is dropped (the predicate still applies it)
    assert coarse(_f("k", "==", "a"), _f("n", "is_empty", "")) == {
        "operator": "AND",
        "conditions": [{"field": "meta.k", "operator": "==", "value": "a"}],
    }
    # numbers only where SQL compares them as Python does (the local store)
    assert coarse(_f("n", "==", 1), numbers=False) is None
    assert coarse(_f("n", ">=", 1)) == {
        "operator": "AND",
        "conditions": [{"field": "meta.n", "operator": ">=", "value": 1}],
    }
    # doc_id is a superset only (a node without SOURCE is filtered as "None"): no NOT over it
    assert coarse(_f("doc_id", "==", "d1"), condition=FilterCondition.NOT) is None
    assert coarse(_f("doc_id", "==", "None")) is None
    # EQ None matches nothing in LlamaIndex, a missing key in the engine
    assert coarse(_f("k", "==", None)) is None
    # an id list too long to push down stays with the predicate, and the rest is then not the whole answer
    many = [f"n{i}" for i in range(10)]
    assert _filters.translate_filters(node_ids=many, numbers=True, max_members=9) == (None, False)
    one = MetadataFilters(filters=[_f("k", "==", "a")])
    assert _filters.translate_filters(one, node_ids=many[:3], numbers=True, max_members=9)[1] is True
    assert _filters.translate_filters(one, node_ids=many, numbers=True, max_members=9) == (
        {"operator": "AND", "conditions": [{"field": "meta.k", "operator": "==", "value": "a"}]},
        False,
    )
