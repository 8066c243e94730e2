"""RagHierDocumentStore on Milvus (``uri=``): configuration, serialization without secrets, creation, strategies.

Haystack's shared store suites run on Milvus Lite too (``store_location`` in ``conftest.py``); this file checks
what only a Milvus store has. Skips without ``pymilvus`` and ``milvus-lite``.
"""

from __future__ import annotations

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError
from haystack.utils import Secret
from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier.store.milvus import MilvusStore

STORE_TYPE = "haystack_integrations.document_stores.rag_hier.document_store.RagHierDocumentStore"


def _docs(n: int = 30, dim: int = 6) -> list[Document]:
    rng = np.random.default_rng(3)
    return [
        Document(
            id=f"p{i}",
            content=f"passage {i} of document {i // 3}",
            meta={"source_id": f"d{i // 3}", "split_id": i % 3, "group": i % 4},
            embedding=rng.standard_normal(dim).tolist(),
        )
        for i in range(n)
    ]


def test_uri_or_path_and_no_secret_in_clear(tmp_path, monkeypatch):
    uri = f"{tmp_path / 'm.db'}#conf"
    with pytest.raises(ValueError, match="either path"):
        RagHierDocumentStore()
    with pytest.raises(ValueError, match="not both"):
        RagHierDocumentStore(path=str(tmp_path / "s"), uri=uri)
    with pytest.raises(ValueError, match="Secret"):
        RagHierDocumentStore(uri=uri, token="user:password")
    with pytest.raises(ValueError, match="password"):
        RagHierDocumentStore(uri=uri, client_options={"password": "x"})
    with pytest.raises(ValueError, match="timeout"):
        RagHierDocumentStore(uri=uri, timeout=0)

    store = RagHierDocumentStore(
        uri="http://milvus.internal:19530#papers",
        token=Secret.from_env_var("MY_MILVUS_TOKEN"),
        db_name="research",
        timeout=12.5,
        client_options={"secure": True, "server_pem_path": "ca.pem", "server_name": "milvus.internal"},
        dimension=384,
        index="hnsw",
    )
    data = store.to_dict()
    assert data == {
        "type": STORE_TYPE,
        "init_parameters": {
            "uri": "http://milvus.internal:19530#papers",
            "token": {"type": "env_var", "env_vars": ["MY_MILVUS_TOKEN"], "strict": True},
            "db_name": "research",
            "timeout": 12.5,
            "client_options": {"secure": True, "server_pem_path": "ca.pem", "server_name": "milvus.internal"},
            "index": "hnsw",
            "model": None,
            "device": None,
            "strict_datetime_comparison": False,
            "dimension": 384,
        },
    }
    again = RagHierDocumentStore.from_dict(data)
    assert again.to_dict() == data
    assert isinstance(again.token, Secret)
    monkeypatch.setenv("MY_MILVUS_TOKEN", "user:password")
    assert again._milvus_options()["token"] == "user:password"  # resolved when connecting, never stored
    # the default token is the CLI's environment variable, optional
    default = RagHierDocumentStore(uri=uri).to_dict()["init_parameters"]
    assert default["token"] == {"type": "env_var", "env_vars": ["RAG_HIER_MILVUS_TOKEN"], "strict": False}
    # a token given in clear refuses to serialize (Haystack's rule), so it never lands in a pipeline file
    clear = RagHierDocumentStore(uri=uri, token=Secret.from_token("user:password"))
    with pytest.raises(ValueError, match="token"):
        clear.to_dict()


def test_a_new_collection_needs_its_dimension_up_front(tmp_path):
    store = RagHierDocumentStore(uri=f"{tmp_path / 'm.db'}#fresh")
    with pytest.raises(DocumentStoreError, match="dimension="):
        store.count_documents()
    with pytest.raises(DocumentStoreError, match="dimension="):
        store.write_documents([Document(content="no embedding yet")])
    docs = _docs(4, dim=5)
    assert store.write_documents(docs) == 4  # the first embeddings written fix it
    assert store.hier_store.dimension == 5
    assert isinstance(store.hier_store, MilvusStore)
    assert store.filter_documents() == docs
    # Milvus fixes a collection's dimension: recreate_index empties it and keeps the dimension
    store.delete_all_documents(recreate_index=True)
    assert store.count_documents() == 0
    with pytest.raises(DocumentStoreError, match="5"):
        store.write_documents([Document(content="x", embedding=[0.1, 0.2])])
    store.write_documents([Document(content="no embedding")])
    assert store.count_documents() == 1
    store.close()
    sized = RagHierDocumentStore(uri=f"{tmp_path / 'm.db'}#sized", dimension=3)
    assert sized.count_documents() == 0
    assert sized.hier_store.dimension == 3
    sized.close()


def test_strategies_on_milvus_match_the_local_store(tmp_path, store_path):
    docs = _docs()
    local = RagHierDocumentStore(path=store_path)
    remote = RagHierDocumentStore(uri=f"{tmp_path / 'm.db'}#strategies")
    for store in (local, remote):
        store.write_documents(docs)
    query = np.random.default_rng(9).standard_normal(6).tolist()
    filters = {"field": "meta.group", "operator": "in", "value": [1, 2]}
    for kwargs in ({}, {"filters": filters}):
        a = remote.embedding_retrieval(query, top_k=5, **kwargs)
        b = local.embedding_retrieval(query, top_k=5, **kwargs)
        assert [(d.id, d.content, d.meta) for d in a] == [(d.id, d.content, d.meta) for d in b]
        assert [d.score for d in a] == pytest.approx([d.score for d in b], rel=1e-5)
        a = remote.hierarchical_retrieval(query_embedding=query, top_k=4, k1=3, auto_document_index=True, **kwargs)
        b = local.hierarchical_retrieval(query_embedding=query, top_k=4, k1=3, auto_document_index=True, **kwargs)
        assert [(d.id, d.meta["parent_document"]["id"]) for d in a] == [
            (d.id, d.meta["parent_document"]["id"]) for d in b
        ]
        assert [d.score for d in a] == pytest.approx([d.score for d in b], rel=1e-5)
    assert remote.hier_store.extension("doc-index") is not None
    assert remote.delete_by_filter({"field": "meta.group", "operator": "==", "value": 0}) == 8
    assert remote.update_by_filter({"field": "meta.group", "operator": "==", "value": 1}, {"seen": True}) == 8
    assert remote.count_documents_by_filter({"field": "meta.seen", "operator": "==", "value": True}) == 8
    assert remote.count_documents() == 22
    local.close()
    remote.close()


def test_pipeline_with_a_milvus_store_round_trips_through_yaml(tmp_path):
    uri = f"{tmp_path / 'm.db'}#pipeline"
    store = RagHierDocumentStore(uri=uri, token=Secret.from_env_var("RAG_HIER_TEST_MILVUS_TOKEN", strict=False))
    docs = _docs(9)
    store.write_documents(docs)
    pipeline = Pipeline()
    pipeline.add_component("retriever", RagHierEmbeddingRetriever(document_store=store, top_k=3))
    text = pipeline.dumps()
    assert f"uri: {uri}" in text
    assert "RAG_HIER_TEST_MILVUS_TOKEN" in text
    loaded = Pipeline.loads(text)
    assert loaded.to_dict() == pipeline.to_dict()
    loaded_store = loaded.get_component("retriever").document_store
    assert loaded_store.uri == uri and loaded_store.token == store.token
    query = docs[4].embedding
    got = loaded.run({"retriever": {"query_embedding": query}})["retriever"]["documents"]
    assert [d.id for d in got] == [d.id for d in store.embedding_retrieval(query, top_k=3)]
    assert got[0].id == "p4"
    store.close()
    loaded_store.close()


def test_token_index_and_sparse_embeddings_on_milvus_match_the_local_store(tmp_path, store_path, tiny_model_path):
    texts = [
        "the moon pulls the oceans and makes tides",
        "worker bees turn nectar into honey",
        "magma rises and the volcano erupts lava",
        "spring tides follow the full moon",
    ]
    docs = [
        Document(
            id=f"t{i}",
            content=t,
            meta={"group": "even" if i % 2 == 0 else "odd"},
            sparse_embedding=SparseEmbedding(indices=[i, 7], values=[1.0 + i, 0.5]),
        )
        for i, t in enumerate(texts)
    ]
    options = {"model": tiny_model_path, "token_index": True, "dense": False, "device": "cpu"}
    with pytest.raises(DocumentStoreError, match="dense=False"):
        RagHierDocumentStore(uri=f"{tmp_path / 'm.db'}#nodim", **options).write_documents(docs)
    remote = RagHierDocumentStore(uri=f"{tmp_path / 'm.db'}#tokens", dimension=8, **options)
    local = RagHierDocumentStore(path=store_path, **options)
    for store in (local, remote):
        assert store.write_documents(docs) == 4
    assert remote.filter_documents() == docs
    even = {"field": "meta.group", "operator": "==", "value": "even"}
    for mode in ("lexical", "beta", "beta-rerank", "full", "alpha"):  # E(d) for the last three: computed on the fly
        for filters in (None, even):
            a = remote.svdr_retrieval("moon tides", mode=mode, top_k=3, filters=filters)
            b = local.svdr_retrieval("moon tides", mode=mode, top_k=3, filters=filters)
            assert [d.id for d in a] == [d.id for d in b] and a, (mode, filters)
            assert [d.score for d in a] == pytest.approx([d.score for d in b], rel=1e-5)
    query = SparseEmbedding(indices=[2, 7], values=[1.0, 1.0])
    a = remote.sparse_embedding_retrieval(query, top_k=3)
    assert [(d.id, d.score) for d in a] == [(d.id, d.score) for d in local.sparse_embedding_retrieval(query, top_k=3)]
    assert a[0].id == "t2"
    local.close()
    remote.close()
