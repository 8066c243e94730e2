"""RagHierEmbeddingRetriever and HierarchicalRetriever: InMemory-style conventions, async, interoperability."""

from __future__ import annotations

import asyncio
import inspect

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.preprocessors import DocumentSplitter, HierarchicalDocumentSplitter
from haystack.components.retrievers import AutoMergingRetriever, SentenceWindowRetriever
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.errors import DocumentStoreError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.embedders.rag_hier import RagHierDocumentEmbedder, RagHierTextEmbedder
from haystack_integrations.components.retrievers.rag_hier import HierarchicalRetriever, RagHierEmbeddingRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier import HierStore
from rag_hier.corpus import Document as CorpusDocument
from rag_hier.corpus import Section
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.retrieval import HierarchicalRetriever as EngineHierarchicalRetriever
from rag_hier.store.extensions.doc_index import DocumentIndex

STORE_TYPE = "haystack_integrations.document_stores.rag_hier.document_store.RagHierDocumentStore"
RETRIEVERS = (RagHierEmbeddingRetriever, HierarchicalRetriever)


@pytest.fixture
def vector_store(store_path):
    store = RagHierDocumentStore(path=store_path)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    store.write_documents(
        [
            Document(
                id=f"d{i}",
                content=f"doc {i}",
                meta={"group": "even" if i % 2 == 0 else "odd", "i": i},
                embedding=vectors[i].tolist(),
            )
            for i in range(40)
        ]
    )
    yield store, vectors
    store.close()


@pytest.fixture
def text_store(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cpu")
    store.write_documents(
        [
            Document(id="tides", content="The moon pulls the oceans into two bulges.", meta={"topic": "sea"}),
            Document(id="bees", content="Honeybees dance to tell where the flowers are.", meta={"topic": "bees"}),
            Document(id="lava", content="Magma rises through the crust and erupts.", meta={"topic": "earth"}),
        ]
    )
    yield store
    store.close()


# ------------------------------------------------------------------------------------------------------
# conventions shared with InMemoryEmbeddingRetriever
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", RETRIEVERS)
def test_init_validation(cls, store_path):
    with pytest.raises(TypeError):
        cls(document_store=InMemoryDocumentStore())
    with pytest.raises(ValueError):
        cls(document_store=RagHierDocumentStore(path=store_path), top_k=0)


@pytest.mark.parametrize("cls", RETRIEVERS)
def test_run_and_run_async_have_identical_signatures(cls):
    assert inspect.signature(cls.run) == inspect.signature(cls.run_async)
    assert inspect.iscoroutinefunction(cls.run_async)
    reference = inspect.signature(InMemoryEmbeddingRetriever.run).parameters
    ours = inspect.signature(cls.run).parameters
    # self, query or query_embedding, then filters, top_k, ... (HierarchicalRetriever also takes a query embedding)
    extra = ["query_embedding"] if cls is HierarchicalRetriever else []
    assert list(ours)[2:] == list(reference)[2:] + extra
    for name in list(reference)[2:]:
        assert ours[name].default == reference[name].default
    for name in extra:
        assert ours[name].default is None


@pytest.mark.parametrize("cls", RETRIEVERS)
def test_to_dict_from_dict(cls, store_path):
    store = RagHierDocumentStore(path=store_path, model="some/model")
    retriever = cls(
        document_store=store,
        filters={"field": "meta.group", "operator": "==", "value": "even"},
        top_k=5,
        scale_score=True,
        return_embedding=True,
        filter_policy=FilterPolicy.MERGE,
    )
    data = retriever.to_dict()
    dhr_defaults = {"k1": 500, "lambda_": 0.0, "mode": "serial", "auto_document_index": False}
    assert data == {
        "type": f"{cls.__module__}.{cls.__name__}",
        "init_parameters": {
            "document_store": {
                "type": STORE_TYPE,
                "init_parameters": {
                    "path": store_path,
                    "index": "flat",
                    "model": "some/model",
                    "device": None,
                    "strict_datetime_comparison": False,
                },
            },
            "filters": {"field": "meta.group", "operator": "==", "value": "even"},
            "top_k": 5,
            "scale_score": True,
            "return_embedding": True,
            "filter_policy": "merge",
            **(dhr_defaults if cls is HierarchicalRetriever else {}),
        },
    }
    again = cls.from_dict(data)
    assert isinstance(again.document_store, RagHierDocumentStore)
    assert again.document_store.path == store_path
    assert again.filter_policy == FilterPolicy.MERGE
    assert again.to_dict() == data
    default = cls(document_store=store).to_dict()
    assert cls.from_dict(default).filter_policy == FilterPolicy.REPLACE


def test_hierarchical_retriever_dhr_parameters_round_trip(store_path):
    store = RagHierDocumentStore(path=store_path, model="some/model")
    retriever = HierarchicalRetriever(
        document_store=store, top_k=3, k1=7, lambda_=0.25, mode="parallel", auto_document_index=True
    )
    data = retriever.to_dict()
    params = data["init_parameters"]
    assert (params["k1"], params["lambda_"], params["mode"], params["auto_document_index"]) == (
        7,
        0.25,
        "parallel",
        True,
    )
    again = HierarchicalRetriever.from_dict(data)
    assert (again.k1, again.lambda_, again.mode, again.auto_document_index) == (7, 0.25, "parallel", True)
    assert again.to_dict() == data
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    loaded = Pipeline.loads(pipeline.dumps()).get_component("retriever")
    assert loaded.to_dict() == data
    # a dict saved before the DHR parameters existed loads with the defaults
    old = {**data, "init_parameters": {k: v for k, v in params.items() if k not in ("k1", "lambda_", "mode")}}
    assert HierarchicalRetriever.from_dict(old).mode == "serial"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k1": 0}, "k1"),
        ({"k1": 2.5}, "k1"),
        ({"lambda_": float("nan")}, "lambda_"),
        ({"lambda_": "1"}, "lambda_"),
        ({"mode": "tree"}, "mode"),
    ],
)
def test_hierarchical_retriever_rejects_bad_dhr_parameters(store_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        HierarchicalRetriever(document_store=RagHierDocumentStore(path=store_path), **kwargs)


def test_embedding_retriever_filters_top_k_and_policies(vector_store):
    store, vectors = vector_store
    query = vectors[4].tolist()
    init_filter = {"field": "meta.group", "operator": "==", "value": "even"}
    runtime_filter = {"field": "meta.i", "operator": "<", "value": 10}

    replace = RagHierEmbeddingRetriever(document_store=store, filters=init_filter, top_k=3)
    docs = replace.run(query_embedding=query)["documents"]
    assert len(docs) == 3 and all(d.meta["group"] == "even" for d in docs)
    assert docs[0].id == "d4"
    docs = replace.run(query_embedding=query, filters=runtime_filter, top_k=20)["documents"]
    assert sorted(d.meta["i"] for d in docs) == list(range(10))  # runtime filter replaced the init one

    merge = RagHierEmbeddingRetriever(document_store=store, filters=init_filter, filter_policy=FilterPolicy.MERGE)
    docs = merge.run(query_embedding=query, filters=runtime_filter, top_k=20)["documents"]
    assert sorted(d.meta["i"] for d in docs) == [0, 2, 4, 6, 8]

    assert replace.run(query_embedding=query, top_k=0)["documents"] == []
    with pytest.raises(ValueError):
        replace.run(query_embedding=query, top_k=-1)


def test_embedding_retriever_scores_like_in_memory(vector_store):
    store, vectors = vector_store
    reference_store = InMemoryDocumentStore(shared=False)  # dot_product, as the rag-hier store for outside vectors
    reference_store.write_documents(store.filter_documents())
    ours = RagHierEmbeddingRetriever(document_store=store, top_k=5)
    reference = InMemoryEmbeddingRetriever(document_store=reference_store, top_k=5)
    query = (vectors[7] + 0.1).tolist()
    for kwargs in ({}, {"scale_score": True}):
        got = ours.run(query_embedding=query, **kwargs)["documents"]
        want = reference.run(query_embedding=query, **kwargs)["documents"]
        assert [d.id for d in got] == [d.id for d in want]
        np.testing.assert_allclose([d.score for d in got], [d.score for d in want], rtol=1e-5)
        assert all(d.embedding is None for d in got)
    got = ours.run(query_embedding=query, return_embedding=True)["documents"]
    want = reference.run(query_embedding=query, return_embedding=True)["documents"]
    assert [d.embedding for d in got] == [d.embedding for d in want]


def test_embedding_retriever_reads_the_hit_rows_once(vector_store):
    """One query: one engine search, one SQLite read of the hit rows, Documents built straight from the hits."""
    store, vectors = vector_store
    retriever = RagHierEmbeddingRetriever(document_store=store, top_k=5)
    query = vectors[3].tolist()
    want = [d.id for d in retriever.run(query_embedding=query)["documents"]]  # opens the store, caches the retriever
    db = store.hier_store._core.db
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        docs = retriever.run(query_embedding=query)["documents"]
        passage_reads = [s for s in statements if "FROM passages" in s]
        assert len(passage_reads) == 1, statements
        assert "count(" not in " ".join(statements).lower(), statements
        assert [d.id for d in docs] == want and "d3" in want
        d3 = next(d for d in docs if d.id == "d3")
        assert d3.meta == {"group": "odd", "i": 3} and d3.content == "doc 3" and d3.embedding is None
        statements.clear()
        docs = retriever.run(query_embedding=query, return_embedding=True)["documents"]
        passage_reads = [s for s in statements if "FROM passages" in s]
        assert len(passage_reads) == 2, statements  # the hit rows, then the asked-for embeddings
        assert next(d for d in docs if d.id == "d3").embedding == vectors[3].tolist()
    finally:
        db.set_trace_callback(None)


def test_embedding_retriever_run_async(vector_store):
    store, vectors = vector_store
    retriever = RagHierEmbeddingRetriever(document_store=store, top_k=4, scale_score=True)
    query = vectors[1].tolist()
    sync = retriever.run(query_embedding=query, filters={"field": "meta.group", "operator": "==", "value": "odd"})
    result = asyncio.run(
        retriever.run_async(query_embedding=query, filters={"field": "meta.group", "operator": "==", "value": "odd"})
    )
    assert result == sync


@pytest.mark.parametrize("mode", ["flat", "serial"])
def test_hierarchical_retriever_text_in(text_store, mode):
    retriever = HierarchicalRetriever(
        document_store=text_store, top_k=2, scale_score=True, mode=mode, auto_document_index=True
    )
    docs = retriever.run(query="Honeybees dance to tell where the flowers are.")["documents"]
    assert [d.id for d in docs][:1] == ["bees"]
    assert docs[0].score == pytest.approx(1.0, abs=1e-5)
    meta = dict(docs[0].meta)
    if mode != "flat":  # every Document is its own document: the document score is the passage score
        scores, parent = meta.pop("scores"), meta.pop("parent_document")
        assert scores["document"] == pytest.approx(scores["passage"], abs=1e-6)
        assert parent == {"id": "bees", "title": "", "title_path": [], "meta": {}}
    assert meta == {"topic": "bees"}
    filtered = retriever.run(query="bees", filters={"field": "meta.topic", "operator": "==", "value": "sea"})
    assert [d.id for d in filtered["documents"]] == ["tides"]
    assert asyncio.run(retriever.run_async(query="bees", top_k=3)) == retriever.run(query="bees", top_k=3)
    with_embedding = retriever.run(query="bees", top_k=1, return_embedding=True)["documents"][0]
    assert len(with_embedding.embedding) == 32
    assert retriever.run(query="bees", top_k=0)["documents"] == []


def test_hierarchical_retriever_needs_a_store_with_a_model(store_path):
    store = RagHierDocumentStore(path=store_path)
    store.write_documents([Document(content="x", embedding=[1.0, 0.0])])
    with pytest.raises(DocumentStoreError, match="model"):
        HierarchicalRetriever(document_store=store).run(query="x")


def test_warm_up_is_idempotent_and_loads_the_model_once(text_store, monkeypatch):
    loads = []
    original = DenseEncoder._load

    def counting_load(self):
        loads.append(self.model_name)
        return original(self)

    monkeypatch.setattr(DenseEncoder, "_load", counting_load)
    path = text_store.path
    text_store.close()
    store = RagHierDocumentStore(path=path)  # the model comes from the store's manifest
    retriever = HierarchicalRetriever(document_store=store, top_k=1, auto_document_index=True)
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    for _ in range(3):
        retriever.warm_up()
        assert pipeline.run({"retriever": {"query": "moon and oceans"}})["retriever"]["documents"][0].id == "tides"
    assert len(loads) == 1
    store.close()


# ------------------------------------------------------------------------------------------------------
# DHR: the engine's hierarchical strategy behind the component
# ------------------------------------------------------------------------------------------------------
def _corpus() -> list[CorpusDocument]:
    topics = [
        ("rivers", "Rivers", "Rivers carry sediment to the sea.", "Deltas", "Deltas form where rivers slow."),
        ("glaciers", "Glaciers", "Glaciers are rivers of ice.", "Valleys", "They carve U-shaped valleys."),
        ("volcano", "Volcanoes", "Magma rises through the crust.", "Eruptions", "Ash clouds block the sun."),
        ("bees", "Honeybees", "Honeybees live in colonies.", "Honey", "Bees turn nectar into honey."),
        ("tides", "Tides", "The moon pulls the oceans.", "Spring tides", "Spring tides follow full moons."),
    ]
    return [
        CorpusDocument(
            doc_id,
            title,
            (lead, f"{title} are studied by scientists."),
            (Section(section, (text,), (Section("Details", (f"More about {section.lower()}.",)),)),),
            metadata={"topic": doc_id, "year": 2000 + len(doc_id)},
        )
        for doc_id, title, lead, section, text in topics
    ]


DHR_QUERIES = ["Deltas form where rivers slow.", "honey from nectar", "What do glaciers carve?", "magma and ash"]


@pytest.fixture
def dhr_store(store_path, tiny_model_path):
    """An engine-built corpus (5 documents x 4 passages in sections) with a document index."""
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cpu")
    store.write_corpus(_corpus(), max_passage_words=0)
    store.hier_store.add_extension(DocumentIndex())
    yield store
    store.close()


@pytest.mark.parametrize(
    ("mode", "k1", "lambda_"),
    [("serial", 1, 0.0), ("serial", 2, 0.5), ("serial", 3, 1.0), ("serial", 500, 0.0), ("parallel", 500, 0.5)],
)
def test_dhr_results_equal_the_engine_strategy(dhr_store, mode, k1, lambda_):
    retriever = HierarchicalRetriever(document_store=dhr_store, top_k=6, k1=k1, lambda_=lambda_, mode=mode)
    engine = EngineHierarchicalRetriever(dhr_store.hier_store, k1=k1, lambda_=lambda_, mode=mode)
    for query in DHR_QUERIES:
        docs = retriever.run(query=query)["documents"]
        hits = engine.search(query, top_k=6)
        assert [d.id for d in docs] == [h.passage_id for h in hits]
        assert [d.score for d in docs] == [h.score for h in hits]
        assert [d.meta["scores"] for d in docs] == [dict(h.scores) for h in hits]
        assert [d.meta["parent_document"]["id"] for d in docs] == [h.doc_id for h in hits]


@pytest.mark.parametrize("lambda_", [0.0, 0.5, -0.25])
def test_dhr_fused_scores_and_parent_document(dhr_store, lambda_):
    corpus = {d.doc_id: d for d in _corpus()}
    retriever = HierarchicalRetriever(document_store=dhr_store, top_k=8, k1=3, lambda_=lambda_)
    query_vector = dhr_store.hier_store.encode_queries(["Spring tides follow full moons."])[0]
    ext = dhr_store.hier_store.extension("doc-index")
    docs = retriever.run(query="Spring tides follow full moons.")["documents"]
    assert docs and [d.score for d in docs] == sorted((d.score for d in docs), reverse=True)
    for doc in docs:
        scores = doc.meta["scores"]
        assert scores["fused"] == scores["passage"] + lambda_ * scores["document"]
        assert doc.score == scores["fused"]
        (vector,) = dhr_store.hier_store.get_embeddings([doc.id])
        assert scores["passage"] == pytest.approx(float(vector @ query_vector), abs=1e-5)
        parent = doc.meta["parent_document"]
        doc_vector = ext._index.reconstruct(np.array([ext._ids[parent["id"]]]))[0]
        assert scores["document"] == pytest.approx(float(doc_vector @ query_vector), abs=1e-5)
        source = corpus[parent["id"]]
        assert parent == {
            "id": source.doc_id,
            "title": source.title,
            "title_path": doc.meta["title_path"],
            "meta": dict(source.metadata),
        }
        assert parent["title_path"][0] == source.title
        assert doc.meta["source_id"] == parent["id"] and doc.meta["topic"] == parent["id"]
    scaled = retriever.run(query="Spring tides follow full moons.", scale_score=True)["documents"]
    if lambda_ == 0.0:
        assert [d.score for d in scaled] == pytest.approx([(d.score + 1) / 2 for d in docs])
    assert [d.meta["scores"] for d in scaled] == [d.meta["scores"] for d in docs]  # raw scores stay raw


def test_dhr_k1_restricts_the_passage_pool(dhr_store):
    ext = dhr_store.hier_store.extension("doc-index")
    query = "honey from nectar"
    query_vector = dhr_store.hier_store.encode_queries([query])
    _, top_docs = ext.search(query_vector, 5)
    ranked = [ext.doc_id(f) for f in top_docs[0].tolist()]
    flat = HierarchicalRetriever(document_store=dhr_store, top_k=100, mode="flat").run(query=query)["documents"]
    assert len(flat) == 20
    for k1 in (1, 2, 3):
        docs = HierarchicalRetriever(document_store=dhr_store, top_k=100, k1=k1).run(query=query)["documents"]
        parents = {d.meta["parent_document"]["id"] for d in docs}
        assert parents == set(ranked[:k1])  # every passage of the top-k1 documents competes, nothing else
        assert len(docs) == 4 * k1
    parallel = HierarchicalRetriever(document_store=dhr_store, top_k=100, k1=1, mode="parallel")
    docs = parallel.run(query=query)["documents"]
    assert len(docs) == 20 and len({d.meta["parent_document"]["id"] for d in docs}) == 5  # k1 is not used


def test_dhr_filters_restrict_passages_and_documents(dhr_store):
    allowed = ["bees", "tides"]
    filters = {"field": "meta.source_id", "operator": "in", "value": allowed}
    retriever = HierarchicalRetriever(document_store=dhr_store, top_k=5, k1=1, filters=filters)
    engine = EngineHierarchicalRetriever(dhr_store.hier_store, k1=1)
    for query in DHR_QUERIES:
        docs = retriever.run(query=query)["documents"]
        hits = engine.search(query, top_k=5, filters=lambda record: record["doc_id"] in allowed)
        assert [d.id for d in docs] == [h.passage_id for h in hits]
        assert len({d.meta["parent_document"]["id"] for d in docs}) == 1  # k1=1 among the allowed documents
        assert docs[0].meta["parent_document"]["id"] in allowed
    runtime = {"field": "meta.split_id", "operator": "==", "value": 0}  # replaces the init filter
    docs = retriever.run(query="rivers", filters=runtime, top_k=10)["documents"]
    assert all(d.meta["split_id"] == 0 for d in docs) and len(docs) == 1


def test_dhr_without_a_document_index_says_how_to_add_one(text_store):
    retriever = HierarchicalRetriever(document_store=text_store)
    for run in (lambda: retriever.run(query="bees"), lambda: asyncio.run(retriever.run_async(query="bees"))):
        with pytest.raises(DocumentStoreError, match="no document index") as info:
            run()
        assert "auto_document_index=True" in str(info.value)
        assert "add_extension(rag_hier.store.extensions.doc_index.DocumentIndex())" in str(info.value)
        assert "--hierarchical" in str(info.value)
    assert text_store.hier_store.extension("doc-index") is None  # nothing was written
    flat = HierarchicalRetriever(document_store=text_store, mode="flat", top_k=1).run(query="bees")
    assert len(flat["documents"]) == 1


def test_dhr_document_index_survives_recreate_index(dhr_store):
    dhr_store.delete_all_documents(recreate_index=True)
    ext = dhr_store.hier_store.extension("doc-index")
    assert isinstance(ext, DocumentIndex) and len(ext) == 0
    dhr_store.write_corpus(_corpus()[:2], max_passage_words=0)
    docs = HierarchicalRetriever(document_store=dhr_store, top_k=20, k1=1).run(query="rivers")["documents"]
    assert len(docs) == 4 and len({d.meta["parent_document"]["id"] for d in docs}) == 1


def test_dhr_on_a_store_without_dense_vectors_says_so(store_path):
    store = RagHierDocumentStore(path=store_path, dense=False)
    with pytest.raises(DocumentStoreError, match="dense=False"):
        HierarchicalRetriever(document_store=store, auto_document_index=True).run(query="bees")
    store.close()


def test_dhr_auto_document_index_groups_by_source_id_and_follows_writes(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cpu")
    splitter = DocumentSplitter(split_by="period", split_length=1)
    sources = [
        Document(id="tides", content="The moon pulls the oceans. Tides rise twice a day. Spring tides are large."),
        Document(id="bees", content="Bees live in colonies. Bees dance to show flowers. Honey is stored in wax."),
        Document(id="lava", content="Magma rises through the crust. Volcanoes erupt lava. Ash travels far."),
    ]
    store.write_documents(splitter.run(sources)["documents"])
    retriever = HierarchicalRetriever(document_store=store, top_k=10, k1=1, auto_document_index=True)
    docs = retriever.run(query="Bees dance to show flowers.")["documents"]
    ext = store.hier_store.extension("doc-index")
    assert isinstance(ext, DocumentIndex) and sorted(ext.doc_ids()) == ["bees", "lava", "tides"]
    assert [d.meta["parent_document"]["id"] for d in docs] == ["bees"] * 3
    assert all(d.meta["source_id"] == "bees" for d in docs)
    engine = EngineHierarchicalRetriever(store.hier_store, k1=1).search("Bees dance to show flowers.", top_k=10)
    assert [(d.id, d.score) for d in docs] == [(h.passage_id, h.score) for h in engine]
    # the document index follows later writes through the store
    store.write_documents(
        splitter.run([Document(id="comets", content="Comets have icy cores. Tails glow.")])["documents"]
    )
    assert sorted(ext.doc_ids()) == ["bees", "comets", "lava", "tides"]
    docs = retriever.run(query="Comets have icy cores.")["documents"]
    assert {d.meta["parent_document"]["id"] for d in docs} == {"comets"} and len(docs) == 2
    store.close()


# ------------------------------------------------------------------------------------------------------
# interoperability with Haystack's window and merging retrievers
# ------------------------------------------------------------------------------------------------------
TEXT = (
    "Tides are the rise and fall of the sea. The Moon pulls the near side of the Earth hardest. "
    "Two bulges of water follow the Moon around. Spring tides come at new and full moon. "
    "Neap tides come at the quarter moons. Funnel-shaped bays make the range larger."
)


def test_sentence_window_retriever_after_embedding_retriever(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path)
    chunks = DocumentSplitter(split_by="period", split_length=1).run([Document(id="tides", content=TEXT)])["documents"]
    embedded = RagHierDocumentEmbedder(model=tiny_model_path, progress_bar=False).run(chunks)["documents"]
    store.write_documents(embedded)
    assert store.filter_documents() == embedded  # meta (source_id, split_id, _split_overlap) exactly as written

    pipeline = Pipeline()
    pipeline.add_component("embedder", RagHierTextEmbedder(model=tiny_model_path, progress_bar=False))
    pipeline.add_component("retriever", RagHierEmbeddingRetriever(document_store=store, top_k=1))
    pipeline.add_component("window", SentenceWindowRetriever(document_store=store, window_size=1))
    pipeline.connect("embedder.embedding", "retriever.query_embedding")
    pipeline.connect("retriever.documents", "window.retrieved_documents")
    out = pipeline.run({"embedder": {"text": chunks[2].content}})
    assert [d.id for d in out["window"]["context_documents"]] == [c.id for c in chunks[1:4]]
    windows = out["window"]["context_windows"]
    assert windows == ["".join(c.content for c in chunks[1:4])]
    async_out = asyncio.run(pipeline.run_async({"embedder": {"text": chunks[2].content}}))
    assert async_out["window"]["context_windows"] == windows


def test_sentence_window_retriever_after_hierarchical_retriever_on_an_engine_built_store(store_path, tiny_model_path):
    corpus = [
        CorpusDocument("tides", "Tides", tuple(s.strip() + "." for s in TEXT.split(".") if s.strip())),
        CorpusDocument("bees", "Honeybees", ("Bees live in colonies.", "Bees dance.")),
    ]
    hier = HierStore.create(store_path, model=tiny_model_path)
    hier.add_documents(corpus, max_passage_words=0)
    hier.add_extension(DocumentIndex())  # what `rag-hier index --hierarchical` does
    hier.close()
    store = RagHierDocumentStore(path=store_path)
    hits = HierarchicalRetriever(document_store=store, top_k=1).run(query=corpus[0].paragraphs[3])["documents"]
    assert [d.id for d in hits] == ["tides#3"]
    assert (hits[0].meta["source_id"], hits[0].meta["split_id"]) == ("tides", 3)
    out = SentenceWindowRetriever(document_store=store, window_size=1).run(retrieved_documents=hits)
    assert [d.id for d in out["context_documents"]] == ["tides#2", "tides#3", "tides#4"]
    store.close()


def test_auto_merging_retriever_after_embedding_retriever(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path)
    docs = HierarchicalDocumentSplitter(block_sizes={12, 4}, split_by="word").run([Document(content=TEXT)])["documents"]
    leaves = [d for d in docs if not d.meta["__children_ids"]]
    parents = [d for d in docs if d.meta["__children_ids"]]
    embedder = RagHierDocumentEmbedder(model=tiny_model_path, progress_bar=False)
    store.write_documents(embedder.run(leaves)["documents"] + parents)  # parents stored without vectors

    parent = next(p for p in parents if p.meta["__level"] == 1 and len(p.meta["__children_ids"]) >= 2)
    children = [leaf for leaf in leaves if leaf.meta["__parent_id"] == parent.id]
    query = embedder.run([children[0]])["documents"][0].embedding
    retriever = RagHierEmbeddingRetriever(
        document_store=store,
        top_k=len(children),
        filters={"field": "meta.__parent_id", "operator": "==", "value": parent.id},
    )
    hits = retriever.run(query_embedding=query)["documents"]
    assert {d.id for d in hits} == {c.id for c in children}
    assert all(d.meta["__parent_id"] == parent.id for d in hits)
    merged = AutoMergingRetriever(document_store=store, threshold=0.5).run(documents=hits)["documents"]
    assert [d.id for d in merged] == [parent.id]
    assert merged[0] == store.filter_documents({"field": "id", "operator": "==", "value": parent.id})[0]
    merged_async = asyncio.run(AutoMergingRetriever(document_store=store, threshold=0.5).run_async(documents=hits))
    assert [d.id for d in merged_async["documents"]] == [parent.id]
    store.close()
