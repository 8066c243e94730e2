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


def test_haystack_chat_generator_writes_the_questions(judged_store, stays) -> None:
    pytest.importorskip("haystack")
    from haystack import component
    from haystack.dataclasses import ChatMessage
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    @component
    class EchoChat:
        """A ChatGenerator stand-in: asked about a passage, it answers with two numbered lines of its words."""

        def __init__(self) -> None:
            self.prompts: list[str] = []

        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage]) -> dict:
            prompt = messages[0].text or ""
            self.prompts.append(prompt)
            context = prompt.split("---------------------\n")[1].split("\n")[0].split()
            return {"replies": [ChatMessage.from_assistant(f"1. {' '.join(context[:3])}\n2. {' '.join(context[2:])}")]}

    path, _ = judged_store
    chat = EchoChat()
    ds = RagHierDocumentStore(str(path))
    report = ds.tune(generator=chat, **stays)
    assert len(chat.prompts) == 40 and "write 2 questions" in chat.prompts[0]
    assert report.dev_queries == 80
    assert ds.hier_store.extension("questions").describe()["generator"].startswith("haystack:")
    ds.close()


def test_llama_index_llm_writes_the_questions(judged_store, stays) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    class EchoLLM:
        """An LLM stand-in with ``complete`` (what ``llm_questions`` calls)."""

        def __init__(self) -> None:
            self.calls = 0

        def complete(self, prompt: str):
            self.calls += 1
            context = prompt.split("---------------------\n")[1].split("\n")[0].split()

            class Reply:
                text = f"- {' '.join(context[:3])}\n- {' '.join(context[-3:])}"

            return Reply()

    path, _ = judged_store
    llm = EchoLLM()
    vs = RagHierVectorStore(path)
    report = vs.tune(generator=llm, **stays)
    assert llm.calls == 40 and report.dev_queries == 80
    vs.close()
