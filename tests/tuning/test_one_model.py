"""One model for queries and passages: after a store's model is switched, everything that encodes its queries follows
the store, or is refused with one line naming both models and the fix."""

from __future__ import annotations

import pytest

from rag_hier import DenseEncoder, HierStore
from rag_hier.errors import ModelMismatchError
from rag_hier.testing import build_tiny_model

QUERY = "red blue green"


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Another tiny model (other weights): what a store adopts in these tests, standing in for a tuned one."""
    return str(build_tiny_model(tmp_path_factory.mktemp("other") / "m", seed=7))


def _top(path) -> list[str]:
    store = HierStore.open(path, read_only=True)
    try:
        return [h.doc_id for h in store.search(QUERY, top_k=5)]
    finally:
        store.close()


def _adopt(path, model: str) -> list[str]:
    """Switch the store at ``path`` to ``model``; the store's own top 5 before, asserting it changes."""
    before = _top(path)
    with HierStore.open(path) as store:
        store.adopt_model(model)
    assert _top(path) != before
    return before


def test_opening_with_the_base_model_follows_the_adopted_one(judged_store, other_model, tiny_model_path) -> None:
    path, _ = judged_store
    _adopt(path, other_model)
    store = HierStore.open(path, encoder=DenseEncoder(tiny_model_path, device="cpu"))
    try:
        assert store.encoder.model_name != tiny_model_path
        assert [h.doc_id for h in store.search(QUERY, top_k=5)] == _top(path)
    finally:
        store.close()
    with pytest.raises(ModelMismatchError, match="allow_other_model=True"):  # an unrelated model is still refused
        HierStore.open(path, encoder=DenseEncoder(str(build_tiny_model(path.parent / "third", seed=11))))


def test_a_saved_haystack_pipeline_follows_the_tuned_model(judged_store, other_model, tiny_model_path) -> None:
    pytest.importorskip("haystack")
    from haystack import Pipeline
    from haystack_integrations.components.retrievers.rag_hier import RagHierRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    path, _ = judged_store
    pipeline = Pipeline()
    ds = RagHierDocumentStore(str(path), model=tiny_model_path, device="cpu")
    pipeline.add_component("retriever", RagHierRetriever(ds, strategy="dense", top_k=5))
    saved = pipeline.dumps()
    assert "model:" in saved
    ds.close()
    _adopt(path, other_model)
    reloaded = Pipeline.loads(saved)
    docs = reloaded.run({"retriever": {"query": QUERY}})["retriever"]["documents"]
    assert [d.id.split("#")[0] for d in docs] == _top(path)


def test_a_haystack_store_with_another_model_is_refused_unless_asked(judged_store, other_model) -> None:
    pytest.importorskip("haystack")
    from haystack.document_stores.errors import DocumentStoreError
    from haystack_integrations.components.retrievers.rag_hier import RagHierRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    path, _ = judged_store
    ds = RagHierDocumentStore(str(path), model=other_model, device="cpu")
    with pytest.raises(DocumentStoreError) as refused:
        RagHierRetriever(ds, strategy="dense", top_k=5).run(query=QUERY)
    line = str(refused.value)
    assert "\n" not in line and other_model in line and "allow_other_model=True" in line
    allowed = RagHierDocumentStore(str(path), model=other_model, device="cpu", allow_other_model=True)
    assert len(RagHierRetriever(allowed, strategy="dense", top_k=5).run(query=QUERY)["documents"]) == 5
    assert allowed.to_dict()["init_parameters"]["allow_other_model"] is True
    allowed.close()


def test_haystack_text_embedder_given_the_store_follows_it(judged_store, other_model, tiny_model_path) -> None:
    pytest.importorskip("haystack")
    from haystack import Pipeline
    from haystack.core.errors import PipelineRuntimeError
    from haystack_integrations.components.embedders.rag_hier import RagHierTextEmbedder
    from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    path, _ = judged_store

    def pipeline(embedder: RagHierTextEmbedder, ds: RagHierDocumentStore) -> Pipeline:
        p = Pipeline()
        p.add_component("embedder", embedder)
        p.add_component("retriever", RagHierEmbeddingRetriever(ds, top_k=5))
        p.connect("embedder.embedding", "retriever.query_embedding")
        return p

    ds = RagHierDocumentStore(str(path), device="cpu")
    following = pipeline(RagHierTextEmbedder(document_store=ds, progress_bar=False), ds)
    saved = following.dumps()
    _adopt(path, other_model)
    docs = following.run({"embedder": {"text": QUERY}})["retriever"]["documents"]
    assert [d.id.split("#")[0] for d in docs] == _top(path)
    docs = Pipeline.loads(saved).run({"embedder": {"text": QUERY}})["retriever"]["documents"]
    assert [d.id.split("#")[0] for d in docs] == _top(path)
    stale = pipeline(RagHierTextEmbedder(model=tiny_model_path, progress_bar=False), ds)
    with pytest.raises(PipelineRuntimeError, match=r"RagHierTextEmbedder\(document_store=store\)") as refused:
        stale.run({"embedder": {"text": QUERY}})
    assert tiny_model_path in str(refused.value)
    ds.close()


def test_llama_index_recipes_follow_the_tuned_model(judged_store, other_model, tiny_model_path) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.embeddings.rag_hier import RagHierEmbedding
    from llama_index.retrievers.rag_hier import RagHierRetriever
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    path, _ = judged_store
    _adopt(path, other_model)
    expected = _top(path)

    def ids(nodes) -> list[str]:
        return [n.node.node_id.split("#")[0] for n in nodes]

    vs = RagHierVectorStore(str(path), model=tiny_model_path)  # a handle saved with the base model
    assert ids(RagHierRetriever(vs, "dense", similarity_top_k=5).retrieve(QUERY)) == expected
    index = VectorStoreIndex.from_vector_store(vs, embed_model=RagHierEmbedding(vector_store=vs))
    assert ids(index.as_retriever(similarity_top_k=5).retrieve(QUERY)) == expected
    stale = VectorStoreIndex.from_vector_store(vs, embed_model=RagHierEmbedding(tiny_model_path))
    with pytest.raises(ValueError, match=r"RagHierEmbedding\(vector_store=store\)"):
        stale.as_retriever(similarity_top_k=5).retrieve(QUERY)
    vs.close()


def test_haystack_documents_embedded_by_the_old_model_are_refused(judged_store, other_model, tiny_model_path) -> None:
    pytest.importorskip("haystack")
    from haystack import Document, Pipeline
    from haystack.components.writers import DocumentWriter
    from haystack.core.errors import PipelineRuntimeError
    from haystack_integrations.components.embedders.rag_hier import RagHierDocumentEmbedder
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    path, _ = judged_store

    def indexing(ds: RagHierDocumentStore, *, embedder: bool) -> Pipeline:
        p = Pipeline()
        p.add_component("writer", DocumentWriter(document_store=ds))
        if embedder:
            p.add_component("embedder", RagHierDocumentEmbedder(model=tiny_model_path, progress_bar=False))
            p.connect("embedder.documents", "writer.documents")
        return p

    ds = RagHierDocumentStore(str(path), device="cpu")
    indexing(ds, embedder=True).run({"embedder": {"documents": [Document(id="before", content="red blue")]}})
    _adopt(path, other_model)
    with pytest.raises(PipelineRuntimeError, match="Drop the document embedder") as refused:
        indexing(ds, embedder=True).run({"embedder": {"documents": [Document(id="after", content="red blue")]}})
    assert tiny_model_path in str(refused.value)
    assert ds.filter_documents({"field": "id", "operator": "==", "value": "after"}) == []
    indexing(ds, embedder=False).run({"writer": {"documents": [Document(id="after", content="red blue")]}})
    assert len(ds.filter_documents({"field": "id", "operator": "==", "value": "after"})) == 1
    ds.close()
