"""The per-query path of a plain dense search: the same Documents, scores, order and errors as the general path.

A query vector alone, unfiltered, with the ``dense`` strategy goes to the engine's lean search
(``DenseRetriever.search_vectors``) without the engine's ``Queries``; every other search builds ``Queries`` and
runs the strategy. These tests run both paths on the same inputs (the general one forced by monkeypatching) and
check the inputs the query vector check accepts and refuses.
"""

from __future__ import annotations

import numpy as np
import pytest
from haystack import Document
from haystack.document_stores.errors import DocumentStoreError
from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever, RagHierRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore, _convert, _search

from rag_hier.store.records import new_hit

DIM = 8


def _documents() -> list[Document]:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((40, DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)  # a cosine store's
    vectors[5] = vectors[3]  # ties: two documents with the same vector
    vectors[6] = vectors[3]
    return [
        Document(
            id=f"d{i}",
            content=f"passage {i}",
            meta={"i": i, "tags": ["a", str(i)], "nested": {"k": [i]}} if i % 2 else {"i": i},
            embedding=vectors[i].tolist(),
        )
        for i in range(len(vectors))
    ]


@pytest.fixture(params=["dot_product", "cosine"])
def store(store_path, request):
    s = RagHierDocumentStore(path=store_path, similarity=request.param)
    s.write_documents(_documents())
    yield s
    s.close()


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send every search through the engine's Queries and Retriever.run."""
    monkeypatch.setattr(_search, "_lean", lambda retriever: False)


def _as_tuples(documents: list[Document]) -> list[tuple]:
    return [(d.id, d.score, d.content, d.meta, d.embedding) for d in documents]


QUERIES = [
    _documents()[3].embedding,  # the tied vector: ties broken by the shared rule
    [0.5, -1.0, 2.0, 0.0, 1.0, 3.0, -2.0, 0.25],
    [1, 0, 0, 2, 0, 0, 0, 1],  # integers
    [1, 0.5, 0, 2, 0, 0, 0, 1],  # integers and floats
    [True, 0.5, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0],  # a bool among floats
    [np.float32(0.5)] * DIM,  # NumPy scalars
    (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),  # a tuple
]


@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
@pytest.mark.parametrize("top_k", [1, 5, 40, 100])
def test_the_lean_path_returns_what_the_general_path_returns(store, monkeypatch, query, top_k):
    retriever = RagHierEmbeddingRetriever(document_store=store)
    lean = retriever.run(query_embedding=query, top_k=top_k)["documents"]
    _general(monkeypatch)
    general = retriever.run(query_embedding=query, top_k=top_k)["documents"]
    assert _as_tuples(lean) == _as_tuples(general)
    assert len(lean) == min(top_k, 40)
    assert all(type(d.score) is float for d in lean)


def test_ties_and_scores_match_a_brute_force_search(store):
    query = np.asarray(_documents()[3].embedding, dtype=np.float32)
    found = RagHierEmbeddingRetriever(document_store=store, top_k=6).run(query_embedding=query.tolist())
    ids = [d.id for d in found["documents"]]
    assert ids[:3] == ["d3", "d5", "d6"]  # equal scores: insertion order
    scores = [d.score for d in found["documents"]]
    assert scores == sorted(scores, reverse=True)


def test_the_component_paths_agree(store, monkeypatch):
    """RagHierRetriever (component scores in meta) and scale_score / return_embedding take the general paths."""
    query = QUERIES[1]
    runs = [
        lambda: RagHierRetriever(document_store=store, strategy="dense").run(query_embedding=query, top_k=7),
        lambda: RagHierEmbeddingRetriever(document_store=store).run(query_embedding=query, scale_score=True),
        lambda: RagHierEmbeddingRetriever(document_store=store).run(query_embedding=query, return_embedding=True),
    ]
    lean = [_as_tuples(run()["documents"]) for run in runs]
    _general(monkeypatch)
    assert lean == [_as_tuples(run()["documents"]) for run in runs]


def test_retrieved_metadata_is_the_documents_own(store):
    retriever = RagHierEmbeddingRetriever(document_store=store, top_k=40)
    first = {d.id: d for d in retriever.run(query_embedding=QUERIES[1])["documents"]}
    first["d1"].meta["tags"].append("changed")
    first["d1"].meta["nested"]["k"].append(99)
    again = {d.id: d for d in retriever.run(query_embedding=QUERIES[1])["documents"]}
    assert again["d1"].meta == {"i": 1, "tags": ["a", "1"], "nested": {"k": [1]}}


@pytest.mark.parametrize(
    ("query", "error", "match"),
    [
        ([], ValueError, "non-empty list"),
        ("abc", ValueError, "non-empty list"),
        (np.ones(DIM), ValueError, "non-empty list"),
        ([[1.0] * DIM], ValueError, "flat list"),
        ([[1.0, 2.0], 3.0, *([0.0] * (DIM - 2))], ValueError, "flat list"),  # ragged
        (["0.5"] * DIM, ValueError, "flat list"),
        ([1.0] * (DIM + 1), DocumentStoreError, "dimensions"),
        ([float("nan")] + [0.0] * (DIM - 1), ValueError, "NaN or infinite"),
        ([float("inf")] + [0.0] * (DIM - 1), ValueError, "NaN or infinite"),
        ([1e39] + [0.0] * (DIM - 1), ValueError, "NaN or infinite"),  # finite in float64, not in float32
    ],
)
@pytest.mark.parametrize("top_k", [0, 3])
@pytest.mark.parametrize("path", ["lean", "general"])
def test_bad_query_embeddings_raise_the_same_errors_on_both_paths(store, monkeypatch, query, error, match, top_k, path):
    if path == "general":
        _general(monkeypatch)
    retriever = RagHierEmbeddingRetriever(document_store=store)
    if store.similarity == "cosine" and len(query) == DIM and query[0] == 1e39:  # normalized first: a unit vector
        assert len(retriever.run(query_embedding=query, top_k=top_k)["documents"]) == top_k
        return
    with pytest.raises(error, match=match), np.errstate(over="ignore", invalid="ignore"):
        retriever.run(query_embedding=query, top_k=top_k)


def test_a_query_list_is_not_modified(store):
    query = list(QUERIES[1])
    RagHierEmbeddingRetriever(document_store=store).run(query_embedding=query)
    assert query == QUERIES[1]


def test_metadata_text_that_is_not_compact_json_decodes_as_json_loads_does() -> None:
    payload = '{"haystack":{}}'
    for meta_text, want in [
        (' {"n": 1}', {"n": 1}),
        ('{"n": [1, 2]} ', {"n": [1, 2]}),
        ('{"a":{"b":1}}', {"a": {"b": 1}}),
    ]:
        hit = new_hit((1, "p1", "d1", "text", "[]", meta_text, 0, payload), 0.5, 1)
        assert _convert.hit_to_document(hit).meta == want
    broken = new_hit((1, "p1", "d1", "text", "[]", '{"n": 1} x', 0, payload), 0.5, 1)
    with pytest.raises(ValueError, match="Extra data"):
        _convert.hit_to_document(broken)
