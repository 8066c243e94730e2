"""RagHierVectorStore, modelled on llama-index-core's ``tests/vector_stores/test_simple.py``.

Every filter case is also run against ``SimpleVectorStore`` (the reference), so operator semantics match. Tests
taking ``store`` or ``make_store`` run on a local directory and on a Milvus Lite collection (``conftest.py``);
those about the directory itself (files, snapshots, temporary stores) run on the directory only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import (
    Document,
    IndexNode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    ExactMatchFilter,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier import Document as RagDocument
from rag_hier import HierStore
from rag_hier.errors import FilterError, StoreError
from rag_hier.store.milvus import MilvusStore

W1A = "AF3BE6C4-5F43-4D74-B075-6B0E07900DE8"
W2C = "7D9CD555-846C-445C-A9DD-F8924A01411D"
W3C = "452D24AB-F185-414C-A352-590B4B9EE51B"


def _nodes() -> list[TextNode]:
    """The three nodes of ``test_simple.py``."""
    return [
        TextNode(
            text="lorem ipsum",
            id_=W1A,
            embedding=[1.0, 0.0],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-0")},
            metadata={"weight": 1.0, "rank": "a", "quality": ["medium", "high"], "identifier": "6FTR78Yun"},
        ),
        TextNode(
            text="lorem ipsum",
            id_=W2C,
            embedding=[0.0, 1.0],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-1")},
            metadata={"weight": 2.0, "rank": "c", "quality": ["medium"], "identifier": "6FTR78Ygl"},
        ),
        TextNode(
            text="lorem ipsum",
            id_=W3C,
            embedding=[1.0, 1.0],
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-2")},
            metadata={"weight": 3.0, "rank": "c", "quality": ["low", "medium", "high"], "identifier": "6FTR78Ztl"},
        ),
    ]


@pytest.fixture
def store(make_store) -> RagHierVectorStore:
    s = make_store(2)
    s.add(_nodes())
    return s


def _query(store: BasePydanticVectorStore, filters: MetadataFilters | None = None, top_k: int = 3, **kw):
    return store.query(VectorStoreQuery(query_embedding=[1.0, 1.0], filters=filters, similarity_top_k=top_k, **kw))


def _mf(*filters: MetadataFilter | MetadataFilters, condition: FilterCondition = FilterCondition.AND):
    return MetadataFilters(filters=list(filters), condition=condition)


def _f(key: str, op: FilterOperator, value) -> MetadataFilter:
    return MetadataFilter(key=key, operator=op, value=value)


def _assert_same_ranking(ours, ref, inserted: list[str], abs_tol: float = 1e-6) -> None:
    """Same ids in the same order with the same similarities; among exactly tied similarities rag-hier puts
    the earlier-inserted node first (the engine's one tie rule), where SimpleVectorStore's order is an
    artifact of its heap, so tied nodes are compared as a set and ours checked for insertion order."""
    assert ours.similarities == pytest.approx(ref.similarities, abs=abs_tol)
    assert len(ours.ids) == len(ref.ids)
    i = 0
    while i < len(ours.ids):
        j = i + 1
        while j < len(ours.ids) and abs(ours.similarities[j] - ours.similarities[i]) <= abs_tol:
            j += 1
        assert set(ours.ids[i:j]) == set(ref.ids[i:j])
        i = j
    for k in range(len(ours.ids) - 1):
        if ours.similarities[k] == ours.similarities[k + 1]:
            assert inserted.index(ours.ids[k]) < inserted.index(ours.ids[k + 1])


# -- conventions ---------------------------------------------------------------------------------------
def test_class() -> None:
    names_of_base_classes = [b.__name__ for b in RagHierVectorStore.__mro__]
    assert BasePydanticVectorStore.__name__ in names_of_base_classes


def test_stores_text_and_serializable_config(store: RagHierVectorStore, store_path: str) -> None:
    assert store.stores_text is True
    assert RagHierVectorStore.class_name() == "RagHierVectorStore"
    cfg = store.to_dict()
    assert cfg["class_name"] == "RagHierVectorStore"
    if store.uri is None:
        assert cfg["path"] == store_path and "token" not in cfg
        assert isinstance(store.client, HierStore)
    else:
        assert cfg["path"] is None and cfg["uri"] == store.location and "token" not in cfg
        assert isinstance(store.client, MilvusStore)
    assert cfg["similarity"] == "cosine"


# -- test_simple.py, one to one ---------------------------------------------------------------------
def test_query_without_filters_returns_all_rows_sorted_by_similarity(store: RagHierVectorStore) -> None:
    result = _query(store)
    assert sorted(result.ids) == sorted([W1A, W2C, W3C])
    assert result.ids[0] == W3C
    assert [n.node_id for n in result.nodes] == result.ids
    assert result.similarities[0] == pytest.approx(1.0, abs=1e-6)


def test_query_with_filters_returns_multiple_matches(store: RagHierVectorStore) -> None:
    result = _query(store, _mf(ExactMatchFilter(key="rank", value="c")))
    assert result.ids == [W3C, W2C]


def test_query_with_filter_applies_top_k(store: RagHierVectorStore) -> None:
    result = _query(store, _mf(ExactMatchFilter(key="rank", value="c")), top_k=1)
    assert result.ids == [W3C]


def test_query_with_filter_applies_node_id_filter(store: RagHierVectorStore) -> None:
    result = _query(store, _mf(ExactMatchFilter(key="rank", value="c")), node_ids=[W3C])
    assert result.ids == [W3C]


def test_query_with_exact_filters_returns_single_match(store: RagHierVectorStore) -> None:
    filters = _mf(ExactMatchFilter(key="rank", value="c"), ExactMatchFilter(key="weight", value=2.0))
    assert _query(store, filters, top_k=1).ids == [W2C]


def test_query_with_contradictive_filter_returns_no_matches(store: RagHierVectorStore) -> None:
    filters = _mf(ExactMatchFilter(key="weight", value=2), ExactMatchFilter(key="weight", value=3))
    result = _query(store, filters)
    assert result.ids == [] and result.nodes == [] and result.similarities == []


def test_query_with_filter_on_unknown_field_returns_no_matches(store: RagHierVectorStore) -> None:
    assert _query(store, _mf(ExactMatchFilter(key="unknown_field", value="c"))).ids == []


def test_delete_removes_document_from_query_results(store: RagHierVectorStore) -> None:
    store.delete("test-1")
    assert _query(store, top_k=2).ids == [W3C, W1A]


def test_clear(store: RagHierVectorStore) -> None:
    store.clear()
    assert _query(store).ids == []
    assert store.get_nodes() == []


def test_a_single_id_string_is_a_type_error(store: RagHierVectorStore) -> None:
    for call in (store.delete_nodes, store.get_nodes):
        with pytest.raises(TypeError, match="takes a list of node ids, got the string"):
            call(W1A)
    assert len(store.get_nodes([W1A])) == 1  # nothing was deleted


def test_delete_nodes(store: RagHierVectorStore) -> None:
    store.delete_nodes([W1A, W2C])
    assert _query(store).ids == [W3C]


# Every operator and condition, checked against the expected ids *and* against SimpleVectorStore.
FILTER_CASES = {
    "or": (
        _mf(_f("rank", FilterOperator.EQ, "c"), _f("weight", FilterOperator.EQ, 1.0), condition=FilterCondition.OR),
        {W1A, W2C, W3C},
    ),
    "and": (_mf(_f("rank", FilterOperator.EQ, "c"), _f("weight", FilterOperator.EQ, 1.0)), set()),
    "not": (_mf(_f("rank", FilterOperator.EQ, "a"), condition=FilterCondition.NOT), {W2C, W3C}),
    "eq": (_mf(_f("weight", FilterOperator.EQ, 1.0)), {W1A}),
    "ne": (_mf(_f("weight", FilterOperator.NE, 1.0)), {W2C, W3C}),
    "gt": (_mf(_f("weight", FilterOperator.GT, 1.5)), {W2C, W3C}),
    "gte": (_mf(_f("weight", FilterOperator.GTE, 1.0)), {W1A, W2C, W3C}),
    "lt": (_mf(_f("weight", FilterOperator.LT, 1.1)), {W1A}),
    "lte": (_mf(_f("weight", FilterOperator.LTE, 1.0)), {W1A}),
    "in": (_mf(_f("rank", FilterOperator.IN, ["a", "c"])), {W1A, W2C, W3C}),
    "nin": (_mf(_f("rank", FilterOperator.NIN, ["c"])), {W1A}),
    "contains": (_mf(_f("quality", FilterOperator.CONTAINS, "high")), {W1A, W3C}),
    "text_match": (_mf(_f("identifier", FilterOperator.TEXT_MATCH, "6FTR78Y")), {W1A, W2C}),
    "text_match_insensitive": (_mf(_f("identifier", FilterOperator.TEXT_MATCH_INSENSITIVE, "6ftr78y")), {W1A, W2C}),
    "any": (_mf(_f("quality", FilterOperator.ANY, ["high", "low"])), {W1A, W3C}),
    "all": (_mf(_f("quality", FilterOperator.ALL, ["medium", "high"])), {W1A, W3C}),
    "is_empty_missing_key": (_mf(_f("not_existed_key", FilterOperator.IS_EMPTY, None)), {W1A, W2C, W3C}),
    "is_empty_present_key": (_mf(_f("rank", FilterOperator.IS_EMPTY, None)), set()),
    "ne_missing_key": (_mf(_f("missing", FilterOperator.NE, "x")), {W1A, W2C, W3C}),
    "nin_missing_key": (_mf(_f("missing", FilterOperator.NIN, ["x"])), {W1A, W2C, W3C}),
    "gt_missing_key": (_mf(_f("missing", FilterOperator.GT, 1)), set()),
    "ref_doc_id_key": (_mf(_f("ref_doc_id", FilterOperator.EQ, "test-1")), {W2C}),
    "doc_id_key_in": (_mf(_f("doc_id", FilterOperator.IN, ["test-0", "test-2"])), {W1A, W3C}),
    "node_type_key": (_mf(_f("_node_type", FilterOperator.EQ, "TextNode")), {W1A, W2C, W3C}),
    "empty_filters": (_mf(), {W1A, W2C, W3C}),
}


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_filter_operators_match_simple_vector_store(store: RagHierVectorStore, case: str) -> None:
    filters, expected = FILTER_CASES[case]
    ours = _query(store, filters)
    assert set(ours.ids) == expected
    reference = SimpleVectorStore()
    reference.add(_nodes())
    ref = _query(reference, filters)
    _assert_same_ranking(ours, ref, [n.node_id for n in _nodes()])


NESTED_CASES = {
    # rank == c AND (weight < 2.5 OR identifier contains "Ztl")
    "and_of_or": (
        _mf(
            _f("rank", FilterOperator.EQ, "c"),
            _mf(
                _f("weight", FilterOperator.LT, 2.5),
                _f("identifier", FilterOperator.TEXT_MATCH, "Ztl"),
                condition=FilterCondition.OR,
            ),
        ),
        {W2C, W3C},
    ),
    # rank == a OR (rank == c AND weight > 2)
    "or_of_and": (
        _mf(
            _f("rank", FilterOperator.EQ, "a"),
            _mf(_f("rank", FilterOperator.EQ, "c"), _f("weight", FilterOperator.GT, 2.0)),
            condition=FilterCondition.OR,
        ),
        {W1A, W3C},
    ),
    # NOT (quality contains low OR weight == 1)
    "not_of_or": (
        _mf(
            _mf(
                _f("quality", FilterOperator.CONTAINS, "low"),
                _f("weight", FilterOperator.EQ, 1.0),
                condition=FilterCondition.OR,
            ),
            condition=FilterCondition.NOT,
        ),
        {W2C},
    ),
    # three levels: weight >= 1 AND (NOT (rank == c AND (weight == 2 OR weight == 3)))
    "three_levels": (
        _mf(
            _f("weight", FilterOperator.GTE, 1.0),
            _mf(
                _mf(
                    _f("rank", FilterOperator.EQ, "c"),
                    _mf(
                        _f("weight", FilterOperator.EQ, 2.0),
                        _f("weight", FilterOperator.EQ, 3.0),
                        condition=FilterCondition.OR,
                    ),
                ),
                condition=FilterCondition.NOT,
            ),
        ),
        {W1A},
    ),
    "nested_empty_is_no_constraint": (
        _mf(_f("rank", FilterOperator.EQ, "c"), _mf(condition=FilterCondition.OR)),
        {W2C, W3C},
    ),
}


@pytest.mark.parametrize("case", list(NESTED_CASES))
def test_nested_filters(store: RagHierVectorStore, case: str) -> None:
    filters, expected = NESTED_CASES[case]
    assert set(_query(store, filters).ids) == expected
    assert {n.node_id for n in store.get_nodes(filters=filters)} == expected


def test_ordering_filter_on_incompatible_types_names_the_key(store: RagHierVectorStore) -> None:
    with pytest.raises(FilterError, match="rank"):
        _query(store, _mf(_f("rank", FilterOperator.GT, 1)))


# -- doc_ids / node_ids ----------------------------------------------------------------------------
def test_empty_node_ids_and_doc_ids_mean_no_restriction(store: RagHierVectorStore) -> None:
    assert len(_query(store, node_ids=[], doc_ids=[]).ids) == 3


def test_doc_ids_restrict_to_source_documents(store: RagHierVectorStore) -> None:
    assert _query(store, doc_ids=["test-0", "test-1"]).ids == [W1A, W2C] or set(
        _query(store, doc_ids=["test-0", "test-1"]).ids
    ) == {W1A, W2C}
    assert _query(store, doc_ids=["nope"]).ids == []


def test_node_ids_doc_ids_and_filters_combine(store: RagHierVectorStore) -> None:
    result = _query(
        store, _mf(_f("rank", FilterOperator.EQ, "c")), node_ids=[W1A, W2C, W3C], doc_ids=["test-1", "test-0"]
    )
    assert result.ids == [W2C]


def test_filters_are_applied_before_the_search(make_store) -> None:
    """A filter matching only far-away nodes still returns top_k of them (pre-filter, not post-filter)."""
    rng = np.random.default_rng(0)
    vs = make_store(16)
    near = np.array([1.0] + [0.0] * 15)
    nodes = []
    for i in range(600):
        far = i % 50 == 0
        v = -near + 0.05 * rng.standard_normal(16) if far else near + 0.05 * rng.standard_normal(16)
        nodes.append(
            TextNode(text=f"t{i}", id_=f"n{i}", embedding=v.tolist(), metadata={"far": "yes" if far else "no"})
        )
    vs.add(nodes)
    q = VectorStoreQuery(
        query_embedding=near.tolist(), similarity_top_k=10, filters=_mf(_f("far", FilterOperator.EQ, "yes"))
    )
    result = vs.query(q)
    assert len(result.ids) == 10
    assert all(int(i[1:]) % 50 == 0 for i in result.ids)
    assert result.similarities == sorted(result.similarities, reverse=True)


def test_random_oracle_against_simple_vector_store(make_store) -> None:
    """Same nodes, queries and (flat) filters: same ids in the same order, same similarities."""
    rng = np.random.default_rng(1)
    nodes = [
        TextNode(
            text=f"node {i}",
            id_=f"n{i:03d}",
            embedding=rng.standard_normal(8).tolist(),
            metadata={"cat": ["x", "y", "z"][i % 3], "n": int(i % 7), "tags": [f"t{i % 4}", f"t{i % 5}"]},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"d{i // 10}")},
        )
        for i in range(300)
    ]
    ours = make_store(8)
    ours.add(nodes)
    ref = SimpleVectorStore()
    ref.add(nodes)
    pool = [
        None,
        _mf(_f("cat", FilterOperator.EQ, "x")),
        _mf(_f("n", FilterOperator.GT, 3), _f("cat", FilterOperator.NE, "z")),
        _mf(
            _f("n", FilterOperator.IN, [1, 2]), _f("tags", FilterOperator.CONTAINS, "t3"), condition=FilterCondition.OR
        ),
        _mf(_f("tags", FilterOperator.ANY, ["t0", "t1"]), condition=FilterCondition.NOT),
        _mf(_f("doc_id", FilterOperator.EQ, "d7")),
    ]
    for qi in range(30):
        query = VectorStoreQuery(
            query_embedding=rng.standard_normal(8).tolist(), similarity_top_k=7, filters=pool[qi % len(pool)]
        )
        a, b = ours.query(query), ref.query(query)
        _assert_same_ranking(a, b, [n.node_id for n in nodes], abs_tol=1e-5)


# -- delete / get / clear ----------------------------------------------------------------------------
def _doc_nodes(doc: str, n: int, start: int = 0, dim: int = 4) -> list[TextNode]:
    rng = np.random.default_rng(abs(hash(doc)) % 2**32)
    return [
        TextNode(
            text=f"{doc} part {i}",
            id_=f"{doc}-{i}",
            embedding=rng.standard_normal(dim).tolist(),
            metadata={"doc": doc, "i": i},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
        )
        for i in range(start, start + n)
    ]


def test_delete_removes_every_node_of_the_document(make_store) -> None:
    vs = make_store(4)
    vs.add(_doc_nodes("a", 5) + _doc_nodes("b", 3))
    vs.add(_doc_nodes("a", 2, start=5))  # a document added in two calls
    vs.delete("a")
    assert {n.node_id for n in vs.get_nodes()} == {"b-0", "b-1", "b-2"}
    vs.delete("unknown")  # no-op
    assert len(vs.get_nodes()) == 3


def test_delete_nodes_by_ids_filters_or_both(make_store) -> None:
    vs = make_store(4)
    vs.add(_doc_nodes("a", 4) + _doc_nodes("b", 4))
    vs.delete_nodes(filters=_mf(_f("i", FilterOperator.EQ, 0)))
    assert {n.node_id for n in vs.get_nodes()} == {"a-1", "a-2", "a-3", "b-1", "b-2", "b-3"}
    vs.delete_nodes(node_ids=["a-1", "b-1", "b-2"], filters=_mf(_f("doc", FilterOperator.EQ, "b")))
    assert {n.node_id for n in vs.get_nodes()} == {"a-1", "a-2", "a-3", "b-3"}
    vs.delete_nodes(node_ids=["a-1", "missing"])
    assert {n.node_id for n in vs.get_nodes()} == {"a-2", "a-3", "b-3"}
    vs.delete_nodes()  # nothing named: nothing deleted (clear() empties the store)
    vs.delete_nodes(node_ids=[])
    assert len(vs.get_nodes()) == 3


def test_get_nodes(make_store) -> None:
    vs = make_store(4)
    vs.add(_doc_nodes("a", 3) + _doc_nodes("b", 3))
    assert [n.node_id for n in vs.get_nodes()] == ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]  # insertion order
    assert [n.node_id for n in vs.get_nodes(node_ids=["b-1", "missing", "a-0"])] == ["b-1", "a-0"]  # order asked
    assert [n.node_id for n in vs.get_nodes(filters=_mf(_f("i", FilterOperator.GTE, 2)))] == ["a-2", "b-2"]
    both = vs.get_nodes(node_ids=["a-2", "b-0", "b-2"], filters=_mf(_f("doc", FilterOperator.EQ, "b")))
    assert [n.node_id for n in both] == ["b-0", "b-2"]
    assert vs.get_nodes(node_ids=[]) == []
    assert all(n.embedding is None for n in vs.get_nodes())


def test_add_replaces_a_node_with_the_same_id(store: RagHierVectorStore) -> None:
    node = TextNode(text="new text", id_=W1A, embedding=[0.0, 1.0], metadata={"rank": "z"})
    assert store.add([node]) == [W1A]
    assert len(store.get_nodes()) == 3
    got = store.get_nodes(node_ids=[W1A])[0]
    assert got.get_content() == "new text" and got.metadata == {"rank": "z"}
    assert _query(store, _mf(_f("rank", FilterOperator.EQ, "z"))).similarities == pytest.approx([0.70710677], abs=1e-6)


def test_node_ids_are_never_reused_after_deletes(make_store) -> None:
    """The FaissMapVectorStore 0.7.0 failure: it takes ``ntotal`` as the next FAISS id, so after a delete a new
    node lands on the id of a live one and queries return the wrong node. Here FAISS ids are SQLite
    AUTOINCREMENT rowids, never reused (not even after clear() or a reopen)."""
    eye = np.eye(8)
    vs = make_store(8)
    vs.add([TextNode(text=f"n{i}", id_=f"n{i}", embedding=eye[i].tolist()) for i in range(3)])
    vs.delete_nodes(["n1"])
    vs.add([TextNode(text="n3", id_="n3", embedding=eye[3].tolist())])
    vs.delete_nodes(["n0"])
    vs.add(
        [
            TextNode(text="n4", id_="n4", embedding=eye[4].tolist()),
            TextNode(text="n5", id_="n5", embedding=eye[5].tolist()),
        ]
    )

    def check(s: RagHierVectorStore) -> None:
        for i in (2, 3, 4, 5):
            r = s.query(VectorStoreQuery(query_embedding=eye[i].tolist(), similarity_top_k=4))
            assert r.ids[0] == f"n{i}" and r.similarities[0] == pytest.approx(1.0)
            assert r.nodes[0].get_content() == f"n{i}"
            assert sorted(r.ids) == ["n2", "n3", "n4", "n5"]  # every live node exactly once
        rowids = s.client.rowids_of(passage_ids=["n2", "n3", "n4", "n5"])
        assert len(set(rowids.tolist())) == 4

    check(vs)
    before = int(vs.client.rowids_of().max())
    vs.clear()
    vs.add([TextNode(text="n6", id_="n6", embedding=eye[6].tolist())])
    assert int(vs.client.rowids_of().max()) > before
    vs.close()
    reopened = make_store(8)
    reopened.add([TextNode(text="n7", id_="n7", embedding=eye[7].tolist())])
    r = reopened.query(VectorStoreQuery(query_embedding=eye[6].tolist(), similarity_top_k=5))
    assert r.ids == ["n6", "n7"] or r.ids[0] == "n6"
    assert sorted(r.ids) == ["n6", "n7"]


# -- faithful round trip -----------------------------------------------------------------------------
def _rich_node() -> TextNode:
    return TextNode(
        text="Bees turn nectar into honey.",
        id_="child-1",
        embedding=[0.1, 0.2, 0.3],
        metadata={"topic": "bees", "year": 2010, "tags": ["a", "b"], "nested": {"k": [1, 2]}},
        excluded_embed_metadata_keys=["year"],
        excluded_llm_metadata_keys=["tags"],
        start_char_idx=10,
        end_char_idx=38,
        text_template="{metadata_str}||{content}",
        relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-bees", metadata={"file": "bees.md"}, hash="h1"),
            NodeRelationship.PARENT: RelatedNodeInfo(node_id="parent-1"),
            NodeRelationship.CHILD: [RelatedNodeInfo(node_id="leaf-1"), RelatedNodeInfo(node_id="leaf-2")],
            NodeRelationship.PREVIOUS: RelatedNodeInfo(node_id="child-0"),
            NodeRelationship.NEXT: RelatedNodeInfo(node_id="child-2"),
        },
    )


def _same(a, b) -> None:
    assert type(a) is type(b)
    assert a.model_dump(exclude={"embedding"}) == b.model_dump(exclude={"embedding"})


def test_nodes_round_trip_faithfully(make_store) -> None:
    originals = [
        _rich_node(),
        Document(text="A whole document.", id_="doc-x", metadata={"source": "x"}, embedding=[0.3, 0.2, 0.1]),
        IndexNode(text="summary", id_="idx-1", index_id="sub-index", embedding=[0.2, 0.2, 0.2]),
        TextNode(text="orphan", id_="orphan-1", embedding=[0.0, 0.0, 1.0]),
    ]
    vs = make_store(3)
    vs.add(originals)
    for got, want in zip(vs.get_nodes(node_ids=[n.node_id for n in originals]), originals, strict=True):
        _same(got, want)
    # through a query and after reopening the directory
    vs.close()
    reopened = make_store(3)
    r = reopened.query(VectorStoreQuery(query_embedding=[0.1, 0.2, 0.3], similarity_top_k=4))
    by_id = {n.node_id: n for n in r.nodes}
    for want in originals:
        _same(by_id[want.node_id], want)
    child = by_id["child-1"]
    assert child.ref_doc_id == "doc-bees" and child.parent_node.node_id == "parent-1"
    assert [c.node_id for c in child.child_nodes] == ["leaf-1", "leaf-2"]
    assert child.prev_node.node_id == "child-0" and child.next_node.node_id == "child-2"


def test_passage_mapping(make_store) -> None:
    vs = make_store(4)
    vs.add([*_doc_nodes("a", 2), TextNode(text="orphan", id_="o1", embedding=[1.0, 0, 0, 0], metadata={"m": 1})])
    vs.add(_doc_nodes("a", 1, start=2))
    passages = {p.id: p for p in vs.client.filter_passages()}
    assert [passages[f"a-{i}"].position for i in range(3)] == [0, 1, 2]
    assert passages["a-1"].doc_id == "a" and passages["a-1"].meta == {"doc": "a", "i": 1}
    assert passages["a-1"].text == "a part 1"
    assert passages["o1"].doc_id == "o1"  # a node without SOURCE is its own document
    vs.delete("o1")
    assert vs.get_nodes(node_ids=["o1"]) == []


def test_store_written_by_the_engine_reads_as_nodes(store_path: str, tiny_model_path: str) -> None:
    engine = HierStore.create(store_path, model=tiny_model_path)
    engine.add_documents([RagDocument("tides", "Tides", ("The moon makes tides.",), metadata={"topic": "sea"})])
    engine.close()
    vs = RagHierVectorStore(store_path)
    # the similarity the engine recorded (cosine: the model normalizes), as HierStore reports it
    assert vs.similarity == "cosine" == vs.reader.similarity and vs.model == tiny_model_path
    (node,) = vs.get_nodes()
    assert isinstance(node, TextNode) and node.ref_doc_id == "tides" and node.metadata == {"topic": "sea"}
    r = vs.query(VectorStoreQuery(query_str="moon", similarity_top_k=1))
    assert r.ids == [node.node_id]
    assert _query_ref(vs, "tides") == [node.node_id]


def _query_ref(vs: RagHierVectorStore, ref: str) -> list[str]:
    return [n.node_id for n in vs.get_nodes(filters=_mf(_f("ref_doc_id", FilterOperator.EQ, ref)))]


# -- encoder, similarity, errors ---------------------------------------------------------------------
def test_store_with_its_own_encoder_embeds_nodes_and_queries(store_path: str, tiny_model_path: str) -> None:
    vs = RagHierVectorStore(store_path, model=tiny_model_path)
    vs.add([TextNode(text="the moon pulls the sea", id_="a"), TextNode(text="bees make honey", id_="b")])
    r = vs.query(VectorStoreQuery(query_str="bees make honey", similarity_top_k=2))
    assert r.ids[0] == "b"
    assert vs.model == tiny_model_path
    assert RagHierVectorStore(store_path).model == tiny_model_path  # recorded in the store


def test_dot_product_keeps_vectors_as_given(make_store) -> None:
    vs = make_store(2, similarity="dot_product")
    vs.add(_nodes())
    r = _query(vs)
    assert r.ids[0] == W3C and r.similarities == pytest.approx([2.0, 1.0, 1.0])
    vs.close()
    assert make_store(2).similarity == "dot_product"  # recorded
    with pytest.raises(StoreError, match="similarity"):
        make_store(2, similarity="cosine")
    with pytest.raises(ValueError, match="similarity"):
        make_store(2, similarity="l2")  # type: ignore[arg-type]


def test_errors_name_the_problem(store: RagHierVectorStore) -> None:
    with pytest.raises(ValueError, match="no embedding"):
        store.add([TextNode(text="x", id_="x")])
    with pytest.raises(ValueError, match="default"):
        store.query(VectorStoreQuery(query_embedding=[1.0, 1.0], mode=VectorStoreQueryMode.MMR))
    with pytest.raises(ValueError, match="query_embedding"):
        store.query(VectorStoreQuery(query_str="text only"))
    with pytest.raises(ValueError, match="2-d"):
        store.query(VectorStoreQuery(query_embedding=[1.0, 1.0, 1.0]))
    assert store.query(VectorStoreQuery(query_embedding=[1.0, 1.0], similarity_top_k=0)).ids == []


def test_empty_store_queries_return_nothing(make_store) -> None:
    vs = make_store(2)
    assert vs.add([]) == []
    assert _query(vs).ids == []
    assert vs.get_nodes() == []


def test_temporary_store_is_removed_on_close() -> None:
    vs = RagHierVectorStore()
    vs.add(_nodes())
    root = vs.store_path
    assert root.is_dir() and vs.path is None
    vs.close()
    assert not root.parent.exists()


# -- persistence ---------------------------------------------------------------------------------------
def test_persist_and_from_persist_dir(tmp_path: Path) -> None:
    vs = RagHierVectorStore()  # temporary, like SimpleVectorStore
    vs.add(_nodes())
    vs.persist(str(tmp_path / "storage" / "default__vector_store.json"))
    assert (tmp_path / "storage" / "default__vector_store" / "manifest.json").is_file()
    assert not list((tmp_path / "storage").glob(".*"))  # no staging leftovers
    loaded = RagHierVectorStore.from_persist_dir(tmp_path / "storage")
    assert _query(loaded).ids == _query(vs).ids
    assert loaded.similarity == "cosine"
    # a second persist replaces the snapshot; later writes stay out of it until then
    vs.delete("test-0")
    loaded.close()
    vs.persist(str(tmp_path / "storage" / "default__vector_store.json"))
    assert len(RagHierVectorStore.from_persist_dir(tmp_path / "storage").get_nodes()) == 2
    with pytest.raises(StoreError, match="no rag-hier store"):
        RagHierVectorStore.from_persist_dir(tmp_path / "nowhere")


def test_persist_onto_its_own_directory_copies_nothing(tmp_path: Path) -> None:
    root = tmp_path / "storage" / "default__vector_store"
    vs = RagHierVectorStore(root)
    vs.add(_nodes())
    mtime = (root / "store.sqlite").stat().st_mtime_ns
    vs.persist(str(tmp_path / "storage" / "default__vector_store.json"))
    assert (root / "store.sqlite").stat().st_mtime_ns == mtime
    assert RagHierVectorStore.from_persist_dir(tmp_path / "storage").get_nodes(node_ids=[W1A])[0].node_id == W1A


def test_persist_refuses_to_overwrite_foreign_files(tmp_path: Path, store_path: str) -> None:
    store = RagHierVectorStore(store_path)
    store.add(_nodes())
    target = tmp_path / "p" / "default__vector_store"
    target.mkdir(parents=True)
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(StoreError, match="does not hold a rag-hier store"):
        store.persist(str(target) + ".json")
    assert (target / "precious.txt").read_text() == "keep me"


# -- async twins ---------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_async_twins(make_store) -> None:
    vs = make_store(2)
    assert await vs.async_add(_nodes()) == [W1A, W2C, W3C]
    r = await vs.aquery(VectorStoreQuery(query_embedding=[1.0, 1.0], similarity_top_k=3))
    assert r.ids[0] == W3C
    assert [n.node_id for n in await vs.aget_nodes(node_ids=[W2C])] == [W2C]
    await vs.adelete("test-2")
    await vs.adelete_nodes(filters=_mf(_f("rank", FilterOperator.EQ, "a")))
    assert [n.node_id for n in await vs.aget_nodes()] == [W2C]
    await vs.adelete_nodes([W2C])
    assert await vs.aget_nodes() == []
    await vs.async_add(_nodes())
    await vs.aclear()
    assert await vs.aget_nodes() == []


@pytest.mark.asyncio
async def test_concurrent_async_writes_and_queries_are_serialized(make_store) -> None:
    vs = make_store(8)
    rng = np.random.default_rng(3)
    batches = [
        [TextNode(text=f"{b}-{i}", id_=f"{b}-{i}", embedding=rng.standard_normal(8).tolist()) for i in range(20)]
        for b in range(8)
    ]
    queries = [VectorStoreQuery(query_embedding=rng.standard_normal(8).tolist(), similarity_top_k=5) for _ in range(16)]
    results = await asyncio.gather(*[vs.async_add(b) for b in batches], *[vs.aquery(q) for q in queries])
    assert len(await vs.aget_nodes()) == 160
    for r in results[len(batches) :]:
        assert len(r.ids) == len(set(r.ids)) <= 5


# -- filtered queries see every write --------------------------------------------------------------------
def test_filtered_queries_follow_writes(make_store) -> None:
    vs = make_store(4)
    vs.add(_doc_nodes("a", 3))
    only_b = _mf(_f("doc", FilterOperator.EQ, "b"))
    q = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0, 0.0], similarity_top_k=10, filters=only_b)
    assert vs.query(q).ids == []
    vs.add(_doc_nodes("b", 2))
    assert sorted(vs.query(q).ids) == ["b-0", "b-1"]
    vs.delete_nodes(["b-0"])
    assert vs.query(q).ids == ["b-1"]
    vs.client.update_meta(["a-0"], {"doc": "b"})  # a write through the engine handle counts too
    assert sorted(vs.query(q).ids) == ["a-0", "b-1"]
    vs.clear()
    assert vs.query(q).ids == []


def test_config_round_trips_through_to_dict(store: RagHierVectorStore, store_path: str) -> None:
    again = RagHierVectorStore.from_dict(store.to_dict())
    assert (again.path, again.uri) == ((store_path, None) if store.uri is None else (None, store.location))
    assert again.similarity == "cosine"
    assert _query(again).ids == _query(store).ids


def test_model_for_text_queries_on_a_store_fed_with_vectors(store_path: str, tiny_model_path: str) -> None:
    from llama_index.core.schema import MetadataMode

    from rag_hier.encoders import DenseEncoder

    enc = DenseEncoder(tiny_model_path, device="cpu")
    texts = {"a": "the moon pulls the sea", "b": "bees make honey"}
    vs = RagHierVectorStore(store_path)
    nodes = [TextNode(text=t, id_=i) for i, t in texts.items()]
    vecs = enc.encode_documents([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for n, v in zip(nodes, vecs, strict=True):
        n.embedding = v.tolist()
    vs.add(nodes)
    vs.close()
    with_model = RagHierVectorStore(store_path, model=tiny_model_path)
    assert with_model.query(VectorStoreQuery(query_str="bees make honey", similarity_top_k=1)).ids == ["b"]


def _traced_query(vs: RagHierVectorStore) -> tuple[VectorStoreQueryResult, list[str]]:
    """``_query(vs)`` and the SQL statements it ran on the store's read handle."""
    db = vs._reader._core.db
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        result = _query(vs)
    finally:
        db.set_trace_callback(None)
    return result, statements


def test_dense_query_reads_the_hit_rows_once(tmp_path: Path) -> None:
    """One query: one engine search, one SQLite read of the hit rows, nodes built straight from the hits."""
    vs = RagHierVectorStore(str(tmp_path / "store"))
    vs.add(_nodes())
    want = _query(vs)  # opens the reader
    result, statements = _traced_query(vs)
    assert len([s for s in statements if "FROM passages" in s]) == 1, statements
    assert "count(" not in " ".join(statements).lower(), statements
    assert result.ids == want.ids and result.ids[0] == W3C
    assert result.nodes[0].metadata["identifier"] == "6FTR78Ztl" and result.nodes[0].get_content() == "lorem ipsum"


def test_hit_rows_in_memory_gives_the_same_results_and_reads_no_sql(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    base = RagHierVectorStore(path)
    base.add(_nodes())
    want = _query(base)
    base.close()
    vs = RagHierVectorStore(path, hit_rows="memory")
    assert vs.hit_rows == "memory" and vs._reader.hit_rows_mode == "memory"
    first = _query(vs)  # builds the table
    result, statements = _traced_query(vs)
    assert statements == []
    assert result.ids == first.ids == want.ids
    assert [n.metadata for n in result.nodes] == [n.metadata for n in want.nodes]
    assert [n.get_content() for n in result.nodes] == [n.get_content() for n in want.nodes]
    vs.delete_nodes([W3C])  # a write through this store: the next query sees it
    assert W3C not in _query(vs).ids
    assert RagHierVectorStore.from_dict(vs.to_dict()).hit_rows == "memory"


def test_hit_rows_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hit_rows must be 'sqlite' or 'memory'"):
        RagHierVectorStore(str(tmp_path / "a"), hit_rows="disk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="local store"):
        RagHierVectorStore(uri=str(tmp_path / "m.db"), dimension=2, hit_rows="memory")
    engine = HierStore.create(tmp_path / "b", dimension=2, model=None)
    with pytest.raises(ValueError, match="with store=, open it with hit_rows"):
        RagHierVectorStore(store=engine, hit_rows="memory")
    engine.close()
