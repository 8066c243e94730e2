"""RagHierRetriever (any registered strategy), presets of one machinery, scale_score and similarity against
InMemoryDocumentStore, one view across handles and processes, reads read-only until the first write."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import FilterPolicy
from haystack.errors import FilterError
from haystack_integrations.components.retrievers.rag_hier import (
    HierarchicalRetriever,
    RagHierEmbeddingRetriever,
    RagHierRetriever,
)
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval import registry
from rag_hier.retrieval.base import Queries, Ranking, Retriever, RetrieverParams, param
from rag_hier.retrieval.hierarchical import HierarchicalRetriever as EngineHierarchicalRetriever
from rag_hier.retrieval.tree import TreeRetriever
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.tree import TreeExtension

EVEN = {"field": "meta.group", "operator": "==", "value": "even"}


def _vector_docs(n: int = 120, dim: int = 8, seed: int = 0) -> tuple[list[Document], np.ndarray]:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    docs = [
        Document(
            id=f"d{i}",
            content=f"doc {i}",
            meta={"group": "even" if i % 2 == 0 else "odd", "source_id": f"s{i // 4}"},
            embedding=vectors[i].tolist(),
        )
        for i in range(n)
    ]
    return docs, vectors


@pytest.fixture(params=["local", "milvus"])
def vector_store(request, store_path):
    """120 documents with 8-d embeddings, in a directory or in a Milvus Lite collection."""
    if request.param == "milvus":
        store = RagHierDocumentStore(uri=request.getfixturevalue("milvus_collections")(8).location)
    else:
        store = RagHierDocumentStore(path=store_path)
    docs, vectors = _vector_docs()
    store.write_documents(docs)
    yield store, vectors
    store.close()


# ------------------------------------------------------------------------------------------------------
# RagHierRetriever: parameters checked against the registry's dataclass
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("strategy", "params", "match"),
    [
        ("nope", None, "unknown strategy 'nope'"),
        ("tree", {"beem": 4}, "beem.*beam"),
        ("tree", {"beam": "4"}, "beam must be an integer"),
        ("tree", {"beam": 0}, "beam must be >= 1"),
        ("hierarchical", {"k1": 2.5}, "k1"),
        ("hierarchical", {"lambda_": float("inf")}, "lambda_"),
        ("hierarchical", {"mode": "flat"}, "mode"),
        ("svdr-beta", {"mode": "full"}, "mode is fixed"),
        ("svdr-beta-rerank", {"rerank_m": -1}, "rerank_m"),
        ("fusion", {"method": "max"}, "method"),
        ("dense", ["not", "a", "dict"], "strategy_params must be a dict"),
    ],
)
def test_strategy_params_are_checked_at_construction(store_path, strategy, params, match):
    store = RagHierDocumentStore(path=store_path)
    with pytest.raises(ValueError, match=match):
        RagHierRetriever(document_store=store, strategy=strategy, strategy_params=params)
    assert not Path(store_path).exists()  # checked without opening the store


def test_generic_component_conventions(vector_store):
    store, _ = vector_store
    with pytest.raises(TypeError):
        RagHierRetriever(document_store=InMemoryDocumentStore())
    with pytest.raises(ValueError):
        RagHierRetriever(document_store=store, top_k=0)
    with pytest.raises(ValueError, match="scale_score"):
        RagHierRetriever(document_store=store, strategy="svdr-lexical", scale_score=True)
    assert inspect.signature(RagHierRetriever.run) == inspect.signature(RagHierRetriever.run_async)
    assert inspect.iscoroutinefunction(RagHierRetriever.run_async)
    assert list(inspect.signature(RagHierRetriever.run).parameters)[1:4] == [
        "query",
        "query_embedding",
        "query_sparse_embedding",
    ]
    retriever = RagHierRetriever(document_store=store)
    with pytest.raises(ValueError, match="query"):
        retriever.run()
    with pytest.raises(ValueError):
        retriever.run(query_embedding=[0.0] * 8, top_k=-1)
    assert retriever.run(query_embedding=[0.0] * 8, top_k=0)["documents"] == []


def test_generic_dense_equals_the_embedding_preset(vector_store):
    store, vectors = vector_store
    query = (vectors[3] + 0.2).tolist()
    generic = RagHierRetriever(document_store=store, strategy="dense", filters=EVEN, top_k=7, scale_score=True)
    preset = RagHierEmbeddingRetriever(document_store=store, filters=EVEN, top_k=7, scale_score=True)
    assert generic.run(query_embedding=query) == preset.run(query_embedding=query)
    assert asyncio.run(generic.run_async(query_embedding=query)) == generic.run(query_embedding=query)


def test_generic_to_dict_and_yaml_round_trip(store_path):
    store = RagHierDocumentStore(path=store_path)
    retriever = RagHierRetriever(
        document_store=store,
        strategy="fusion",
        strategy_params={"strategies": ("dense", "tree"), "method": "relative_score", "weights": (0.7, 0.3)},
        filters=EVEN,
        top_k=4,
        return_embedding=True,
        filter_policy=FilterPolicy.MERGE,
        auto_extensions=True,
    )
    data = retriever.to_dict()
    assert data["type"] == "haystack_integrations.components.retrievers.rag_hier.retriever.RagHierRetriever"
    assert data["init_parameters"] == {
        "document_store": store.to_dict(),
        "strategy": "fusion",
        "strategy_params": {"strategies": ["dense", "tree"], "method": "relative_score", "weights": [0.7, 0.3]},
        "filters": EVEN,
        "top_k": 4,
        "scale_score": False,
        "return_embedding": True,
        "filter_policy": "merge",
        "auto_extensions": True,
    }
    again = RagHierRetriever.from_dict(data)
    assert again.to_dict() == data and again.filter_policy == FilterPolicy.MERGE
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    assert Pipeline.loads(pipeline.dumps()).get_component("retriever").to_dict() == data
    default = RagHierRetriever(document_store=store).to_dict()["init_parameters"]
    assert (default["strategy"], default["strategy_params"]) == ("dense", {})


# ------------------------------------------------------------------------------------------------------
# the tree strategy through the registry alone
# ------------------------------------------------------------------------------------------------------
def test_tree_strategy_equals_the_engine(vector_store):
    store, vectors = vector_store
    store.hier_store.add_extension(TreeExtension())
    queries = vectors[[0, 17, 55]] + 0.05
    for beam in (1, 2, 64):
        retriever = RagHierRetriever(document_store=store, strategy="tree", strategy_params={"beam": beam}, top_k=6)
        engine = TreeRetriever(store.hier_store, beam=beam)
        for q in queries:
            for filters, predicate in ((None, None), (EVEN, lambda r: r["meta"]["group"] == "even")):
                docs = retriever.run(query_embedding=q.tolist(), filters=filters)["documents"]
                hits = engine.search_vectors(q[None, :], top_k=6, filters=predicate)[0]
                assert [(d.id, d.score) for d in docs] == [(h.passage_id, h.score) for h in hits]
                assert all("scores" not in d.meta for d in docs)  # tree reports no component scores
    # a beam as wide as the tree scores everything: the flat search's answer
    exhaustive = RagHierRetriever(document_store=store, strategy="tree", strategy_params={"beam": 1000}, top_k=10)
    flat = RagHierEmbeddingRetriever(document_store=store, top_k=10)
    q = queries[1].tolist()
    assert [d.id for d in exhaustive.run(query_embedding=q)["documents"]] == [
        d.id for d in flat.run(query_embedding=q)["documents"]
    ]


def test_tree_missing_says_how_to_build_it_and_auto_extensions_builds_it(vector_store):
    store, vectors = vector_store
    plain = RagHierRetriever(document_store=store, strategy="tree")
    with pytest.raises(DocumentStoreError, match="no cluster tree") as info:
        plain.run(query_embedding=vectors[0].tolist())
    assert "auto_extensions=True" in str(info.value)
    assert "add_extension(rag_hier.store.extensions.tree.TreeExtension())" in str(info.value)
    assert store.hier_store.extension("tree") is None  # nothing was written
    plain.warm_up()  # a missing extension is left to the first run

    auto = RagHierRetriever(document_store=store, strategy="tree", strategy_params={"beam": 1000}, auto_extensions=True)
    auto.warm_up()
    docs = auto.run(query_embedding=vectors[5].tolist(), top_k=1)["documents"]
    assert [d.id for d in docs] == ["d5"]
    assert isinstance(store.hier_store.extension("tree"), TreeExtension)
    # the tree follows later writes: a new passage is routed to a leaf and found
    store.write_documents([Document(id="new", content="new", embedding=(vectors[5] * 3).tolist())])
    assert auto.run(query_embedding=vectors[5].tolist(), top_k=1)["documents"][0].id == "new"
    assert plain.run(query_embedding=vectors[5].tolist(), top_k=1)["documents"][0].id == "new"


# ------------------------------------------------------------------------------------------------------
# registering a strategy makes it usable with no adapter edit
# ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FarthestParams(RetrieverParams):
    """A toy strategy's parameters."""

    power: int = param(1, help="odd power applied to the negated inner product", minimum=1)


class FarthestRetriever(Retriever[np.ndarray]):
    """A toy strategy registered by a test: the passages *least* like the query first."""

    name = "test-farthest"
    Params = FarthestParams

    def rank(self, queries, k, allowed, *, min_documents=None):
        rowids = self.store.passage_rowids() if allowed is None else allowed
        rowids = rowids[np.isin(rowids, self.store.rowids_of())]
        scores = -(self.store.vectors(rowids) @ queries.T).T.astype(np.float64)
        return [Ranking(rowids, s**self.params.power, components={"negated": s}, exhausted=True) for s in scores]


@pytest.fixture
def farthest_strategy():
    registry.register_strategy("test-farthest", FarthestRetriever, "passages least like the query first")
    yield "test-farthest"
    registry._ENTRIES.pop("test-farthest", None)


def test_a_newly_registered_strategy_works_with_no_adapter_edit(vector_store, farthest_strategy):
    store, vectors = vector_store
    with pytest.raises(ValueError, match="power"):
        RagHierRetriever(document_store=store, strategy=farthest_strategy, strategy_params={"power": 0})
    retriever = RagHierRetriever(
        document_store=store, strategy=farthest_strategy, strategy_params={"power": 3}, filters=EVEN, top_k=5
    )
    q = vectors[9]
    docs = retriever.run(query_embedding=q.tolist())["documents"]
    even = np.arange(0, len(vectors), 2)
    expected = even[np.argsort(vectors[even] @ q, kind="stable")[:5]]
    assert [d.id for d in docs] == [f"d{i}" for i in expected]
    for d in docs:
        negated = -float(vectors[int(d.id[1:])] @ q)
        assert d.meta["scores"] == {"negated": pytest.approx(negated, rel=1e-5)}
        assert d.score == pytest.approx(negated**3, rel=1e-4)
        assert d.meta["group"] == "even"


# ------------------------------------------------------------------------------------------------------
# component scores, hierarchical with query embeddings
# ------------------------------------------------------------------------------------------------------
def test_generic_hierarchical_reports_component_scores(vector_store):
    store, vectors = vector_store
    store.hier_store.add_extension(DocumentIndex())
    retriever = RagHierRetriever(
        document_store=store, strategy="hierarchical", strategy_params={"k1": 3, "lambda_": 0.5}, top_k=5
    )
    engine = EngineHierarchicalRetriever(store.hier_store, k1=3, lambda_=0.5)
    q = vectors[[21]]
    docs = retriever.run(query_embedding=q[0].tolist())["documents"]
    hits = engine.search_vectors(q, top_k=5)[0]
    assert [(d.id, d.score, d.meta["scores"]) for d in docs] == [(h.passage_id, h.score, dict(h.scores)) for h in hits]
    assert all(set(d.meta["scores"]) == {"passage", "document", "fused"} for d in docs)
    assert all("parent_document" not in d.meta for d in docs)  # the HierarchicalRetriever preset adds that
    assert len({d.meta["source_id"] for d in docs}) <= 3


def test_hierarchical_retriever_on_a_store_filled_by_sentence_transformers_embedders(store_path, tiny_model_path):
    embedders = pytest.importorskip("haystack_integrations.components.embedders.sentence_transformers")
    store = RagHierDocumentStore(path=store_path)  # no model: vectors come from Haystack's own embedders
    splitter = DocumentSplitter(split_by="period", split_length=1)
    sources = [
        Document(id="tides", content="The moon pulls the oceans. Tides rise twice a day. Spring tides are large."),
        Document(id="bees", content="Bees live in colonies. Bees dance to show flowers. Honey is stored in wax."),
        Document(id="lava", content="Magma rises through the crust. Volcanoes erupt lava. Ash travels far."),
    ]
    doc_embedder = embedders.SentenceTransformersDocumentEmbedder(
        model=tiny_model_path, progress_bar=False, local_files_only=True
    )
    doc_embedder.warm_up()
    store.write_documents(doc_embedder.run(splitter.run(sources)["documents"])["documents"])
    assert store.hier_store.encoder is None

    text = "Bees dance to show flowers."
    query = Pipeline()
    query.add_component(
        "embedder",
        embedders.SentenceTransformersTextEmbedder(model=tiny_model_path, progress_bar=False, local_files_only=True),
    )
    query.add_component(
        "retriever", HierarchicalRetriever(document_store=store, top_k=4, k1=1, auto_document_index=True)
    )
    query.connect("embedder.embedding", "retriever.query_embedding")
    docs = query.run({"embedder": {"text": text}})["retriever"]["documents"]
    vector = np.asarray(query.get_component("embedder").run(text=text)["embedding"], dtype=np.float32)
    engine = EngineHierarchicalRetriever(store.hier_store, k1=1).search_vectors(vector[None, :], top_k=4)[0]
    assert [(d.id, d.score) for d in docs] == [(h.passage_id, h.score) for h in engine]
    assert {d.meta["parent_document"]["id"] for d in docs} == {"bees"}
    assert docs[0].content.strip() == text

    for mode in ("flat", "parallel"):
        retriever = HierarchicalRetriever(document_store=store, top_k=3, mode=mode)
        got = retriever.run(query_embedding=vector.tolist())["documents"]
        assert got[0].content.strip() == text
        assert asyncio.run(retriever.run_async(query_embedding=vector.tolist())) == {"documents": got}
        with pytest.raises(DocumentStoreError) as info:  # text alone: nothing can encode it
            retriever.run(query=text)
        assert "query_embedding" in str(info.value) and "model=" in str(info.value)
    store.close()


# ------------------------------------------------------------------------------------------------------
# scale_score and similarity, against InMemoryDocumentStore on the same vectors
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
def test_scale_score_follows_in_memory_for_the_store_similarity(store_path, similarity):
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((50, 16))
    if similarity == "cosine":
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # a cosine store holds unit vectors
    docs = [Document(id=f"v{i}", content=f"v{i}", embedding=vectors[i].tolist()) for i in range(50)]
    ours = RagHierDocumentStore(path=store_path, similarity=similarity)
    ours.write_documents(docs)
    assert ours.hier_store.similarity == similarity
    reference = InMemoryDocumentStore(embedding_similarity_function=similarity, shared=False)
    reference.write_documents(docs)
    query = (3.0 * rng.standard_normal(16)).tolist()  # not a unit vector: InMemory's cosine normalizes it
    for scale in (False, True):
        got = RagHierEmbeddingRetriever(document_store=ours, top_k=8, scale_score=scale).run(query_embedding=query)
        want = InMemoryEmbeddingRetriever(document_store=reference, top_k=8, scale_score=scale).run(
            query_embedding=query
        )
        assert [d.id for d in got["documents"]] == [d.id for d in want["documents"]]
        np.testing.assert_allclose(
            [d.score for d in got["documents"]], [d.score for d in want["documents"]], rtol=1e-5, atol=1e-6
        )
    if similarity == "cosine":
        assert all(0.0 <= d.score <= 1.0 for d in got["documents"])
        assert max(d.score for d in got["documents"]) > 0.6  # (s+1)/2, not sigmoid(s/100) ~ 0.502
    ours.close()


def test_similarity_option_is_recorded_serialized_only_when_set_and_checked(store_path, tiny_model_path):
    default = RagHierDocumentStore(path=store_path)
    assert "similarity" not in default.to_dict()["init_parameters"]
    default.write_documents([Document(content="x", embedding=[1.0, 0.0])])
    assert default.hier_store.similarity == "dot_product"  # InMemoryDocumentStore's default
    default.close()
    asked = RagHierDocumentStore(path=store_path, similarity="cosine")
    assert asked.to_dict()["init_parameters"]["similarity"] == "cosine"
    assert RagHierDocumentStore.from_dict(asked.to_dict()).similarity == "cosine"
    with pytest.raises(DocumentStoreError, match="records similarity 'dot_product', not 'cosine'"):
        asked.count_documents()
    with pytest.raises(ValueError, match="similarity"):
        RagHierDocumentStore(path=store_path, similarity="l2")
    model_store = RagHierDocumentStore(path=store_path + "-model", model=tiny_model_path, device="cpu")
    model_store.write_documents([Document(content="tides")])
    assert model_store.hier_store.similarity == "cosine"  # a normalizing model
    model_store.close()


# ------------------------------------------------------------------------------------------------------
# one view across instances and processes; reads read-only until the first write
# ------------------------------------------------------------------------------------------------------
SECOND_PROCESS = textwrap.dedent(
    """
    import sys
    from haystack import Document
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path=sys.argv[1])
    store.write_documents([Document(id="b", content="from process B", embedding=[0.0, 1.0, 0.0])])
    print(store.count_documents())
    store.close()
    """
)


def _run_second_process(path: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAYSTACK_")}
    env["HAYSTACK_TELEMETRY_ENABLED"] = "False"
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS, path], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_another_process_writes_are_seen_and_writes_go_on(store_path):
    writer = RagHierDocumentStore(path=store_path)
    writer.write_documents([Document(id="a", content="from process A", embedding=[1.0, 0.0, 0.0])])
    reader = RagHierDocumentStore(path=store_path)  # another instance in this process, reading only
    assert reader.count_documents() == 1
    assert _run_second_process(store_path) == "2"
    for store in (writer, reader):
        assert store.count_documents() == 2
        docs = store.filter_documents()
        assert [(d.id, d.embedding) for d in docs] == [("a", [1.0, 0.0, 0.0]), ("b", [0.0, 1.0, 0.0])]
        assert [d.id for d in store.embedding_retrieval([0.0, 1.0, 0.0], top_k=2)] == ["b", "a"]
        assert store.filter_documents({"field": "content", "operator": "==", "value": "from process B"})[0].id == "b"
    writer.write_documents([Document(id="c", content="from process A again", embedding=[0.0, 0.0, 1.0])])
    assert reader.count_documents() == 3 and [d.id for d in reader.filter_documents()] == ["a", "b", "c"]
    writer.close()
    reader.close()
    again = RagHierDocumentStore(path=store_path)
    assert again.count_documents() == 3
    again.close()


def test_reads_touch_no_file_until_the_first_write(store_path):
    first = RagHierDocumentStore(path=store_path)
    first.write_documents(
        [
            Document(id="x", content="x", embedding=[1.0, 0.0], sparse_embedding=SparseEmbedding([1], [1.0])),
            Document(id="y", content="y", embedding=[0.0, 1.0]),
        ]
    )
    first.close()
    stray = Path(store_path) / "dense.faiss.g99.tmp"  # what a writer in another process would own mid-commit
    stray.write_bytes(b"in progress")
    store = RagHierDocumentStore(path=store_path)
    assert store.count_documents() == 2
    assert [d.id for d in store.filter_documents({"field": "id", "operator": "in", "value": ["y"]})] == ["y"]
    assert [d.id for d in store.embedding_retrieval([0.0, 1.0], top_k=1)] == ["y"]
    assert [d.id for d in store.sparse_embedding_retrieval(SparseEmbedding([1], [2.0]))] == ["x"]
    assert store.get_metadata_fields_info() == {}
    assert RagHierRetriever(document_store=store).run(query_embedding=[1.0, 0.0], top_k=1)["documents"][0].id == "x"
    assert stray.exists()  # reading never renames or deletes a file
    store.write_documents([Document(id="z", content="z", embedding=[1.0, 1.0])])
    assert not stray.exists()  # the first write recovered under the writer lock
    assert store.count_documents() == 3
    store.close()


def test_recreate_index_touches_nothing_but_the_store_files(tmp_path):
    root = tmp_path / "store"
    store = RagHierDocumentStore(path=str(root))
    store.write_documents([Document(content="x", embedding=[0.1, 0.2, 0.3])])
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    user_tmp = root / "notes.tmp"
    user_tmp.write_text("not the store's")
    store.delete_all_documents(recreate_index=True)
    assert victim.read_text() == "keep me" and user_tmp.read_text() == "not the store's"
    store.write_documents([Document(content="y", embedding=[0.1, 0.2])])
    assert store.hier_store.dimension == 2 and store.count_documents() == 1
    store.close()


# ------------------------------------------------------------------------------------------------------
# bad input: the library's own errors, never a traceback from recursion
# ------------------------------------------------------------------------------------------------------
def test_deeply_nested_filters_and_meta_are_refused_cleanly(store_path):
    store = RagHierDocumentStore(path=store_path)
    store.write_documents([Document(content="x", meta={"n": 1})])
    deep: dict = {"field": "meta.n", "operator": "==", "value": 1}
    for _ in range(2000):
        deep = {"operator": "NOT", "conditions": [deep]}
    with pytest.raises(FilterError, match="nested"):
        store.filter_documents(deep)
    with pytest.raises(FilterError, match="nested"):
        RagHierRetriever(document_store=store).run(query_embedding=[1.0], filters=deep)
    meta: list = []
    for _ in range(2000):
        meta = [meta]
    with pytest.raises(DocumentStoreError, match="nested"):
        store.write_documents([Document(id="deep", content="y", meta={"deep": meta})])
    assert store.count_documents() == 1
    store.close()


FRESH_INTERPRETER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from haystack import Pipeline

    pipeline = Pipeline.loads(Path(sys.argv[1]).read_text())
    out = pipeline.run({"retriever": {"query_embedding": json.loads(sys.argv[2])}})
    print(json.dumps([[d.id, d.meta["scores"]] for d in out["retriever"]["documents"]]))
    """
)


def test_generic_retriever_yaml_in_a_fresh_interpreter(tmp_path, vector_store):
    store, vectors = vector_store
    if store.uri is not None:
        pytest.skip(
            "needs two processes on one store at once (this one keeps it open while the fresh interpreter builds "
            "the document index); Milvus Lite serves a .db file to one process. The YAML round trip with a uri "
            "in a fresh interpreter: test_haystack_pipelines.py::test_yaml_round_trip_in_a_fresh_interpreter"
        )
    retriever = RagHierRetriever(
        document_store=RagHierDocumentStore(path=store.path),
        strategy="hierarchical",
        strategy_params={"k1": 2, "lambda_": 0.25},
        top_k=3,
        auto_extensions=True,
    )
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    (tmp_path / "query.yaml").write_text(pipeline.dumps())
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAYSTACK_")}  # default allowlist
    env["HAYSTACK_TELEMETRY_ENABLED"] = "False"
    query = vectors[13].tolist()
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_INTERPRETER, str(tmp_path / "query.yaml"), json.dumps(query)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    here = pipeline.run({"retriever": {"query_embedding": query}})["retriever"]["documents"]
    assert there == [[d.id, d.meta["scores"]] for d in here]  # the document index the other process built
    assert store.hier_store.extension("doc-index") is not None


# ------------------------------------------------------------------------------------------------------
# a cosine store holds unit vectors; scale_score of other strategies follows the same similarity
# ------------------------------------------------------------------------------------------------------
def test_cosine_store_refuses_embeddings_that_are_not_unit_vectors(store_path):
    store = RagHierDocumentStore(path=store_path, similarity="cosine")
    store.write_documents([Document(id="unit", content="u", embedding=[0.6, 0.8])])
    with pytest.raises(DocumentStoreError, match=r"document 'long'.*norm 2.*similarity 'cosine'.*dot_product"):
        store.write_documents(
            [
                Document(id="ok", content="o", embedding=[1.0, 0.0]),
                Document(id="long", content="l", embedding=[2.0, 0.0]),
            ]
        )
    with pytest.raises(DocumentStoreError, match="norm 0"):
        store.write_documents([Document(id="zero", content="z", embedding=[0.0, 0.0])])
    assert [d.id for d in store.filter_documents()] == ["unit"]  # nothing of a refused write is kept
    store.write_documents([Document(id="text only", content="t")])  # no embedding: nothing to check
    assert store.count_documents() == 2
    dot = RagHierDocumentStore(path=store_path + "-dot")
    dot.write_documents([Document(id="long", content="l", embedding=[2.0, 0.0])])  # any length in a dot store
    store.close()
    dot.close()


@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
def test_tree_and_hierarchical_scale_score_follow_the_store_similarity(store_path, similarity):
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((40, 8))
    if similarity == "cosine":
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = [
        Document(id=f"v{i}", content=f"v{i}", meta={"source_id": f"s{i}"}, embedding=vectors[i].tolist())
        for i in range(40)
    ]
    ours = RagHierDocumentStore(path=store_path, similarity=similarity)
    ours.write_documents(docs)
    reference = InMemoryDocumentStore(embedding_similarity_function=similarity, shared=False)
    reference.write_documents(docs)
    query = (2.0 * rng.standard_normal(8)).tolist()
    want = InMemoryEmbeddingRetriever(document_store=reference, top_k=5, scale_score=True).run(query_embedding=query)
    want_pairs = [(d.id, d.score) for d in want["documents"]]
    for strategy, params in (("tree", {"beam": 1000}), ("hierarchical", {"k1": 1000, "lambda_": 0.0})):
        retriever = RagHierRetriever(
            document_store=ours,
            strategy=strategy,
            strategy_params=params,
            top_k=5,
            scale_score=True,
            auto_extensions=True,
        )
        got = [(d.id, d.score) for d in retriever.run(query_embedding=query)["documents"]]
        assert [i for i, _ in got] == [i for i, _ in want_pairs], strategy
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want_pairs], rtol=1e-5, atol=1e-6)
    ours.close()


# ------------------------------------------------------------------------------------------------------
# every registered strategy is reachable from Haystack, with the engine's answer
# ------------------------------------------------------------------------------------------------------
STRATEGY_TEXTS = [
    "The moon pulls the oceans into two bulges.",
    "Bees dance to show where the flowers are.",
    "Honey is stored in wax cells by bees.",
    "Volcanoes erupt lava and ash.",
    "Spring tides follow the full moon.",
    "Magma rises through the crust.",
]


@pytest.mark.parametrize("name", registry.strategy_names())
def test_every_registered_strategy_runs_through_rag_hier_retriever(tmp_path, tiny_model_path, name):
    store = RagHierDocumentStore(path=str(tmp_path / "s"), model=tiny_model_path, device="cpu")
    store.write_documents(
        [
            Document(
                id=f"d{i}",
                content=text,
                meta={"source_id": f"s{i // 2}"},
                sparse_embedding=SparseEmbedding([i, 10 + i % 3], [1.0, 0.5]),
            )
            for i, text in enumerate(STRATEGY_TEXTS)
        ]
    )
    params = {"vocab_model": tiny_model_path} if name.startswith("svdr") else {}
    if name == "ehi":  # needs a trained indexer, which auto_extensions cannot build: a k-means stand-in
        from rag_hier.testing import kmeans_ehi_extension

        store.hier_store.add_extension(kmeans_ehi_extension(store.hier_store))
    retriever = RagHierRetriever(
        document_store=store, strategy=name, strategy_params=params, top_k=3, auto_extensions=True
    )
    query, sparse = "bees and honey", SparseEmbedding([1, 2, 11], [1.0, 1.0, 0.5])
    docs = retriever.run(query=query, query_sparse_embedding=sparse)["documents"]
    assert 0 < len(docs) <= 3
    # the engine, on the same store with the extensions the run built, gives the same ranking
    hier = store.hier_store
    engine = registry.build_retriever(name, hier, **params)
    hits = engine.run(Queries(texts=[query], sparse=[([1, 2, 11], [1.0, 1.0, 0.5])]), 3)[0].hits
    assert [(d.id, d.score) for d in docs] == [(h.passage_id, pytest.approx(h.score, rel=1e-6)) for h in hits]
    store.close()


def test_fusion_says_which_component_extension_is_missing(vector_store):
    store, vectors = vector_store
    params = {"strategies": ("dense", "tree")}
    plain = RagHierRetriever(document_store=store, strategy="fusion", strategy_params=params)
    plain.warm_up()  # a missing component extension is left to the first run
    with pytest.raises(DocumentStoreError, match=r"auto_extensions=True.*TreeExtension"):
        plain.run(query_embedding=vectors[0].tolist())
    auto = RagHierRetriever(document_store=store, strategy="fusion", strategy_params=params, auto_extensions=True)
    docs = auto.run(query_embedding=vectors[0].tolist(), top_k=3)["documents"]
    assert store.hier_store.extension("tree") is not None
    engine = registry.build_retriever("fusion", store.hier_store, params)
    hits = engine.run(Queries(vectors=vectors[[0]]), 3)[0].hits
    assert [(d.id, d.score) for d in docs] == [(h.passage_id, h.score) for h in hits] and len(docs) == 3
