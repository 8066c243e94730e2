"""RagHierRetriever: every registered strategy through one LlamaIndex retriever, and HYBRID's fusion choice."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from llama_index.retrievers.rag_hier import RagHierRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier.retrieval import build_retriever
from rag_hier.retrieval.base import Queries
from rag_hier.retrieval.fusion import FusionRetriever

TEXTS = {
    "tides": ["The moon pulls the oceans and makes tides", "Spring tides are the strongest tides"],
    "bees": ["Honeybees live in colonies", "Worker bees turn nectar into honey in wax cells"],
    "volcano": ["Magma rises from the mantle", "A volcano erupts lava and ash"],
}
# every strategy that needs no model or extension this test cannot build offline (sparse-embedding needs a
# sparse encoder's vectors): its parameters, and whether it reads the dense query vector
STRATEGIES = {
    "dense": {},
    "hierarchical": {"k1": 2},
    "tree": {"beam": 4},
    "svdr-lexical": {},
    "svdr-beta": {},
    "bm25": {"k1": 1.2},
    "fusion": {"method": "rrf"},
}


def _nodes() -> list[TextNode]:
    return [
        TextNode(text=t, id_=f"{d}-{i}", relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d)})
        for d, texts in TEXTS.items()
        for i, t in enumerate(texts)
    ]


@pytest.fixture(scope="module", params=["local", "milvus"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str):
    """One store per backend for the module (its encoder loads once); tests only add extensions to it."""
    if request.param == "milvus":
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        location = {"uri": f"{tmp_path_factory.mktemp('rag-hier-retriever-milvus') / 'm.db'}#retriever"}
    else:
        location = {"path": str(tmp_path_factory.mktemp("rag-hier-retriever") / "store")}
    s = RagHierVectorStore(**location, model=tiny_model_path, token_index={"model": tiny_model_path})
    s.add(_nodes())  # embedded by the store's own encoder
    yield s
    s.close()


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_is_the_engine_strategy(store: RagHierVectorStore, tiny_model_path: str, name: str) -> None:
    params = dict(STRATEGIES[name])
    if name == "svdr-beta":
        params["vocab_model"] = tiny_model_path
    retriever = RagHierRetriever(store, name, similarity_top_k=3, auto_extensions=True, **params)
    query = "worker bees make honey"
    got = retriever.retrieve(query)
    assert 1 <= len(got) <= 3
    # the same ranking as the engine's strategy over the same store
    engine = build_retriever(name, store.reader, **params)
    vectors = store.query_vector(query) if engine.uses_query_vectors else None
    hits = engine.run(Queries(texts=[query], vectors=vectors), 3)[0].hits
    assert [n.node.node_id for n in got] == [h.passage_id for h in hits]
    np.testing.assert_allclose([n.score for n in got], [h.score for h in hits], rtol=1e-6)


def test_text_only_strategy_never_embeds_the_query(store: RagHierVectorStore) -> None:
    retriever = RagHierRetriever(store, "svdr-lexical", similarity_top_k=2, auto_extensions=True)
    assert retriever.engine.uses_query_vectors is False
    got = retriever.retrieve(QueryBundle("nectar", embedding=[float("nan")]))  # would fail if it were read
    assert got[0].node.node_id == "bees-1"


def test_missing_extension_and_bad_parameters_are_named(store_path: str, hash_embedding) -> None:
    store = RagHierVectorStore(store_path)  # fed with vectors, no extension
    nodes = _nodes()
    for n in nodes:
        n.embedding = hash_embedding.get_text_embedding(n.get_content())
    store.add(nodes)
    with pytest.raises(ValueError, match=r"'tree' extension.*auto_extensions=True"):
        RagHierRetriever(store, "tree", embed_model=hash_embedding).retrieve("honey")
    got = RagHierRetriever(store, "tree", embed_model=hash_embedding, auto_extensions=True).retrieve("honey")
    assert got and store.reader.extension("tree") is not None
    with pytest.raises(ValueError, match="beam"):
        RagHierRetriever(store, "tree", beam=0)
    with pytest.raises(ValueError, match="nope"):
        RagHierRetriever(store, "dense", nope=1)
    with pytest.raises(ValueError):
        RagHierRetriever(store, "no-such-strategy")
    store.close()


@pytest.mark.parametrize("method", ["rrf", "dbsf", "convex"])
def test_hybrid_fusion_is_configurable(store_path: str, tiny_model_path: str, method: str) -> None:
    s = RagHierVectorStore(
        store_path,
        model=tiny_model_path,
        token_index={"model": tiny_model_path},
        sparse_mode="lexical",
        hybrid_fusion=method,
    )
    s.add(_nodes())
    query = "bees turn nectar into honey"
    got = s.query(
        VectorStoreQuery(
            query_str=query, mode=VectorStoreQueryMode.HYBRID, similarity_top_k=4, sparse_top_k=5, alpha=0.3
        )
    )
    fusion = FusionRetriever(
        s.reader,
        strategies=("dense", "svdr-lexical"),
        method=method,
        weights=(0.3, 0.7),
        depths=(4, 5),
        keep_zero_scores=True,
    )
    hits = fusion.run(Queries(texts=[query], vectors=s.query_vector(query)), 4)[0].hits
    assert got.ids == [h.passage_id for h in hits]
    np.testing.assert_allclose(got.similarities, [h.score for h in hits], rtol=1e-6)
    s.close()
    with pytest.raises(ValueError, match="hybrid_fusion"):
        RagHierVectorStore(store_path, hybrid_fusion="nope")
