"""RagHierVectorStore's SPARSE and HYBRID query modes with ``sparse_mode="bm25"`` over the store's BM25 index
(``bm25=True``), BM25-only stores (``dense=False``), persistence, and the errors that say how to get an index."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.retrievers.rag_hier import RagHierRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier.retrieval import build_retriever
from rag_hier.retrieval.base import Queries

TEXTS = [
    "The moon pulls the oceans into two bulges, and the tides follow the moon.",
    "Honeybees store nectar as honey in wax cells.",
    "Magma rises through cracks in the crust.",
    "Microbes turn kitchen scraps into humus.",
    "Movable type made books cheaper to produce.",
    "Glaciers carve U-shaped valleys; moraines mark their edges.",
    "Rivers carry sediment to the sea, and deltas form where rivers slow down.",
    "Bees pollinate the blossom of apple trees in spring, and bees make honey.",
]
QUERIES = ["honey bees and blossom", "what carves valleys?", "the moon and the tides", "rivers to the sea"]
SPARSE = VectorStoreQueryMode.SPARSE
HYBRID = VectorStoreQueryMode.HYBRID
EVEN = MetadataFilters(filters=[MetadataFilter(key="group", value="even")])
LATE = MetadataFilters(filters=[MetadataFilter(key="n", value=4, operator=FilterOperator.GTE)])


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


def _keep(node_id: str, filters: MetadataFilters | None = None, doc_ids=None, node_ids=None) -> bool:
    """Whether node ``node_id`` passes the restrictions these tests use (by hand, from TEXTS' metadata)."""
    i = int(node_id[1:])
    ok = True
    if filters is EVEN:
        ok = i % 2 == 0
    elif filters is LATE:
        ok = i >= 4
    if doc_ids:
        ok = ok and f"doc{i // 2}" in doc_ids
    if node_ids:
        ok = ok and node_id in node_ids
    return ok


def relative_score_fusion(dense, sparse, alpha: float, top_k: int) -> list[tuple[str, float]]:
    """``alpha * dense' + (1 - alpha) * sparse'``, each list min-max scaled (all 1.0 when equal), a node missing
    from a list counting 0 there; best first, ties in dense then sparse order (as in test_sparse_modes.py)."""

    def scaled(results):
        if not results:
            return {}
        lo, hi = min(s for _, s in results), max(s for _, s in results)
        return {i: 1.0 if hi == lo else (s - lo) / (hi - lo) for i, s in results}

    d, s = scaled(dense), scaled(sparse)
    ids = list(dict.fromkeys([i for i, _ in dense] + [i for i, _ in sparse]))
    fused = sorted(((i, alpha * d.get(i, 0.0) + (1.0 - alpha) * s.get(i, 0.0)) for i in ids), key=lambda t: -t[1])
    return fused[:top_k]


@pytest.fixture
def bm25_store(make_store, hash_embedding):
    """A dense store with a BM25 index (local directory or Milvus Lite), the nodes embedded by HashEmbedding."""
    store = make_store(hash_embedding.dim, bm25=True)
    store.add(_nodes(hash_embedding.get_text_embedding))
    return store


# ------------------------------------------------------------------------------------------------------
# SPARSE: the engine's bm25 strategy, with filters, doc_ids and node_ids; HYBRID: relative-score fusion
# ------------------------------------------------------------------------------------------------------
def test_sparse_bm25_is_the_engine_strategy_with_every_restriction(bm25_store):
    store = bm25_store
    assert store.bm25 is True and store.token_index is False
    assert store.sparse_mode == "bm25"  # the default when the store's only sparse index is BM25
    engine = build_retriever("bm25", store.reader)
    restrictions = [
        {},
        {"filters": EVEN},
        {"filters": LATE, "doc_ids": ["doc2", "doc3"]},
        {"node_ids": ["n1", "n5", "n7"]},
        {"node_ids": []},  # no restriction (what as_retriever sends)
    ]
    for query in QUERIES:
        everything = engine.run(Queries(texts=[query]), len(TEXTS))[0].hits
        for restriction in restrictions:
            got = store.query(VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=3, **restriction))
            # filters restrict what is returned, not BM25's statistics: the unfiltered scores, filtered by hand
            expected = [h for h in everything if _keep(h.passage_id, **restriction)][:3]
            assert got.ids == [h.passage_id for h in expected], (query, restriction)
            np.testing.assert_allclose(got.similarities, [h.score for h in expected], rtol=1e-9)
            assert [n.node_id for n in got.nodes] == got.ids
        sparse_k = store.query(VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=1, sparse_top_k=4))
        assert sparse_k.ids == [h.passage_id for h in everything[:4]]  # sparse_top_k wins, as for the SVDR modes
        q = VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=3, filters=EVEN)
        assert asyncio.run(store.aquery(q)).ids == store.query(q).ids
    hit = store.query(VectorStoreQuery(query_str="honey bees", mode=SPARSE, similarity_top_k=1)).nodes[0]
    assert hit.node_id == "n7" and hit.ref_doc_id == "doc3" and hit.metadata["group"] == "odd"  # nodes come whole
    # the generic LlamaIndex retriever on the same store agrees
    generic = RagHierRetriever(store, "bm25", similarity_top_k=3).retrieve(QUERIES[0])
    assert [n.node.node_id for n in generic] == store.query(
        VectorStoreQuery(query_str=QUERIES[0], mode=SPARSE, similarity_top_k=3)
    ).ids
    # the index follows deletes
    store.delete("doc3")
    assert not {"n6", "n7"} & set(store.query(VectorStoreQuery(query_str="bees rivers", mode=SPARSE)).ids)


def test_hybrid_bm25_relative_score_fusion_and_alpha_extremes(bm25_store, hash_embedding):
    store = bm25_store
    index = VectorStoreIndex.from_vector_store(store, embed_model=hash_embedding)
    for query in QUERIES:
        embedding = hash_embedding.get_query_embedding(query)
        for filters in (None, EVEN):
            dense = store.query(VectorStoreQuery(query_embedding=embedding, similarity_top_k=5, filters=filters))
            sparse = store.query(VectorStoreQuery(query_str=query, mode=SPARSE, similarity_top_k=5, filters=filters))
            for alpha in (0.0, 0.3, 0.5, 1.0):
                got = index.as_retriever(
                    vector_store_query_mode="hybrid",
                    similarity_top_k=5,
                    sparse_top_k=5,
                    hybrid_top_k=5,  # the fusion reads at least hybrid_top_k candidates from each side
                    alpha=alpha,
                    filters=filters,
                ).retrieve(query)
                expected = relative_score_fusion(
                    list(zip(dense.ids, dense.similarities, strict=True)),
                    list(zip(sparse.ids, sparse.similarities, strict=True)),
                    alpha,
                    5,
                )
                assert [(n.node.node_id, pytest.approx(n.score)) for n in got] == [
                    (i, pytest.approx(s)) for i, s in expected
                ], (query, alpha)
                if filters is EVEN:
                    assert all(n.node.metadata["group"] == "even" for n in got)
                ids = [n.node.node_id for n in got]
                if alpha == 1.0:  # dense only: the dense order, then the BM25-only nodes (at 0)
                    assert ids[: len(dense.ids)] == dense.ids
                if alpha == 0.0:  # BM25 only: the BM25 order (its last node, at 0, may tie with dense-only ones)
                    from_bm25 = [i for i in ids if i in sparse.ids]
                    assert from_bm25 == sparse.ids[: len(from_bm25)] and len(from_bm25) >= len(sparse.ids) - 1
                    assert all(n.score == 0.0 for n in got if n.node.node_id not in sparse.ids)
    only_dense = store.query(
        VectorStoreQuery(
            query_embedding=hash_embedding.get_query_embedding(QUERIES[0]),
            query_str=QUERIES[0],
            mode=HYBRID,
            similarity_top_k=4,
            alpha=1.0,
        )
    )
    dense = store.query(
        VectorStoreQuery(query_embedding=hash_embedding.get_query_embedding(QUERIES[0]), similarity_top_k=4)
    )
    assert only_dense.ids[:4] == dense.ids


# ------------------------------------------------------------------------------------------------------
# BM25-only stores, persistence, options
# ------------------------------------------------------------------------------------------------------
def test_bm25_only_store_needs_no_model_and_no_query_embedding(store_path):
    store = RagHierVectorStore(store_path, bm25=True, dense=False)  # no model anywhere
    assert store.is_embedding_query is False and store.sparse_mode == "bm25" and store.bm25 is True
    index = VectorStoreIndex(
        _nodes(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=1),
    )
    assert store.client.dimension is None  # the embeddings VectorStoreIndex computed were not stored
    expected = store.query(VectorStoreQuery(query_str=QUERIES[1], mode=SPARSE, similarity_top_k=3)).ids
    assert expected[0] == "n5"
    for kwargs in ({}, {"vector_store_query_mode": "sparse"}):  # DEFAULT is the sparse search on this store
        got = index.as_retriever(similarity_top_k=3, **kwargs).retrieve(QUERIES[1])
        assert [n.node.node_id for n in got] == expected
    got = asyncio.run(index.as_retriever(similarity_top_k=3).aretrieve(QUERIES[1]))
    assert [n.node.node_id for n in got] == expected
    with pytest.raises(ValueError, match="dense=False"):
        store.query(VectorStoreQuery(query_str="bees", query_embedding=[1.0], mode=HYBRID))
    store.close()


def test_nodes_without_embeddings_on_a_dense_store_with_a_bm25_index(store_path, hash_embedding):
    store = RagHierVectorStore(store_path, bm25=True)  # dense, but no model: unembedded nodes are BM25-only
    nodes = _nodes()
    nodes[0].embedding = hash_embedding.get_text_embedding(nodes[0].text)
    store.add(nodes)
    assert store.query(VectorStoreQuery(query_embedding=nodes[0].embedding, similarity_top_k=5)).ids == ["n0"]
    assert store.query(VectorStoreQuery(query_str="honey bees", mode=SPARSE, similarity_top_k=1)).ids == ["n7"]
    store.close()


def test_persist_and_reload_keep_the_bm25_index(tmp_path):
    store = RagHierVectorStore(str(tmp_path / "live"), bm25={"stopwords": "en", "stemmer": None}, dense=False)
    index = VectorStoreIndex(
        _nodes(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=1),
    )
    before = index.as_retriever(similarity_top_k=3).retrieve(QUERIES[0])
    persist_dir = tmp_path / "persisted"
    index.storage_context.persist(persist_dir=str(persist_dir))
    store.close()
    reopened = RagHierVectorStore.from_persist_dir(str(persist_dir))  # nothing to pass again
    assert reopened.dense is False and reopened.bm25 is True and reopened.sparse_mode == "bm25"
    assert reopened.client.extension("bm25").config()["stemmer"] is None  # the tokenization travelled with it
    loaded = load_index_from_storage(
        StorageContext.from_defaults(persist_dir=str(persist_dir), vector_store=reopened),
        embed_model=MockEmbedding(embed_dim=1),
    )
    after = loaded.as_retriever(similarity_top_k=3).retrieve(QUERIES[0])
    assert [(n.node.node_id, n.score) for n in after] == [(n.node.node_id, n.score) for n in before]
    data = reopened.to_dict()
    assert data["bm25"] is True and data["sparse_mode"] == "bm25"
    again = RagHierVectorStore.from_dict(data)
    assert again.query(VectorStoreQuery(query_str=QUERIES[0], similarity_top_k=3)).ids == [
        n.node.node_id for n in before
    ]
    reopened.close()
    again.close()


def test_the_store_default_sparse_mode_and_reopening_on_milvus(make_store, hash_embedding):
    store = make_store(hash_embedding.dim, bm25=True, token_index=True)
    assert store.sparse_mode == "beta-rerank"  # a token index keeps SVDR's default
    store.add(_nodes(hash_embedding.get_text_embedding))
    chosen = make_store(hash_embedding.dim, sparse_mode="bm25")  # the same store opened again: it keeps both
    assert chosen.bm25 and chosen.token_index
    q = VectorStoreQuery(query_str="bees honey", mode=SPARSE, similarity_top_k=2)
    assert chosen.query(q).ids == ["n7", "n1"]
    again = RagHierVectorStore.from_dict(chosen.to_dict())
    assert again.sparse_mode == "bm25" and again.query(q).ids == ["n7", "n1"]
    again.close()
    store.client.remove_extension("token-index")  # the Milvus collection is reused by the next tests


# ------------------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------------------
def test_missing_bm25_index_says_how_to_get_one(store_path, tmp_path, hash_embedding, caplog):
    plain = RagHierVectorStore(store_path, sparse_mode="bm25")
    plain.add(_nodes(hash_embedding.get_text_embedding))
    assert plain.bm25 is False
    for mode, extra in ((SPARSE, {}), (HYBRID, {"query_embedding": hash_embedding.get_query_embedding("bees")})):
        with pytest.raises(ValueError, match=r"BM25 index.*bm25=True.*ensure_extension\('bm25'\)"):
            plain.query(VectorStoreQuery(query_str="bees", mode=mode, **extra))
    with pytest.raises(ValueError, match="query_str"):
        plain.query(VectorStoreQuery(mode=SPARSE))
    # opening it with bm25=True indexes the nodes it holds; the first handle sees the index at once
    with_index = RagHierVectorStore(store_path, bm25=True)
    assert with_index.bm25 is True and with_index.sparse_mode == "bm25"
    q = VectorStoreQuery(query_str="honey bees", mode=SPARSE, similarity_top_k=2)
    assert plain.query(q).ids == with_index.query(q).ids == ["n7", "n1"]
    # asking for another tokenization keeps the index and says so
    with caplog.at_level(logging.WARNING):
        RagHierVectorStore(store_path, bm25={"stemmer": None}).close()
    assert "keeping it" in caplog.text and "stemmer" in caplog.text
    with_index.close()
    plain.close()
    with pytest.raises(ValueError, match="bm25=True"):
        RagHierVectorStore(str(tmp_path / "nothing"), dense=False)
    with pytest.raises(ValueError, match="sparse_mode"):
        RagHierVectorStore(str(tmp_path / "bad-mode"), bm25=True, sparse_mode="bm26")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bm25 options"):
        RagHierVectorStore(str(tmp_path / "bad-option"), bm25={"tokenizer": "x"})
    with pytest.raises(ValueError, match="bm25 must be"):
        RagHierVectorStore(str(tmp_path / "bad-value"), bm25="yes")  # type: ignore[arg-type]
