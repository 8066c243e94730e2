"""RagHierVectorStore's SPARSE and HYBRID query modes over SVDR's token index, and token-index-only stores."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier import HierStore, Passage
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.retrieval.fusion import FUSIONS
from rag_hier.retrieval.svdr import SvdrRetriever
from rag_hier.store.extensions.token_index import TokenIndexExtension

TEXTS = [
    "The moon pulls the oceans into two bulges.",
    "Honeybees store nectar as honey in wax cells.",
    "Magma rises through cracks in the crust.",
    "Microbes turn kitchen scraps into humus.",
    "Movable type made books cheaper to produce.",
    "Glaciers carve U-shaped valleys; moraines mark their edges.",
    "Rivers carry sediment to the sea, and deltas form where rivers slow down.",
    "Bees pollinate the blossom of apple trees in spring.",
]
QUERIES = ["honey bees and blossom", "what carves valleys?", "the moon and the tides", "printing books"]
SPARSE = VectorStoreQueryMode.SPARSE
HYBRID = VectorStoreQueryMode.HYBRID


def relative_score_fusion(
    dense: list[tuple[str, float]], sparse: list[tuple[str, float]], alpha: float, top_k: int
) -> list[tuple[str, float]]:
    """The reference: ``alpha * dense' + (1 - alpha) * sparse'`` with each list min-max scaled to [0, 1] (all
    1.0 when its scores are equal), an id missing from a list counting 0 there; best first."""

    def scaled(results: list[tuple[str, float]]) -> dict[str, float]:
        if not results:
            return {}
        scores = [s for _, s in results]
        lo, hi = min(scores), max(scores)
        return {i: 1.0 if hi == lo else (s - lo) / (hi - lo) for i, s in results}

    d, s = scaled(dense), scaled(sparse)
    ids = list(dict.fromkeys([i for i, _ in dense] + [i for i, _ in sparse]))
    fused = [(i, alpha * d.get(i, 0.0) + (1.0 - alpha) * s.get(i, 0.0)) for i in ids]
    fused.sort(key=lambda item: -item[1])  # stable: ties keep the order above
    return fused[:top_k]


class NoQueryEmbedding(BaseEmbedding):
    """Embeds documents (like MockEmbedding) but fails if anyone embeds a query."""

    @classmethod
    def class_name(cls) -> str:
        return "NoQueryEmbedding"

    def _get_text_embedding(self, text: str) -> list[float]:
        return [1.0, 0.0]

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the query was embedded")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the query was embedded")


def _nodes(embedding=None) -> list[TextNode]:
    return [
        TextNode(
            id_=f"n{i}",
            text=t,
            metadata={"n": i, "group": "even" if i % 2 == 0 else "odd"},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i // 2}")},
            embedding=None if embedding is None else embedding(t),
        )
        for i, t in enumerate(TEXTS)
    ]


@pytest.fixture(scope="module")
def vocab_encoder(tiny_model_path: str) -> VocabEncoder:
    encoder = VocabEncoder(tiny_model_path, device="cpu", batch_size=4)
    encoder.module  # noqa: B018 - load now
    return encoder


@pytest.fixture
def engine_store(tmp_path, tiny_model_path):
    """The same passages written by the engine directly: the reference for every mode."""
    store = HierStore.create(tmp_path / "engine", model=None)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.add_passages([Passage(n.node_id, n.ref_doc_id, 0, n.text, meta=dict(n.metadata)) for n in _nodes()])
    yield store
    store.close()


def _token_store(path: str, model: str, **kwargs) -> RagHierVectorStore:
    store = RagHierVectorStore(path, model=model, token_index=True, dense=False, **kwargs)
    store.add(_nodes())
    return store


@pytest.mark.parametrize(
    ("mode", "rerank_m"), [("lexical", 100), ("beta", 100), ("beta-rerank", 3), ("full", 100), ("alpha", 100)]
)
def test_sparse_mode_equals_the_engine(store_path, tiny_model_path, engine_store, vocab_encoder, mode, rerank_m):
    store = _token_store(store_path, tiny_model_path, sparse_mode=mode, rerank_m=rerank_m)
    reference = SvdrRetriever(engine_store, mode, encoder=vocab_encoder, rerank_m=rerank_m)
    even = MetadataFilters(filters=[MetadataFilter(key="group", value="even")])
    for query in QUERIES:
        for filters, engine_filters in (
            (None, None),
            (even, {"field": "meta.group", "operator": "==", "value": "even"}),
        ):
            result = store.query(VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=5, filters=filters))
            hits = reference.search(query, top_k=5, filters=engine_filters)
            assert result.ids == [h.passage_id for h in hits], (mode, query)
            np.testing.assert_allclose(result.similarities, [h.score for h in hits], rtol=1e-5)
            assert [n.node_id for n in result.nodes] == result.ids
    assert all(n.metadata["group"] == "even" for n in result.nodes)
    assert result.nodes[0].ref_doc_id == f"doc{int(result.ids[0][1:]) // 2}"  # nodes come back whole
    store.close()


def test_token_only_index_retrieves_without_embedding_queries(store_path, tiny_model_path):
    store = RagHierVectorStore(store_path, model=tiny_model_path, token_index=True, dense=False, sparse_mode="lexical")
    assert store.is_embedding_query is False
    nodes = _nodes()
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=NoQueryEmbedding()
    )
    assert store.client.dimension is None  # the embeddings VectorStoreIndex computed were not stored
    expected = store.query(VectorStoreQuery(query_str=QUERIES[0], mode=SPARSE, similarity_top_k=3)).ids
    for kwargs in ({}, {"vector_store_query_mode": "sparse"}):  # DEFAULT is the sparse search on this store
        got = index.as_retriever(similarity_top_k=3, **kwargs).retrieve(QUERIES[0])
        assert [n.node.node_id for n in got] == expected
    got = index.as_retriever(vector_store_query_mode="sparse", similarity_top_k=1, sparse_top_k=4).retrieve(QUERIES[0])
    assert len(got) == 4  # SPARSE returns sparse_top_k when given
    got = asyncio.run(index.as_retriever(similarity_top_k=3).aretrieve(QUERIES[0]))
    assert [n.node.node_id for n in got] == expected
    store.close()


def test_sparse_restrictions_doc_ids_node_ids_and_filters(store_path, tiny_model_path):
    store = _token_store(store_path, tiny_model_path, sparse_mode="lexical")

    def ids(**kwargs) -> list[str]:
        return store.query(
            VectorStoreQuery(query_str="bees honey rivers moon", mode=SPARSE, similarity_top_k=8, **kwargs)
        ).ids

    assert ids(node_ids=[]) == ids()  # an empty list is no restriction (as_retriever sends node_ids=[])
    assert set(ids(node_ids=["n1", "n7"])) == {"n1", "n7"}
    assert set(ids(doc_ids=["doc0", "doc3"])) == {"n0", "n1", "n6", "n7"}
    odd = MetadataFilters(filters=[MetadataFilter(key="group", value="odd")])
    assert set(ids(doc_ids=["doc0", "doc3"], filters=odd)) == {"n1", "n7"}
    late = MetadataFilters(filters=[MetadataFilter(key="n", value=5, operator=FilterOperator.GTE)])
    assert set(ids(filters=late)) == {"n5", "n6", "n7"}
    assert ids(node_ids=["nope"]) == []
    store.delete("doc0")  # the token index follows deletes
    assert "n0" not in ids() and "n1" not in ids()
    store.close()


def test_hybrid_fuses_dense_and_sparse_by_relative_score(store_path, tiny_model_path, hash_embedding):
    store = RagHierVectorStore(store_path, token_index={"model": tiny_model_path}, sparse_mode="lexical")
    store.add(_nodes(hash_embedding.get_text_embedding))
    index = VectorStoreIndex.from_vector_store(store, embed_model=hash_embedding)
    for query in QUERIES:
        bundle = QueryBundle(query, embedding=hash_embedding.get_query_embedding(query))
        dense = store.query(VectorStoreQuery(query_embedding=bundle.embedding, similarity_top_k=4))
        sparse = store.query(VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=5))
        for alpha in (0.0, 0.3, 0.5, 1.0):
            retriever = index.as_retriever(
                vector_store_query_mode="hybrid", similarity_top_k=4, sparse_top_k=5, hybrid_top_k=3, alpha=alpha
            )
            got = retriever.retrieve(bundle)
            expected = relative_score_fusion(
                list(zip(dense.ids, dense.similarities, strict=True)),
                list(zip(sparse.ids, sparse.similarities, strict=True)),
                alpha,
                3,
            )
            assert [(n.node.node_id, pytest.approx(n.score)) for n in got] == [
                (i, pytest.approx(s)) for i, s in expected
            ]
        only_dense = store.query(
            VectorStoreQuery(
                query_embedding=bundle.embedding, query_str=query, mode=HYBRID, similarity_top_k=4, alpha=1.0
            )
        )
        assert only_dense.ids[:4] == dense.ids  # alpha=1: the dense order (sparse-only nodes after, at 0)
    with pytest.raises(ValueError, match="alpha"):
        store.query(VectorStoreQuery(query_embedding=bundle.embedding, query_str="x", mode=HYBRID, alpha=1.5))
    store.close()


def test_relative_score_fusion_by_hand():
    """The engine's relative-score fusion, which HYBRID queries run with weights (alpha, 1 - alpha)."""
    fuse = FUSIONS["relative_score"]

    def fused(dense, sparse, alpha):
        lists = [
            (np.array([i for i, _ in x], np.int64), np.array([s for _, s in x], np.float64)) for x in (dense, sparse)
        ]
        ids, scores = fuse(lists, [alpha, 1.0 - alpha], 60)
        return sorted(zip(ids.tolist(), scores.tolist(), strict=True), key=lambda t: (-t[1], t[0]))

    a, b, c, d = 0, 1, 2, 3
    # dense scaled: a 1, b 0.5, c 0; sparse scaled: c 1, d 0
    got = fused([(a, 0.9), (b, 0.5), (c, 0.1)], [(c, 12.0), (d, 4.0)], alpha=0.25)
    assert got == [(c, 0.75), (a, 0.25), (b, 0.125), (d, 0.0)]
    assert fused([(a, 2.0)], [], alpha=0.5) == [(a, 0.5)]  # one score scales to 1
    assert fused([], [], alpha=0.5) == []


def test_clear_errors(store_path, tiny_model_path, tmp_path, hash_embedding):
    plain = RagHierVectorStore(store_path)
    plain.add(_nodes(hash_embedding.get_text_embedding))
    with pytest.raises(ValueError, match="token index"):
        plain.query(VectorStoreQuery(query_str="bees", mode=SPARSE))
    with pytest.raises(ValueError, match="token index"):
        plain.query(VectorStoreQuery(query_str="bees", query_embedding=[1.0] * 64, mode=HYBRID))
    with pytest.raises(ValueError, match="'default', 'sparse' and 'hybrid'"):
        plain.query(VectorStoreQuery(query_embedding=[1.0] * 64, mode=VectorStoreQueryMode.MMR))
    plain.close()
    with pytest.raises(ValueError, match="token_index=True"):
        RagHierVectorStore(str(tmp_path / "nothing"), dense=False)
    with pytest.raises(ValueError):
        RagHierVectorStore(str(tmp_path / "bad-mode"), token_index=True, sparse_mode="gamma")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RagHierVectorStore(str(tmp_path / "bad-option"), token_index={"tokenizer": "x"})
    tokens = _token_store(str(tmp_path / "tokens"), tiny_model_path, sparse_mode="lexical")
    with pytest.raises(ValueError, match="query_str"):
        tokens.query(VectorStoreQuery(mode=SPARSE))
    with pytest.raises(ValueError, match="dense=False"):
        tokens.query(VectorStoreQuery(query_str="bees", query_embedding=[1.0, 0.0], mode=HYBRID))
    tokens.close()


def test_nodes_without_embeddings_on_a_dense_store_with_a_token_index(store_path, tiny_model_path, hash_embedding):
    store = RagHierVectorStore(store_path, token_index={"model": tiny_model_path}, sparse_mode="lexical")
    nodes = _nodes()
    nodes[0].embedding = hash_embedding.get_text_embedding(nodes[0].text)
    store.add(nodes)  # only n0 has a vector; the others are found through the token index
    dense = store.query(VectorStoreQuery(query_embedding=nodes[0].embedding, similarity_top_k=5))
    assert dense.ids == ["n0"]
    sparse = store.query(VectorStoreQuery(query_str="honey bees", mode=SPARSE, similarity_top_k=2))
    assert sparse.ids[0] in {"n1", "n7"}
    store.close()


def test_persist_and_reload_keep_the_token_index_and_dense_choice(tmp_path, tiny_model_path):
    store = RagHierVectorStore(
        str(tmp_path / "live"), model=tiny_model_path, token_index=True, dense=False, sparse_mode="lexical"
    )
    index = VectorStoreIndex(
        _nodes(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=2),
    )
    before = index.as_retriever(similarity_top_k=3).retrieve(QUERIES[1])
    persist_dir = tmp_path / "persisted"
    index.storage_context.persist(persist_dir=str(persist_dir))
    store.close()
    reopened = RagHierVectorStore.from_persist_dir(str(persist_dir), sparse_mode="lexical")
    assert reopened.dense is False and reopened.is_embedding_query is False and reopened.token_index is True
    loaded = load_index_from_storage(
        StorageContext.from_defaults(persist_dir=str(persist_dir), vector_store=reopened),
        embed_model=MockEmbedding(embed_dim=2),
    )
    after = loaded.as_retriever(similarity_top_k=3).retrieve(QUERIES[1])
    assert [(n.node.node_id, n.score) for n in after] == [(n.node.node_id, n.score) for n in before]
    again = RagHierVectorStore.from_dict(reopened.to_dict())
    assert again.sparse_mode == "lexical" and again.dense is False
    assert again.query(VectorStoreQuery(query_str=QUERIES[1], similarity_top_k=3)).ids == [
        n.node.node_id for n in before
    ]
    reopened.close()


def test_async_query_matches_sync(store_path, tiny_model_path):
    store = _token_store(store_path, tiny_model_path, sparse_mode="beta")
    for query in QUERIES:
        q = VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=3)
        assert asyncio.run(store.aquery(q)).ids == store.query(q).ids
    store.close()
