"""Tuning through the framework adapters: the store's retrievers encode with the tuned model at the next query."""

from __future__ import annotations

import pytest

from rag_hier import HierStore

QUERY = "red blue green"


def _expected(path) -> list[str]:
    store = HierStore.open(path, read_only=True)
    try:
        return [h.doc_id for h in store.search(QUERY, top_k=5)]
    finally:
        store.close()


def test_haystack_document_store_tune(judged_store, judged_maps, learns, tiny_model_path) -> None:
    pytest.importorskip("haystack")
    from haystack_integrations.components.retrievers.rag_hier import RagHierRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    path, _ = judged_store
    queries, qrels = judged_maps
    before = _expected(path)
    # opened with an explicit model: that encoder belongs to the base vectors and gives way once the store switches
    ds = RagHierDocumentStore(str(path), model=tiny_model_path)
    retriever = RagHierRetriever(ds, strategy="dense", top_k=5)
    assert [d.meta.get("doc_id", d.id.split("#")[0]) for d in retriever.run(query=QUERY)["documents"]]
    report = ds.tune(queries, qrels, **learns)
    assert report.adopted, report.reason
    after = [d.id.split("#")[0] for d in retriever.run(query=QUERY)["documents"]]
    assert after == _expected(path) != before
    ds.rollback_model()
    assert [d.id.split("#")[0] for d in retriever.run(query=QUERY)["documents"]] == before
    ds.close()


def test_llama_index_vector_store_tune(judged_store, judged_maps, learns) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.retrievers.rag_hier import RagHierRetriever
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    path, _ = judged_store
    queries, qrels = judged_maps
    before = _expected(path)
    vs = RagHierVectorStore(path)
    retriever = RagHierRetriever(vs, "dense", similarity_top_k=5)
    report = vs.tune(queries, qrels, **learns)
    assert report.adopted, report.reason
    after = [n.node.metadata.get("doc_id") or n.node.node_id.split("#")[0] for n in retriever.retrieve(QUERY)]
    assert after == _expected(path) != before
    vs.close()
