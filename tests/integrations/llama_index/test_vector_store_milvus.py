"""RagHierVectorStore on Milvus (``uri=``): configuration, no token in what is saved, persist and reload, strategies.

The conformance tests of ``test_vector_store.py`` run on Milvus Lite too (``make_store`` in ``conftest.py``); this
file checks what only a Milvus store has. Skips without ``pymilvus`` and ``milvus-lite``.
"""

from __future__ import annotations

import json

import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from llama_index.vector_stores.rag_hier import RagHierVectorStore

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier import HierStore
from rag_hier.errors import StoreError
from rag_hier.store.milvus import MilvusStore

TEXTS = {
    "tides": "The moon pulls the oceans. Spring tides happen when the sun and the moon line up.",
    "bees": "Worker bees collect nectar from flowers. Bees turn nectar into honey in wax cells.",
    "volcano": "Magma rises from the mantle and erupts as lava. Volcanic ash travels around the world.",
}


def test_bad_milvus_options_are_refused(tmp_path) -> None:
    uri = f"{tmp_path / 'm.db'}#bad"
    with pytest.raises(ValueError, match="not both"):
        RagHierVectorStore(tmp_path / "dir", uri=uri, dimension=2)
    with pytest.raises(ValueError, match="dimension="):
        RagHierVectorStore(uri=uri)  # a new collection without a model: Milvus needs the dimension up front
    with pytest.raises(ValueError, match="password"):
        RagHierVectorStore(uri=uri, dimension=2, client_options={"password": "x"})
    with pytest.raises(ValueError, match="timeout"):
        RagHierVectorStore(uri=uri, dimension=2, timeout=-1)
    with pytest.raises(ValueError, match="dimension"):
        RagHierVectorStore(uri=uri, dimension=0)
    assert not MilvusStore.exists(uri)


def test_token_is_never_saved_and_persist_reopens_the_collection(tmp_path, monkeypatch, hash_embedding) -> None:
    monkeypatch.setenv("RAG_HIER_MILVUS_TOKEN", "root:Milvus-secret")
    uri = f"{tmp_path / 'm.db'}#papers"
    store = RagHierVectorStore(uri=uri, dimension=hash_embedding.dim, db_name="", timeout=20.0)
    assert store._milvus is not None and store._milvus["token"] == "root:Milvus-secret"  # read from the variable
    docs = [Document(text=t, id_=k, metadata={"topic": k}) for k, t in TEXTS.items()]
    index = VectorStoreIndex.from_documents(
        docs,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=hash_embedding,
        transformations=[SentenceSplitter(chunk_size=32, chunk_overlap=0)],
    )
    config = store.to_dict()
    assert config["uri"] == uri and config["path"] is None and config["timeout"] == 20.0
    assert "Milvus-secret" not in json.dumps(config)
    persist_dir = tmp_path / "storage"
    index.storage_context.persist(persist_dir=str(persist_dir))
    pointer = persist_dir / "default__vector_store.json"
    assert "Milvus-secret" not in pointer.read_text()
    assert json.loads(pointer.read_text())["rag_hier_milvus"]["uri"] == uri
    assert not (persist_dir / "default__vector_store").exists()  # nothing copied: the data is in Milvus
    question = "how do bees turn nectar into honey"
    before = [n.node.node_id for n in index.as_retriever(similarity_top_k=2).retrieve(question)]
    store.close()

    reopened = RagHierVectorStore.from_persist_dir(persist_dir)
    assert isinstance(reopened.client, MilvusStore) and reopened.location == uri
    loaded = load_index_from_storage(
        StorageContext.from_defaults(persist_dir=str(persist_dir), vector_store=reopened), embed_model=hash_embedding
    )
    after = [n.node.node_id for n in loaded.as_retriever(similarity_top_k=2).retrieve(question)]
    assert after == before
    assert reopened.get_nodes(node_ids=[before[0]])[0].ref_doc_id == "bees"
    again = RagHierVectorStore.from_dict(reopened.to_dict())
    assert len(again.get_nodes()) == len(reopened.get_nodes())
    with pytest.raises(StoreError, match="Milvus collection"):
        again.store_path  # noqa: B018 - a Milvus store has no directory
    (tmp_path / "foreign.json").write_text("{}")
    with pytest.raises(StoreError, match="not a rag-hier Milvus store pointer"):
        reopened.persist(str(tmp_path / "foreign.json"))
    reopened.close()
    again.close()


def test_wraps_an_open_milvus_store_and_searches_the_token_index(tmp_path) -> None:
    uri = f"{tmp_path / 'm.db'}#tokens"
    engine = HierStore.create(uri=uri, model=None, dimension=3)
    vs = RagHierVectorStore(store=engine, token_index=True, sparse_mode="lexical")
    assert vs.location == uri and vs.uri == uri and vs.token_index
    nodes = [
        TextNode(text="the moon pulls the tides", id_="a", embedding=[1.0, 0.0, 0.0]),
        TextNode(text="bees make honey from nectar", id_="b", embedding=[0.0, 1.0, 0.0]),
        TextNode(text="lava and ash from a volcano", id_="c", embedding=[0.0, 0.0, 1.0]),
    ]
    vs.add(nodes)
    sparse = vs.query(VectorStoreQuery(query_str="honey bees", mode=VectorStoreQueryMode.SPARSE, similarity_top_k=2))
    assert sparse.ids[0] == "b"
    hybrid = vs.query(
        VectorStoreQuery(
            query_str="volcano lava", query_embedding=[0.0, 0.1, 1.0], mode=VectorStoreQueryMode.HYBRID, alpha=0.5
        )
    )
    assert hybrid.ids[0] == "c"
    assert engine.extension("token-index") is not None
    vs.close()
    engine.drop()
    engine.close()
