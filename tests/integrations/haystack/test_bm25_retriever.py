"""RagHierBM25Retriever and RagHierDocumentStore.bm25_retrieval: shaped like InMemoryBM25Retriever and
InMemoryDocumentStore.bm25_retrieval, ranked like them, scaled with their function; a hybrid pipeline."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from haystack import Document, Pipeline
from haystack.components.joiners import DocumentJoiner
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.errors import DocumentStoreError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import FilterPolicy
from haystack.utils import expit
from haystack_integrations.components.embedders.rag_hier import RagHierTextEmbedder
from haystack_integrations.components.retrievers.rag_hier import (
    RagHierBM25Retriever,
    RagHierEmbeddingRetriever,
    RagHierRetriever,
)
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval import registry
from rag_hier.retrieval.base import Queries

# No stopwords, no one-letter words, and words whose Snowball stems are all distinct: bm25s's tokenization
# (ours) and InMemoryDocumentStore's regex then see the same terms, the same document lengths and frequencies.
TEXTS = [
    "moon tides ocean moon",
    "bees honey wax cells",
    "volcano magma lava ash",
    "moon orbit earth gravity tides tides",
    "honey bees flowers pollen",
    "ocean waves surf tides",
    "lava flows cool basalt rock",
    "pollen grains ride wind",
]
QUERIES = ["moon tides", "honey bees", "ocean", "lava basalt", "pollen wind bees", "gravity"]
ODD = {"field": "meta.group", "operator": "==", "value": "odd"}
LATE = {"field": "meta.n", "operator": ">=", "value": 4}


def _docs() -> list[Document]:
    return [
        Document(id=f"d{i}", content=text, meta={"n": i, "group": "even" if i % 2 == 0 else "odd"})
        for i, text in enumerate(TEXTS)
    ]


def _in_memory(k1: float = 1.5, b: float = 0.75) -> InMemoryDocumentStore:
    """InMemory's BM25+ with delta 0: Lucene's idf, times (k1 + 1) — the textbook factor Lucene (and we) omit."""
    store = InMemoryDocumentStore(
        bm25_algorithm="BM25Plus", bm25_parameters={"k1": k1, "b": b, "delta": 0.0}, shared=False
    )
    store.write_documents(_docs())
    return store


@pytest.fixture
def bm25_store(store_path):
    """The documents in a local store with a BM25 index (no dense vectors at all)."""
    store = RagHierDocumentStore(path=store_path, dense=False)
    store.write_documents(_docs())
    store.hier_store.ensure_extension("bm25")
    yield store
    store.close()


def _ranked(docs: list[Document]) -> list[tuple[str, float]]:
    return [(d.id, d.score) for d in docs]


# ------------------------------------------------------------------------------------------------------
# the component's shape: InMemoryBM25Retriever's, plus auto_extensions, k1 and b
# ------------------------------------------------------------------------------------------------------
def _shape(fn) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults of a callable's parameters (annotations may be strings on one side)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_mirror_in_memory_bm25():
    ours, theirs = _shape(RagHierBM25Retriever.__init__), _shape(InMemoryBM25Retriever.__init__)
    assert ours[: len(theirs)] == theirs  # same names, order and defaults
    assert [name for name, _, _ in ours[len(theirs) :]] == ["auto_extensions", "k1", "b"]
    for method in ("run", "run_async"):
        assert _shape(getattr(RagHierBM25Retriever, method)) == _shape(getattr(InMemoryBM25Retriever, method))
    assert inspect.iscoroutinefunction(RagHierBM25Retriever.run_async)
    for method in ("bm25_retrieval", "bm25_retrieval_async"):
        store_shape, in_memory_shape = (
            _shape(getattr(RagHierDocumentStore, method)),
            _shape(getattr(InMemoryDocumentStore, method)),
        )
        assert store_shape[: len(in_memory_shape)] == in_memory_shape
        assert [(name, kind) for name, kind, _ in store_shape[len(in_memory_shape) :]] == [
            (name, inspect.Parameter.KEYWORD_ONLY) for name in ("k1", "b", "auto_extensions")
        ]
    assert inspect.iscoroutinefunction(RagHierDocumentStore.bm25_retrieval_async)


def test_construction_is_checked_without_opening_the_store(store_path):
    from pathlib import Path

    store = RagHierDocumentStore(path=store_path)
    with pytest.raises(TypeError):
        RagHierBM25Retriever(document_store=InMemoryDocumentStore())
    with pytest.raises(ValueError, match="top_k"):
        RagHierBM25Retriever(document_store=store, top_k=0)
    with pytest.raises(ValueError, match="k1"):
        RagHierBM25Retriever(document_store=store, k1=-1.0)
    with pytest.raises(ValueError, match="b must be"):
        RagHierBM25Retriever(document_store=store, b=1.5)
    assert not Path(store_path).exists()


# ------------------------------------------------------------------------------------------------------
# results: InMemory's ranking, its scaling function, filters and top_k as InMemory treats them
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.3)])
def test_ranking_equals_in_memory_and_scores_are_lucenes(store_location, k1, b):
    store = RagHierDocumentStore(**store_location, dense=False)
    store.write_documents(_docs())
    ours = RagHierBM25Retriever(document_store=store, top_k=5, auto_extensions=True, k1=k1, b=b)
    theirs = InMemoryBM25Retriever(_in_memory(k1, b), top_k=5)
    default = InMemoryBM25Retriever(InMemoryDocumentStore(shared=False), top_k=5)  # InMemory's BM25L
    default.document_store.write_documents(_docs())
    for query in QUERIES:
        got = ours.run(query=query)["documents"]
        expected = theirs.run(query=query)["documents"]
        assert [d.id for d in got] == [d.id for d in expected], query
        # the same scores up to the constant factor (k1 + 1) that Lucene (and bm25s, and we) leave out
        assert [d.score * (k1 + 1) for d in got] == pytest.approx([d.score for d in expected], rel=1e-5)
        if (k1, b) == (1.5, 0.75):  # InMemoryBM25Retriever as it comes (BM25L) ranks these documents alike
            assert [d.id for d in got] == [d.id for d in default.run(query=query)["documents"]], query
        assert got[0].content == TEXTS[int(got[0].id[1:])] and got[0].meta["n"] == int(got[0].id[1:])
        assert all(d.embedding is None for d in got)
    store.close()


def test_scale_score_is_in_memorys_bm25_sigmoid(bm25_store):
    raw = RagHierBM25Retriever(document_store=bm25_store)
    scaled = RagHierBM25Retriever(document_store=bm25_store, scale_score=True)
    in_memory = _in_memory()
    for query in QUERIES:
        plain = raw.run(query=query)["documents"]
        assert _ranked(scaled.run(query=query)["documents"]) == [(d.id, expit(d.score / 8)) for d in plain]
        assert _ranked(raw.run(query=query, scale_score=True)["documents"]) == _ranked(
            scaled.run(query=query)["documents"]
        )
        assert _ranked(scaled.run(query=query, scale_score=False)["documents"]) == _ranked(plain)
        # InMemory applies the same function to its own raw scores
        theirs_raw = in_memory.bm25_retrieval(query, scale_score=False)
        theirs = in_memory.bm25_retrieval(query, scale_score=True)
        assert [d.score for d in theirs] == pytest.approx([expit(d.score / 8) for d in theirs_raw])
        assert all(0.5 < d.score < 1.0 for d in scaled.run(query=query)["documents"])
    # the generic component scales bm25 the same way (and still refuses scores that are not BM25's)
    generic = RagHierRetriever(document_store=bm25_store, strategy="bm25", scale_score=True)
    assert generic.run(query=QUERIES[0]) == scaled.run(query=QUERIES[0])
    with pytest.raises(ValueError, match="scale_score"):
        RagHierRetriever(
            document_store=bm25_store, strategy="fusion", strategy_params={"strategies": ["bm25"]}, scale_score=True
        )


def test_filters_filter_policy_and_top_k(bm25_store):
    unfiltered = dict(
        _ranked(RagHierBM25Retriever(document_store=bm25_store).run(query="pollen wind bees")["documents"])
    )
    replace = RagHierBM25Retriever(document_store=bm25_store, filters=ODD)
    merge = RagHierBM25Retriever(document_store=bm25_store, filters=ODD, filter_policy=FilterPolicy.MERGE)
    in_memory = InMemoryBM25Retriever(_in_memory(), filters=ODD)
    in_memory_merge = InMemoryBM25Retriever(_in_memory(), filters=ODD, filter_policy=FilterPolicy.MERGE)
    query = "pollen wind bees"
    got = replace.run(query=query)["documents"]
    assert [d.id for d in got] == [d.id for d in in_memory.run(query=query)["documents"]] == ["d7", "d1"]
    # filters restrict what is returned, not the statistics: the scores are the unfiltered ones
    assert _ranked(got) == [(d.id, unfiltered[d.id]) for d in got]
    assert [d.id for d in replace.run(query=query, filters=LATE)["documents"]] == [
        d.id for d in in_memory.run(query=query, filters=LATE)["documents"]
    ]
    assert {d.id for d in replace.run(query=query, filters=LATE)["documents"]} == {"d4", "d7"}
    assert (
        [d.id for d in merge.run(query=query, filters=LATE)["documents"]]
        == [d.id for d in in_memory_merge.run(query=query, filters=LATE)["documents"]]
        == ["d7"]
    )
    # top_k: at init, at run time, 0 returns nothing, a negative one is refused
    assert len(RagHierBM25Retriever(document_store=bm25_store, top_k=1).run(query=query)["documents"]) == 1
    assert [d.id for d in replace.run(query=query, top_k=1)["documents"]] == ["d7"]  # filters=None: the init ones
    unfiltered_top_2 = RagHierBM25Retriever(document_store=bm25_store).run(query=query, top_k=2)["documents"]
    assert [d.id for d in unfiltered_top_2] == list(unfiltered)[:2] and len(unfiltered) == 3
    assert replace.run(query=query, top_k=0)["documents"] == []
    with pytest.raises(ValueError, match="top_k"):
        replace.run(query=query, top_k=-1)
    with pytest.raises(ValueError, match="query"):
        replace.run(query="  ")
    assert replace.run(query="the and of")["documents"] == []  # stopwords only: no term to match


def test_run_async_equals_run_and_the_generic_preset(bm25_store):
    preset = RagHierBM25Retriever(document_store=bm25_store, top_k=3, k1=1.2, b=0.5, filters=LATE)
    generic = RagHierRetriever(
        document_store=bm25_store, strategy="bm25", strategy_params={"k1": 1.2, "b": 0.5}, top_k=3, filters=LATE
    )
    for query in QUERIES:
        docs = preset.run(query=query)["documents"]
        assert asyncio.run(preset.run_async(query=query)) == {"documents": docs}
        assert generic.run(query=query)["documents"] == docs
        assert asyncio.run(preset.run_async(query=query, top_k=1, scale_score=True, filters=ODD)) == preset.run(
            query=query, top_k=1, scale_score=True, filters=ODD
        )
    # the engine's bm25 strategy on the same store gives the same ranking and scores
    engine = registry.build_retriever("bm25", bm25_store.hier_store, k1=1.2, b=0.5)
    hits = engine.run(Queries(texts=["moon tides"]), 3)[0].hits
    unfiltered = RagHierBM25Retriever(document_store=bm25_store, top_k=3, k1=1.2, b=0.5)
    assert _ranked(unfiltered.run(query="moon tides")["documents"]) == [
        (h.passage_id, pytest.approx(h.score, rel=1e-9)) for h in hits
    ]


def test_missing_index_says_how_and_auto_extensions_builds_it(store_location):
    store = RagHierDocumentStore(**store_location, dense=False)
    store.write_documents(_docs()[:6])
    plain = RagHierBM25Retriever(document_store=store)
    plain.warm_up()  # a missing index is left to the first run
    with pytest.raises(DocumentStoreError, match=r"no BM25 index.*auto_extensions=True.*BM25Extension"):
        plain.run(query="moon")
    with pytest.raises(DocumentStoreError, match="auto_extensions=True"):
        store.bm25_retrieval("moon")
    auto = RagHierBM25Retriever(document_store=store, auto_extensions=True)
    assert [d.id for d in auto.run(query="moon")["documents"]] == ["d0", "d3"]
    assert store.hier_store.extension("bm25") is not None
    plain.warm_up()  # now it derives the scores up front
    store.write_documents([Document(id="new", content="moon landing")])  # every later write keeps the index current
    store.delete_documents(["d0"])
    assert [d.id for d in plain.run(query="moon")["documents"]] == ["new", "d3"]
    assert [d.id for d in asyncio.run(plain.run_async(query="pollen"))["documents"]] == ["d4"]
    store.delete_all_documents(recreate_index=True)  # keeps the index, empty
    store.write_documents([Document(id="again", content="moon again")])
    assert [d.id for d in plain.run(query="moon")["documents"]] == ["again"]
    store.close()


# ------------------------------------------------------------------------------------------------------
# serialization: to_dict / from_dict and a pipeline through YAML
# ------------------------------------------------------------------------------------------------------
def test_to_dict_from_dict_and_yaml_round_trip(bm25_store):
    retriever = RagHierBM25Retriever(
        document_store=bm25_store,
        filters=ODD,
        top_k=3,
        scale_score=True,
        filter_policy=FilterPolicy.MERGE,
        auto_extensions=True,
        k1=1.2,
        b=0.5,
    )
    data = retriever.to_dict()
    assert data == {
        "type": "haystack_integrations.components.retrievers.rag_hier.bm25_retriever.RagHierBM25Retriever",
        "init_parameters": {
            "document_store": bm25_store.to_dict(),
            "filters": ODD,
            "top_k": 3,
            "scale_score": True,
            "filter_policy": "merge",
            "auto_extensions": True,
            "k1": 1.2,
            "b": 0.5,
        },
    }
    again = RagHierBM25Retriever.from_dict(data)
    assert again.to_dict() == data and again.filter_policy is FilterPolicy.MERGE
    assert data["init_parameters"]["filter_policy"] == "merge"  # from_dict leaves its input alone
    defaults = RagHierBM25Retriever(document_store=bm25_store).to_dict()["init_parameters"]
    assert {k: defaults[k] for k in ("auto_extensions", "k1", "b", "scale_score")} == {
        "auto_extensions": False,
        "k1": 1.5,
        "b": 0.75,
        "scale_score": False,
    }

    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    loaded = Pipeline.loads(pipeline.dumps())
    assert loaded.to_dict() == pipeline.to_dict()
    query = {"retriever": {"query": "pollen wind bees", "filters": LATE}}
    assert loaded.run(query) == pipeline.run(query)
    assert [d.id for d in loaded.run(query)["retriever"]["documents"]] == ["d7"]


# ------------------------------------------------------------------------------------------------------
# the store-level call, sync and async
# ------------------------------------------------------------------------------------------------------
def test_store_bm25_retrieval(bm25_store):
    component = RagHierBM25Retriever(document_store=bm25_store)
    in_memory = _in_memory()
    for query in QUERIES:
        docs = bm25_store.bm25_retrieval(query)
        assert docs == component.run(query=query)["documents"]
        assert [d.id for d in docs] == [d.id for d in in_memory.bm25_retrieval(query)]
        assert asyncio.run(bm25_store.bm25_retrieval_async(query)) == docs
    # InMemory's positional order: query, filters, top_k, scale_score
    assert (
        bm25_store.bm25_retrieval("pollen wind bees", ODD, 1, True)
        == component.run(query="pollen wind bees", filters=ODD, top_k=1, scale_score=True)["documents"]
    )
    assert (
        asyncio.run(bm25_store.bm25_retrieval_async("moon", None, 2, False, k1=0.9, b=0.1))
        == (RagHierBM25Retriever(document_store=bm25_store, k1=0.9, b=0.1).run(query="moon", top_k=2)["documents"])
    )
    with pytest.raises(ValueError, match="query"):
        bm25_store.bm25_retrieval("")
    with pytest.raises(ValueError, match="k1"):
        bm25_store.bm25_retrieval("moon", k1=-0.5)
    assert bm25_store.bm25_retrieval("moon", top_k=0) == []


# ------------------------------------------------------------------------------------------------------
# hybrid search: two retrievers and Haystack's DocumentJoiner, or one fusion component (docs/haystack.md)
# ------------------------------------------------------------------------------------------------------
def test_hybrid_pipeline_with_document_joiner_and_the_fusion_alternative(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cpu")
    store.write_documents(_docs())  # embedded by the store's model
    hybrid = Pipeline()
    hybrid.add_component("text_embedder", RagHierTextEmbedder(document_store=store, progress_bar=False))
    hybrid.add_component("bm25", RagHierBM25Retriever(document_store=store, top_k=4, auto_extensions=True))
    hybrid.add_component("dense", RagHierEmbeddingRetriever(document_store=store, top_k=4))
    hybrid.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=3))
    hybrid.connect("text_embedder.embedding", "dense.query_embedding")
    hybrid.connect("bm25.documents", "joiner.documents")
    hybrid.connect("dense.documents", "joiner.documents")
    query = "honey bees"
    out = hybrid.run({"text_embedder": {"text": query}, "bm25": {"query": query}})
    docs = out["joiner"]["documents"]
    assert len(docs) == 3 and {"d1", "d4"} & {d.id for d in docs}
    assert Pipeline.loads(hybrid.dumps()).run({"text_embedder": {"text": query}, "bm25": {"query": query}}) == out

    fusion = RagHierRetriever(
        document_store=store, strategy="fusion", strategy_params={"strategies": ["dense", "bm25"]}, top_k=3
    )
    fused = fusion.run(query=query)["documents"]  # the store's model encodes the query for the dense side
    engine = registry.build_retriever("fusion", store.hier_store, strategies=("dense", "bm25"))
    hits = engine.run(Queries(texts=[query], vectors=store.hier_store.encode_queries([query])), 3)[0].hits
    assert _ranked(fused) == [(h.passage_id, pytest.approx(h.score, rel=1e-6)) for h in hits]
    assert {"d1", "d4"} & {d.id for d in fused}
    assert all("bm25" in d.meta["scores"] or "dense" in d.meta["scores"] for d in fused)
    store.close()
