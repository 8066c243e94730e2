"""HierarchicalRetriever and RagHierEmbedding."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters
from llama_index.embeddings.rag_hier import RagHierEmbedding
from llama_index.retrievers.rag_hier import HierarchicalRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier.encoders import DenseEncoder

DOCS = {
    "tides": "The moon pulls the oceans and makes tides. Spring tides are the strongest tides.",
    "bees": "Honeybees live in colonies. Worker bees turn nectar into honey in wax cells.",
    "volcano": "Magma rises from the mantle and erupts from a volcano as lava and ash.",
}


def _nodes(embed_model: BaseEmbedding) -> list[TextNode]:
    nodes = []
    for doc_id, text in DOCS.items():
        for i, sentence in enumerate(s for s in text.split(". ") if s):
            nodes.append(
                TextNode(
                    text=sentence,
                    id_=f"{doc_id}-{i}",
                    metadata={"topic": doc_id, "i": i},
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
                )
            )
    for n, e in zip(nodes, embed_model.get_text_embedding_batch([n.get_content() for n in nodes]), strict=True):
        n.embedding = e
    return nodes


@pytest.fixture
def store(store_path: str, hash_embedding) -> RagHierVectorStore:
    s = RagHierVectorStore(store_path)
    s.add(_nodes(hash_embedding))
    return s


# -- HierarchicalRetriever ------------------------------------------------------------------------------
def test_retriever_is_a_base_retriever() -> None:
    assert BaseRetriever in HierarchicalRetriever.__mro__


def test_retrieve_with_embed_model_carries_parent_document(store: RagHierVectorStore, hash_embedding) -> None:
    retriever = HierarchicalRetriever(store, similarity_top_k=3, embed_model=hash_embedding)
    hits = retriever.retrieve("worker bees turn nectar into honey")
    assert len(hits) == 3
    assert hits[0].node.node_id == "bees-1" and hits[0].node.ref_doc_id == "bees"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # the same as the vector store's own retriever
    index = VectorStoreIndex.from_vector_store(store, embed_model=hash_embedding)
    ref = index.as_retriever(similarity_top_k=3).retrieve("worker bees turn nectar into honey")
    assert [(h.node.node_id, h.score) for h in hits] == [(h.node.node_id, h.score) for h in ref]


def test_retrieve_filters_doc_ids_and_query_bundle_embedding(store: RagHierVectorStore, hash_embedding) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="topic", operator=FilterOperator.NE, value="bees")])
    retriever = HierarchicalRetriever(store, similarity_top_k=10, filters=filters, embed_model=hash_embedding)
    assert {h.node.ref_doc_id for h in retriever.retrieve("honey bees")} == {"tides", "volcano"}
    only_tides = HierarchicalRetriever(store, similarity_top_k=10, doc_ids=["tides"])  # no embed model needed:
    bundle = QueryBundle("anything", embedding=hash_embedding.get_query_embedding("lava"))  # caller's embedding
    hits = only_tides.retrieve(bundle)
    assert {h.node.ref_doc_id for h in hits} == {"tides"} and len(hits) == 2


def test_retrieve_with_the_store_encoder(store_path: str, tiny_model_path: str) -> None:
    store = RagHierVectorStore(store_path, model=tiny_model_path)
    store.add(
        [
            TextNode(text=t, id_=d, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d)})
            for d, t in DOCS.items()
        ]
    )
    hits = HierarchicalRetriever(store, similarity_top_k=1).retrieve(DOCS["volcano"])
    assert hits[0].node.node_id == "volcano" and hits[0].node.ref_doc_id == "volcano"


def test_retrieve_without_any_embedder_says_what_to_pass(store: RagHierVectorStore) -> None:
    with pytest.raises(ValueError, match="encoder"):
        HierarchicalRetriever(store).retrieve("honey")


def test_retriever_argument_checks(store: RagHierVectorStore) -> None:
    with pytest.raises(TypeError, match="RagHierVectorStore"):
        HierarchicalRetriever(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="similarity_top_k"):
        HierarchicalRetriever(store, similarity_top_k=0)


def test_from_index(store_path: str, hash_embedding) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text=t, id_=d) for d, t in DOCS.items()],
        storage_context=StorageContext.from_defaults(vector_store=RagHierVectorStore(store_path)),
        embed_model=hash_embedding,
        transformations=[SentenceSplitter(chunk_size=16, chunk_overlap=0)],
    )
    retriever = HierarchicalRetriever.from_index(index, similarity_top_k=2)
    assert retriever.retrieve("lava and ash from the mantle")[0].node.ref_doc_id == "volcano"


@pytest.mark.asyncio
async def test_aretrieve_matches_retrieve(store: RagHierVectorStore, hash_embedding) -> None:
    retriever = HierarchicalRetriever(store, similarity_top_k=4, embed_model=hash_embedding)
    sync = retriever.retrieve("the moon and the tides")
    async_hits = await retriever.aretrieve("the moon and the tides")
    assert [(h.node.node_id, h.score) for h in async_hits] == [(h.node.node_id, h.score) for h in sync]


# -- RagHierEmbedding ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_embedding(tiny_model_path: str) -> RagHierEmbedding:
    return RagHierEmbedding(tiny_model_path, device="cpu", query_prompt="query: ", document_prompt="passage: ")


def test_embedding_is_a_base_embedding(tiny_embedding: RagHierEmbedding, tiny_model_path: str) -> None:
    assert BaseEmbedding in RagHierEmbedding.__mro__
    assert RagHierEmbedding.class_name() == "RagHierEmbedding"
    assert tiny_embedding.model_name == tiny_model_path
    assert tiny_embedding.dimension == 32
    assert tiny_embedding.to_dict()["query_prompt"] == "query: "


def test_query_and_text_sides_and_batches(tiny_embedding: RagHierEmbedding) -> None:
    q = np.array(tiny_embedding.get_query_embedding("honey bees"))
    t = np.array(tiny_embedding.get_text_embedding("honey bees"))
    assert q.shape == (32,) and not np.allclose(q, t)  # different prompts on the two sides
    assert np.linalg.norm(q) == pytest.approx(1.0, abs=1e-5)
    texts = [f"text number {i}" for i in range(70)]
    batch = np.array(tiny_embedding.get_text_embedding_batch(texts))
    singles = np.array([tiny_embedding.get_text_embedding(x) for x in texts[:3]])
    assert batch.shape == (70, 32)
    np.testing.assert_allclose(batch[:3], singles, atol=1e-5)
    enc = tiny_embedding.encoder
    np.testing.assert_allclose(q, enc.encode_queries(["honey bees"])[0], atol=1e-6)


@pytest.mark.asyncio
async def test_async_embeddings_match_sync(tiny_embedding: RagHierEmbedding) -> None:
    q = await tiny_embedding.aget_query_embedding("tides")
    t = await tiny_embedding.aget_text_embedding("tides")
    batch = await tiny_embedding.aget_text_embedding_batch(["tides", "bees"])
    np.testing.assert_allclose(q, tiny_embedding.get_query_embedding("tides"), atol=1e-6)
    np.testing.assert_allclose(t, tiny_embedding.get_text_embedding("tides"), atol=1e-6)
    np.testing.assert_allclose(batch[1], tiny_embedding.get_text_embedding("bees"), atol=1e-5)


def test_shared_encoder(tiny_model_path: str) -> None:
    enc = DenseEncoder(tiny_model_path, device="cpu", query_prompt="q: ")
    emb = RagHierEmbedding(encoder=enc)
    assert emb.encoder is enc and emb.model_name == tiny_model_path and emb.query_prompt == "q: "


@pytest.mark.real_model
def test_real_model_end_to_end(store_path: str) -> None:
    """The default offline all-MiniLM-L6-v2 behind a VectorStoreIndex and the HierarchicalRetriever."""
    embed_model = RagHierEmbedding()
    store = RagHierVectorStore(store_path)
    index = VectorStoreIndex.from_documents(
        [Document(text=t, id_=d) for d, t in DOCS.items()],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )
    assert embed_model.dimension == 384
    questions = {"tides": "Why does the sea rise and fall?", "bees": "Who makes honey?", "volcano": "What is lava?"}
    retriever = HierarchicalRetriever.from_index(index, similarity_top_k=1)
    for doc_id, question in questions.items():
        assert retriever.retrieve(question)[0].node.ref_doc_id == doc_id
