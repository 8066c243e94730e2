"""HierarchicalRetriever and RagHierEmbedding."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters
from llama_index.embeddings.rag_hier import RagHierEmbedding
from llama_index.retrievers.rag_hier import HierarchicalRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier import HierStore
from rag_hier.corpus import Document as CorpusDocument
from rag_hier.corpus import Section
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval import HierarchicalRetriever as EngineHierarchicalRetriever
from rag_hier.store.extensions.doc_index import DocumentIndex

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
    index = VectorStoreIndex.from_vector_store(store, embed_model=hash_embedding)
    ref = index.as_retriever(similarity_top_k=2).retrieve("worker bees turn nectar into honey")
    flat = HierarchicalRetriever(store, similarity_top_k=2, embed_model=hash_embedding, mode="flat")
    dhr = HierarchicalRetriever(store, similarity_top_k=2, embed_model=hash_embedding, auto_document_index=True)
    for retriever in (flat, dhr):
        hits = retriever.retrieve("worker bees turn nectar into honey")
        assert len(hits) == 2
        assert hits[0].node.node_id == "bees-1" and hits[0].node.ref_doc_id == "bees"
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # the same as the vector store's own retriever (DHR with k1 >= 3 documents and lambda 0 is flat search)
        assert [h.node.node_id for h in hits] == [h.node.node_id for h in ref]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in ref], atol=1e-6)
    assert [(h.node.node_id, h.score) for h in flat.retrieve("honey")] == [
        (h.node.node_id, h.score) for h in index.as_retriever(similarity_top_k=2).retrieve("honey")
    ]


@pytest.mark.parametrize("mode", ["flat", "serial", "parallel"])
def test_retrieve_filters_doc_ids_and_query_bundle_embedding(
    store: RagHierVectorStore, hash_embedding, mode: str
) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="topic", operator=FilterOperator.NE, value="bees")])
    retriever = HierarchicalRetriever(
        store, similarity_top_k=10, filters=filters, embed_model=hash_embedding, mode=mode, auto_document_index=True
    )
    assert {h.node.ref_doc_id for h in retriever.retrieve("honey bees")} == {"tides", "volcano"}
    only_tides = HierarchicalRetriever(store, similarity_top_k=10, doc_ids=["tides"], mode=mode, k1=1)
    bundle = QueryBundle("anything", embedding=hash_embedding.get_query_embedding("lava"))  # caller's embedding
    hits = only_tides.retrieve(bundle)  # no embed model needed; k1=1 is the best allowed document
    assert {h.node.ref_doc_id for h in hits} == {"tides"} and len(hits) == 2


def test_retrieve_with_the_store_encoder(store_path: str, tiny_model_path: str) -> None:
    store = RagHierVectorStore(store_path, model=tiny_model_path)
    store.add(
        [
            TextNode(text=t, id_=d, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d)})
            for d, t in DOCS.items()
        ]
    )
    for mode in ("flat", "serial"):
        retriever = HierarchicalRetriever(store, similarity_top_k=1, mode=mode, auto_document_index=True)
        hits = retriever.retrieve(DOCS["volcano"])
        assert hits[0].node.node_id == "volcano" and hits[0].node.ref_doc_id == "volcano"


@pytest.mark.parametrize("mode", ["flat", "serial"])
def test_retrieve_without_any_embedder_says_what_to_pass(store: RagHierVectorStore, mode: str) -> None:
    with pytest.raises(ValueError, match="encoder"):
        HierarchicalRetriever(store, mode=mode, auto_document_index=True).retrieve("honey")


def test_retriever_argument_checks(store: RagHierVectorStore) -> None:
    with pytest.raises(TypeError, match="RagHierVectorStore"):
        HierarchicalRetriever(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="similarity_top_k"):
        HierarchicalRetriever(store, similarity_top_k=0)
    for kwargs, name in (
        ({"k1": 0}, "k1"),
        ({"k1": 1.5}, "k1"),
        ({"lambda_": float("inf")}, "lambda_"),
        ({"mode": "tree"}, "mode"),
    ):
        with pytest.raises(ValueError, match=name):
            HierarchicalRetriever(store, **kwargs)


def test_from_index(store_path: str, hash_embedding) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text=t, id_=d) for d, t in DOCS.items()],
        storage_context=StorageContext.from_defaults(vector_store=RagHierVectorStore(store_path)),
        embed_model=hash_embedding,
        transformations=[SentenceSplitter(chunk_size=16, chunk_overlap=0)],
    )
    retriever = HierarchicalRetriever.from_index(index, similarity_top_k=2, k1=1, auto_document_index=True)
    hits = retriever.retrieve("lava and ash from the mantle")
    assert [h.node.ref_doc_id for h in hits] == ["volcano", "volcano"]  # k1=1: the nodes of the best document


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["flat", "serial", "parallel"])
async def test_aretrieve_matches_retrieve(store: RagHierVectorStore, hash_embedding, mode: str) -> None:
    retriever = HierarchicalRetriever(
        store, similarity_top_k=4, embed_model=hash_embedding, mode=mode, k1=2, lambda_=0.5, auto_document_index=True
    )
    sync = retriever.retrieve("the moon and the tides")
    async_hits = await retriever.aretrieve("the moon and the tides")
    assert [(h.node.node_id, h.score) for h in async_hits] == [(h.node.node_id, h.score) for h in sync]
    assert [h.node.metadata for h in async_hits] == [h.node.metadata for h in sync]


# -- HierarchicalRetriever: DHR -------------------------------------------------------------------------
DHR_DOCS = {
    "rivers": "Rivers carry sediment to the sea. Deltas form where rivers slow. Floods spread fertile silt.",
    "glaciers": "Glaciers are rivers of ice. They carve valleys in the rock. Moraines mark their old edges.",
    "volcano": "Magma rises through the crust. Volcanoes erupt lava and ash. Ash clouds block the sun.",
    "bees": "Honeybees live in colonies. Worker bees turn nectar into honey. Bees dance to show flowers.",
    "tides": "The moon pulls the oceans. Spring tides follow full moons. Neap tides are small.",
}
DHR_QUERIES = ["where do deltas form", "honey from nectar", "what do glaciers carve", "lava and ash", "the moon"]


def _dhr_nodes(embed_model: BaseEmbedding) -> list[TextNode]:
    nodes = [
        TextNode(
            text=sentence,
            id_=f"{doc_id}-{i}",
            metadata={"topic": doc_id, "i": i},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
        )
        for doc_id, text in DHR_DOCS.items()
        for i, sentence in enumerate(s for s in text.split(". ") if s)
    ]
    for n, e in zip(nodes, embed_model.get_text_embedding_batch([n.get_content() for n in nodes]), strict=True):
        n.embedding = e
    return nodes


@pytest.fixture
def dhr_store(store_path: str, hash_embedding) -> RagHierVectorStore:
    """5 documents (SOURCE) x 3 nodes, with a document index."""
    s = RagHierVectorStore(store_path)
    s.add(_dhr_nodes(hash_embedding))
    s.client.add_extension(DocumentIndex())
    return s


@pytest.mark.parametrize(
    ("mode", "k1", "lambda_"),
    [("serial", 1, 0.0), ("serial", 2, 0.5), ("serial", 3, -0.5), ("serial", 500, 1.0), ("parallel", 1, 0.5)],
)
def test_dhr_results_equal_the_engine_strategy(
    dhr_store: RagHierVectorStore, hash_embedding, mode: str, k1: int, lambda_: float
) -> None:
    retriever = HierarchicalRetriever(
        dhr_store, similarity_top_k=5, embed_model=hash_embedding, k1=k1, lambda_=lambda_, mode=mode
    )
    engine = EngineHierarchicalRetriever(dhr_store.client, k1=k1, lambda_=lambda_, mode=mode)
    for query in DHR_QUERIES:
        hits = retriever.retrieve(query)
        vector = np.asarray([hash_embedding.get_query_embedding(query)], dtype=np.float32)
        vector /= np.linalg.norm(vector, axis=1, keepdims=True)  # a "cosine" store normalizes queries
        want = engine.search_vectors(vector, top_k=5)[0]
        assert [h.node.node_id for h in hits] == [w.passage_id for w in want]
        assert [h.score for h in hits] == [w.score for w in want]
        assert [h.node.metadata["scores"] for h in hits] == [dict(w.scores) for w in want]
        assert [h.node.ref_doc_id for h in hits] == [w.doc_id for w in want]
        assert all(h.node.metadata["parent_document"]["id"] == h.node.ref_doc_id for h in hits)


def test_dhr_k1_restricts_the_nodes_to_the_best_documents(dhr_store: RagHierVectorStore, hash_embedding) -> None:
    ext = dhr_store.client.extension("doc-index")
    for query in DHR_QUERIES:
        vector = np.asarray([hash_embedding.get_query_embedding(query)], dtype=np.float32)
        _, top = ext.search(vector, 5)
        ranked = [ext.doc_id(f) for f in top[0].tolist()]
        for k1 in (1, 2):
            retriever = HierarchicalRetriever(dhr_store, similarity_top_k=50, embed_model=hash_embedding, k1=k1)
            hits = retriever.retrieve(query)
            assert {h.node.ref_doc_id for h in hits} == set(ranked[:k1]) and len(hits) == 3 * k1
    parallel = HierarchicalRetriever(dhr_store, similarity_top_k=50, embed_model=hash_embedding, k1=1, mode="parallel")
    assert len(parallel.retrieve("honey")) == 15  # every node competes in parallel mode


@pytest.mark.parametrize("lambda_", [0.0, 0.5, 2.0])
def test_dhr_scores_are_fused_and_kept_out_of_the_llm_text(
    dhr_store: RagHierVectorStore, hash_embedding, lambda_: float
) -> None:
    retriever = HierarchicalRetriever(dhr_store, similarity_top_k=6, embed_model=hash_embedding, k1=2, lambda_=lambda_)
    query = hash_embedding.get_query_embedding("worker bees turn nectar into honey")
    ext = dhr_store.client.extension("doc-index")
    hits = retriever.retrieve("worker bees turn nectar into honey")
    assert hits[0].node.node_id == "bees-1"
    for hit in hits:
        scores = hit.node.metadata["scores"]
        assert scores["fused"] == scores["passage"] + lambda_ * scores["document"] == hit.score
        (vector,) = dhr_store.client.get_embeddings([hit.node.node_id])
        assert scores["passage"] == pytest.approx(float(vector @ np.asarray(query)), abs=1e-5)
        doc_vector = ext._index.reconstruct(np.array([ext._ids[hit.node.ref_doc_id]]))[0]
        assert scores["document"] == pytest.approx(float(doc_vector @ np.asarray(query)), abs=1e-5)
        text = hit.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "scores" not in text and "parent_document" not in text and "topic: " in text
        assert "scores" not in hit.node.get_content(metadata_mode=MetadataMode.EMBED)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_dhr_parent_document_of_an_engine_built_store(store_path: str, tiny_model_path: str) -> None:
    corpus = [
        CorpusDocument(
            doc_id,
            title,
            (lead,),
            (Section(section, (text,)),),
            metadata={"topic": doc_id, "year": 2000 + len(doc_id)},
        )
        for doc_id, title, lead, section, text in [
            ("bees", "Honeybees", "Honeybees live in colonies.", "Honey", "Worker bees turn nectar into honey."),
            ("tides", "Tides", "The moon pulls the oceans.", "Spring tides", "Spring tides follow full moons."),
            ("volcano", "Volcanoes", "Magma rises through the crust.", "Eruptions", "Ash clouds block the sun."),
        ]
    ]
    hier = HierStore.create(store_path, model=tiny_model_path)
    hier.add_documents(corpus, max_passage_words=0)
    hier.add_extension(DocumentIndex())  # what `rag-hier index --hierarchical` does
    hier.close()
    store = RagHierVectorStore(store_path)
    hits = HierarchicalRetriever(store, similarity_top_k=6, k1=2).retrieve("Worker bees turn nectar into honey.")
    by_id = {d.doc_id: d for d in corpus}
    assert len({h.node.ref_doc_id for h in hits}) == 2 and len(hits) == 4
    for hit in hits:
        parent = hit.node.metadata["parent_document"]
        source = by_id[hit.node.ref_doc_id]
        assert parent["id"] == source.doc_id and parent["title"] == source.title
        assert parent["meta"] == dict(source.metadata)
        assert parent["title_path"][0] == source.title
    store.close()


def test_dhr_without_a_document_index_says_how_to_add_one(store: RagHierVectorStore, hash_embedding) -> None:
    retriever = HierarchicalRetriever(store, embed_model=hash_embedding)
    with pytest.raises(ValueError, match="no document index") as info:
        retriever.retrieve("honey")
    assert "auto_document_index=True" in str(info.value)
    assert "add_extension(rag_hier.store.extensions.doc_index.DocumentIndex())" in str(info.value)
    assert "--hierarchical" in str(info.value)
    assert store.client.extension("doc-index") is None  # nothing was written
    assert len(HierarchicalRetriever(store, embed_model=hash_embedding, mode="flat").retrieve("honey")) == 5


@pytest.mark.asyncio
async def test_dhr_aretrieve_without_a_document_index_raises(store: RagHierVectorStore, hash_embedding) -> None:
    with pytest.raises(ValueError, match="auto_document_index"):
        await HierarchicalRetriever(store, embed_model=hash_embedding).aretrieve("honey")


def test_dhr_on_a_store_without_dense_vectors_says_so(store_path: str) -> None:
    store = RagHierVectorStore(store_path, dense=False, token_index=True)
    with pytest.raises(ValueError, match="dense=False"):
        HierarchicalRetriever(store, auto_document_index=True).retrieve(QueryBundle("honey", embedding=[1.0, 0.0]))
    store.close()


def test_dhr_auto_document_index_follows_writes(store: RagHierVectorStore, hash_embedding) -> None:
    retriever = HierarchicalRetriever(
        store, similarity_top_k=10, embed_model=hash_embedding, k1=1, auto_document_index=True
    )
    assert {h.node.ref_doc_id for h in retriever.retrieve("worker bees and honey")} == {"bees"}
    ext = store.client.extension("doc-index")
    assert isinstance(ext, DocumentIndex) and sorted(ext.doc_ids()) == ["bees", "tides", "volcano"]
    comet = TextNode(
        text="Comets have icy nuclei and long tails",
        id_="comets-0",
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="comets")},
        embedding=hash_embedding.get_text_embedding("Comets have icy nuclei and long tails"),
    )
    store.add([comet])
    assert [h.node.node_id for h in retriever.retrieve("icy comets with tails")] == ["comets-0"]
    store.delete("bees")
    assert sorted(ext.doc_ids()) == ["comets", "tides", "volcano"]
    assert "bees" not in {h.node.ref_doc_id for h in retriever.retrieve("worker bees and honey")}


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
    retriever = HierarchicalRetriever.from_index(index, similarity_top_k=1, auto_document_index=True)
    for doc_id, question in questions.items():
        assert retriever.retrieve(question)[0].node.ref_doc_id == doc_id


def test_warm_up_loads_on_construction_what_the_first_query_would(store_path: str, tiny_model_path: str) -> None:
    first = RagHierVectorStore(store_path, model=tiny_model_path)
    first.add(
        [
            TextNode(text=t, id_=d, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d)})
            for d, t in DOCS.items()
        ]
    )
    store = RagHierVectorStore(store_path)  # opened again: nothing loaded yet
    assert not store.reader.encoder.is_loaded
    lazy = HierarchicalRetriever(store, similarity_top_k=1, auto_document_index=True)
    assert not store.reader.encoder.is_loaded and store.reader.extension("doc-index") is None
    ready = HierarchicalRetriever(store, similarity_top_k=1, auto_document_index=True, warm_up=True)
    assert store.reader.encoder.is_loaded  # the store's model embeds the query: loaded
    assert store.reader.extension("doc-index") is not None  # and the document index it searches: built
    assert ready.retrieve(DOCS["volcano"])[0].node.node_id == "volcano"
    assert lazy.retrieve(DOCS["volcano"])[0].node.node_id == "volcano"


def test_warm_up_with_an_embed_model_loads_that_model_only(store_path: str, tiny_model_path: str) -> None:
    RagHierVectorStore(store_path, model=tiny_model_path).add([TextNode(text="lava flows", id_="a")])
    store = RagHierVectorStore(store_path)
    embedding = RagHierEmbedding(tiny_model_path, device="cpu")
    assert not embedding.encoder.is_loaded
    HierarchicalRetriever(store, mode="flat", embed_model=embedding, warm_up=True)
    assert embedding.encoder.is_loaded and not store.reader.encoder.is_loaded
    assert RagHierEmbedding(tiny_model_path, device="cpu", warm_up=True).encoder.is_loaded
