"""RagHierVectorStore behind a VectorStoreIndex: build, retrieve, query engine, insert, delete, persist, reload.

Tests taking ``make_store`` run on a local directory and on a Milvus Lite collection (``conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from llama_index.core import Document, MockEmbedding, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters
from llama_index.vector_stores.rag_hier import RagHierVectorStore

TEXTS = {
    "tides": (
        "Tides are the rise and fall of sea levels. The moon pulls the oceans with its gravity. "
        "Spring tides happen when the sun and the moon line up. Neap tides are the weakest tides."
    ),
    "bees": (
        "Honeybees live in colonies with one queen. Worker bees collect nectar from flowers. "
        "Bees turn nectar into honey and store it in wax cells. Drones mate with the queen."
    ),
    "volcano": (
        "A volcano is an opening in the crust of a planet. Magma rises from the mantle and erupts as lava. "
        "Volcanic ash can travel around the world. Some volcanoes sleep for thousands of years."
    ),
}
QUESTIONS = {
    "tides": "why do spring tides happen with the moon and the sun",
    "bees": "how do worker bees turn nectar into honey",
    "volcano": "where does magma and lava of a volcano come from",
}


def _docs() -> list[Document]:
    return [
        Document(text=text, id_=doc_id, metadata={"topic": doc_id, "year": 2000 + i})
        for i, (doc_id, text) in enumerate(TEXTS.items())
    ]


def _build(store: RagHierVectorStore, embed_model, docs: list[Document] | None = None) -> VectorStoreIndex:
    return VectorStoreIndex.from_documents(
        docs if docs is not None else _docs(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
        transformations=[SentenceSplitter(chunk_size=32, chunk_overlap=0)],
    )


def test_from_documents_retrieve_and_query_engine(make_store, hash_embedding) -> None:
    store = make_store(64)
    index = _build(store, hash_embedding)
    n_nodes = len(store.get_nodes())
    assert n_nodes > len(TEXTS)  # every document was split into several nodes
    assert index.docstore.docs == {}  # the store keeps the text: no docstore needed
    retriever = index.as_retriever(similarity_top_k=2)
    for doc_id, question in QUESTIONS.items():
        hits = retriever.retrieve(question)
        assert len(hits) == 2
        assert hits[0].node.ref_doc_id == doc_id
        assert hits[0].score >= hits[1].score
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3)
    response = engine.query(QUESTIONS["bees"])
    assert len(response.source_nodes) == 3
    assert response.source_nodes[0].node.ref_doc_id == "bees"
    assert isinstance(str(response), str)


def test_retriever_with_filters(make_store, hash_embedding) -> None:
    index = _build(make_store(64), hash_embedding)
    filters = MetadataFilters(filters=[MetadataFilter(key="year", operator=FilterOperator.GTE, value=2001)])
    hits = index.as_retriever(similarity_top_k=50, filters=filters).retrieve(QUESTIONS["tides"])
    assert hits and {h.node.ref_doc_id for h in hits} == {"bees", "volcano"}
    hits = index.as_retriever(similarity_top_k=2, doc_ids=["volcano"]).retrieve(QUESTIONS["tides"])
    assert [h.node.ref_doc_id for h in hits] == ["volcano", "volcano"]


def test_insert_then_delete_ref_doc(make_store, hash_embedding) -> None:
    store = make_store(64)
    index = _build(store, hash_embedding)
    question = "which bird builds nests from mud and saliva"
    index.insert(Document(text="Swallows build nests from mud and saliva under roofs.", id_="swallows"))
    assert index.as_retriever(similarity_top_k=1).retrieve(question)[0].node.ref_doc_id == "swallows"
    before = len(store.get_nodes())
    bees = len(store.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value="bees")])))
    index.delete_ref_doc("bees")
    assert len(store.get_nodes()) == before - bees
    hits = index.as_retriever(similarity_top_k=50).retrieve(QUESTIONS["bees"])
    assert "bees" not in {h.node.ref_doc_id for h in hits}
    index.delete_ref_doc("swallows")
    assert index.as_retriever(similarity_top_k=1).retrieve(question)[0].node.ref_doc_id != "swallows"


def test_index_delete_nodes_and_from_vector_store(make_store, hash_embedding) -> None:
    store = make_store(64)
    index = _build(store, hash_embedding)
    victim = index.as_retriever(similarity_top_k=1).retrieve(QUESTIONS["volcano"])[0].node.node_id
    index.delete_nodes([victim])
    assert victim not in {n.node_id for n in store.get_nodes()}
    reopened = VectorStoreIndex.from_vector_store(make_store(64), embed_model=hash_embedding)
    hits = reopened.as_retriever(similarity_top_k=3).retrieve(QUESTIONS["volcano"])
    assert hits[0].node.ref_doc_id == "volcano" and victim not in {h.node.node_id for h in hits}


def test_persist_new_process_reload_same_results(tmp_path: Path, hash_embedding) -> None:
    index = _build(RagHierVectorStore(), hash_embedding)  # a temporary store, like SimpleVectorStore
    persist_dir = tmp_path / "storage"
    index.storage_context.persist(persist_dir=str(persist_dir))
    assert (persist_dir / "default__vector_store" / "manifest.json").is_file()
    retriever = index.as_retriever(similarity_top_k=3)
    queries = {q: hash_embedding.get_query_embedding(q) for q in QUESTIONS.values()}
    expected = {
        q: [[h.node.node_id, h.node.get_content(), h.score] for h in retriever.retrieve(QueryBundle(q, embedding=e))]
        for q, e in queries.items()
    }
    script = textwrap.dedent(
        """
        import json, sys
        from llama_index.core import MockEmbedding, StorageContext, load_index_from_storage
        from llama_index.core.schema import QueryBundle
        from llama_index.vector_stores.rag_hier import RagHierVectorStore

        persist_dir, queries = sys.argv[1], json.loads(sys.stdin.read())
        store = RagHierVectorStore.from_persist_dir(persist_dir)
        ctx = StorageContext.from_defaults(persist_dir=persist_dir, vector_store=store)
        index = load_index_from_storage(ctx, embed_model=MockEmbedding(embed_dim=64))
        retriever = index.as_retriever(similarity_top_k=3)
        out = {}
        for q, e in queries.items():
            hits = retriever.retrieve(QueryBundle(q, embedding=e))
            out[q] = [[h.node.node_id, h.node.get_content(), h.score] for h in hits]
        print(json.dumps(out))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(persist_dir)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.keys() == expected.keys()
    for q in expected:
        assert [g[:2] for g in got[q]] == [e[:2] for e in expected[q]]
        assert [g[2] for g in got[q]] == pytest.approx([e[2] for e in expected[q]], abs=1e-6)


@pytest.mark.asyncio
async def test_async_index(make_store, hash_embedding) -> None:
    store = make_store(64)
    nodes = SentenceSplitter(chunk_size=32, chunk_overlap=0).get_nodes_from_documents(_docs())
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=hash_embedding,
        use_async=True,
    )
    assert len(await store.aget_nodes()) == len(nodes)
    hits = await index.as_retriever(similarity_top_k=2).aretrieve(QUESTIONS["tides"])
    assert hits[0].node.ref_doc_id == "tides"
    response = await index.as_query_engine(llm=MockLLM(), similarity_top_k=2).aquery(QUESTIONS["volcano"])
    assert response.source_nodes[0].node.ref_doc_id == "volcano"
    await index.adelete_ref_doc("tides")
    hits = await index.as_retriever(similarity_top_k=50).aretrieve(QUESTIONS["tides"])
    assert "tides" not in {h.node.ref_doc_id for h in hits}


def test_mock_embedding_index_builds(make_store) -> None:
    """The smallest index (as core's own tests build it): one document, a 1-d mock embedding."""
    store = make_store(1)
    index = VectorStoreIndex.from_documents(
        [Document(id_="1", text="1")],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=1),
    )
    (hit,) = index.as_retriever(similarity_top_k=5).retrieve("anything")
    assert hit.node.get_content() == "1" and hit.node.ref_doc_id == "1"
    assert hit.score == pytest.approx(1.0)


def test_load_index_from_storage_requires_the_store(tmp_path: Path, hash_embedding) -> None:
    """Without ``vector_store=`` LlamaIndex would look for a SimpleVectorStore JSON: we write none, so it
    fails loudly instead of loading an empty store."""
    index = _build(RagHierVectorStore(), hash_embedding)
    index.storage_context.persist(persist_dir=str(tmp_path))
    assert not (tmp_path / "default__vector_store.json").exists()
    with pytest.raises(KeyError):
        load_index_from_storage(StorageContext.from_defaults(persist_dir=str(tmp_path)), embed_model=hash_embedding)
