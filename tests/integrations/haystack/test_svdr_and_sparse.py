"""SVDR's token index and sparse embeddings in Haystack: the store options, RagHierSvdrRetriever (every mode equal
to the engine's SvdrRetriever), RagHierSparseEmbeddingRetriever (against a brute-force oracle), YAML, async."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy, FilterPolicy
from haystack.testing.document_store import (
    CountDocumentsTest,
    DeleteAllTest,
    DeleteByFilterTest,
    DeleteDocumentsTest,
    FilterableDocsFixtureMixin,
    UpdateByFilterTest,
    WriteDocumentsTest,
)
from haystack_integrations.components.retrievers.rag_hier import (
    RagHierSparseEmbeddingRetriever,
    RagHierSvdrRetriever,
)
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier import HierStore, Passage
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.store.extensions.sparse_embeddings import SparseEmbeddingExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.retrieval.svdr import SvdrRetriever

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
EVEN = {"field": "meta.group", "operator": "==", "value": "even"}
STORE_TYPE = "haystack_integrations.document_stores.rag_hier.document_store.RagHierDocumentStore"


def _docs() -> list[Document]:
    return [
        Document(id=f"d{i}", content=t, meta={"n": i, "group": "even" if i % 2 == 0 else "odd"})
        for i, t in enumerate(TEXTS)
    ]


@pytest.fixture(scope="module")
def vocab_encoder(tiny_model_path: str) -> VocabEncoder:
    encoder = VocabEncoder(tiny_model_path, device="cpu", batch_size=4)
    encoder.module  # noqa: B018 - load now
    return encoder


@pytest.fixture
def svdr_store(store_path, tiny_model_path):
    """A token-index-only store (no dense vectors), model = the tiny BERT (tokenizer and vocabulary encoder)."""
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, token_index=True, dense=False, device="cpu")
    store.write_documents(_docs())
    yield store
    store.close()


@pytest.fixture
def engine_store(tmp_path, tiny_model_path):
    """The same corpus written by the engine directly (no Haystack): the reference for every mode."""
    store = HierStore.create(tmp_path / "engine", model=None)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.add_passages(
        [Passage(d.id, d.id, 0, d.content, meta=dict(d.meta)) for d in _docs()],
    )
    yield store
    store.close()


# ------------------------------------------------------------------------------------------------------
# the store options
# ------------------------------------------------------------------------------------------------------
def test_token_index_store_writes_no_vectors_and_keeps_documents_exact(svdr_store):
    hier = svdr_store.hier_store
    assert hier.encoder is None and hier.dimension is None
    tok = TokenIndexExtension.of(hier)
    assert len(tok.index) == len(TEXTS)
    assert svdr_store.filter_documents() == _docs()
    data = svdr_store.to_dict()["init_parameters"]
    assert data["token_index"] is True and data["dense"] is False
    assert RagHierDocumentStore.from_dict(svdr_store.to_dict()).to_dict() == svdr_store.to_dict()


def test_default_options_serialize_as_before(store_path):
    params = RagHierDocumentStore(path=store_path).to_dict()["init_parameters"]
    assert "token_index" not in params and "dense" not in params


def test_dense_false_keeps_embeddings_documents_bring(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, dense=False, token_index=True)
    docs = [Document(id="a", content="tides", embedding=[0.5, 0.25]), Document(id="b", content="bees")]
    store.write_documents(docs)
    assert store.filter_documents() == docs  # "b" was not encoded, "a" kept its own vector
    assert store.hier_store.dimension == 2
    store.close()


def test_bad_store_options(store_path):
    for bad in ({"tokenizer": "x"}, {"max_length": 1}, "yes"):
        with pytest.raises(ValueError):
            RagHierDocumentStore(path=store_path, token_index=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RagHierDocumentStore(path=store_path, dense="no")  # type: ignore[arg-type]


def test_token_index_is_added_to_an_existing_store_and_persists(store_path, tiny_model_path):
    plain = RagHierDocumentStore(path=store_path)
    plain.write_documents(_docs())
    assert plain.hier_store.extension(TokenIndexExtension.name) is None
    plain.close()
    with_tokens = RagHierDocumentStore(path=store_path, token_index={"model": tiny_model_path, "max_length": 64})
    assert len(TokenIndexExtension.of(with_tokens.hier_store).index) == len(TEXTS)
    first = with_tokens.svdr_retrieval("honey bees", mode="lexical", top_k=3)
    with_tokens.close()
    reopened = RagHierDocumentStore(path=store_path)  # no option needed to use what the store holds
    assert reopened.svdr_retrieval("honey bees", mode="lexical", top_k=3) == first
    assert TokenIndexExtension.of(reopened.hier_store).max_length == 64
    reopened.close()


def test_recreate_index_keeps_the_token_index(svdr_store):
    svdr_store.delete_all_documents(recreate_index=True)
    assert svdr_store.count_documents() == 0
    assert TokenIndexExtension.of(svdr_store.hier_store) is not None
    svdr_store.write_documents(_docs()[:2])
    assert [d.id for d in svdr_store.svdr_retrieval("honey", mode="lexical", top_k=1)] == ["d1"]


class TestTokenIndexStoreWrites(
    CountDocumentsTest,
    WriteDocumentsTest,
    DeleteDocumentsTest,
    DeleteAllTest,
    DeleteByFilterTest,
    UpdateByFilterTest,
    FilterableDocsFixtureMixin,
):
    """Haystack's shared write/delete tests on a store with a token index: it must follow every write."""

    @pytest.fixture
    def document_store(self, store_path, tiny_model_path):
        store = RagHierDocumentStore(path=store_path, token_index={"model": tiny_model_path})
        yield store
        hier = store.hier_store
        TokenIndexExtension.of(hier).verify(hier)  # holds exactly the stored documents
        store.close()

    def test_write_documents(self, document_store):
        doc = Document(content="test doc")
        assert document_store.write_documents([doc]) == 1
        assert document_store.svdr_retrieval("test", mode="lexical", top_k=1)[0].id == doc.id


# ------------------------------------------------------------------------------------------------------
# RagHierSvdrRetriever
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "rerank_m"), [("lexical", 100), ("beta", 100), ("beta-rerank", 3), ("full", 100), ("alpha", 100)]
)
def test_every_mode_equals_the_engine(svdr_store, engine_store, tiny_model_path, vocab_encoder, mode, rerank_m):
    reference = SvdrRetriever(engine_store, mode, encoder=vocab_encoder, rerank_m=rerank_m)
    retriever = RagHierSvdrRetriever(document_store=svdr_store, mode=mode, rerank_m=rerank_m, top_k=5)
    retriever.warm_up()
    retriever.warm_up()  # idempotent
    for query in QUERIES:
        for filters, engine_filters in ((None, None), (EVEN, EVEN)):
            docs = retriever.run(query=query, filters=filters)["documents"]
            hits = reference.search(query, top_k=5, filters=engine_filters)
            assert [d.id for d in docs] == [h.passage_id for h in hits], (mode, query, filters)
            np.testing.assert_allclose([d.score for d in docs], [h.score for h in hits], rtol=1e-5)
            if filters:
                assert docs and all(d.meta["group"] == "even" for d in docs)
    written = {d.id: d for d in _docs()}
    assert all(replace(d, score=None) == written[d.id] for d in docs)  # content and meta as written


def test_beta_rerank_keeps_the_vectors_it_computes(svdr_store, tiny_model_path):
    hier = svdr_store.hier_store
    assert hier.extension("svdr-vectors") is None
    RagHierSvdrRetriever(document_store=svdr_store, mode="beta-rerank", rerank_m=3).run(query="honey bees")
    vectors = hier.extension("svdr-vectors")
    assert vectors is not None and len(vectors.index) == 3
    path = svdr_store.path
    svdr_store.close()
    again = RagHierDocumentStore(path=path)
    assert len(again.hier_store.extension("svdr-vectors").index) == 3
    again.close()


def test_filters_top_k_policies_and_return_embedding(svdr_store):
    retriever = RagHierSvdrRetriever(document_store=svdr_store, mode="lexical", filters=EVEN, top_k=3)
    docs = retriever.run(query="bees rivers moon")["documents"]
    assert len(docs) == 3 and all(d.meta["group"] == "even" for d in docs)
    odd = {"field": "meta.group", "operator": "==", "value": "odd"}
    assert all(d.meta["group"] == "odd" for d in retriever.run(query="bees", filters=odd)["documents"])
    merge = RagHierSvdrRetriever(document_store=svdr_store, mode="lexical", filters=EVEN, filter_policy="merge")
    small = {"field": "meta.n", "operator": "<", "value": 3}
    assert [d.id for d in merge.run(query="bees moon magma", filters=small)["documents"]] == ["d0", "d2"]
    assert retriever.run(query="bees", top_k=0)["documents"] == []
    assert len(retriever.run(query="bees", top_k=1)["documents"]) == 1
    with pytest.raises(ValueError):
        retriever.run(query="bees", top_k=-1)
    with pytest.raises(ValueError):
        retriever.run(query="  ")
    assert retriever.run(query="bees", return_embedding=True)["documents"][0].embedding is None  # none stored


def test_modes_that_need_a_token_index_say_so(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path)
    store.write_documents(_docs())
    for mode in ("lexical", "beta", "beta-rerank"):
        with pytest.raises(DocumentStoreError, match="no token index"):
            RagHierSvdrRetriever(document_store=store, mode=mode, vocab_model=tiny_model_path).run(query="bees")
    # full search needs no token index: the E(d) it lacks are encoded
    docs = RagHierSvdrRetriever(document_store=store, mode="full", vocab_model=tiny_model_path).run(query="bees")
    assert len(docs["documents"]) == len(TEXTS)
    store.close()


def test_svdr_retriever_init_validation(svdr_store):
    with pytest.raises(TypeError):
        RagHierSvdrRetriever(document_store=InMemoryDocumentStore())
    for bad in ({"mode": "gamma"}, {"top_k": 0}, {"rerank_m": 0}):
        with pytest.raises(ValueError):
            RagHierSvdrRetriever(document_store=svdr_store, **bad)


@pytest.mark.parametrize("cls", [RagHierSvdrRetriever, RagHierSparseEmbeddingRetriever])
def test_run_and_run_async_have_identical_signatures(cls):
    assert inspect.signature(cls.run) == inspect.signature(cls.run_async)
    assert inspect.iscoroutinefunction(cls.run_async)


def test_svdr_retriever_to_dict_from_dict(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, token_index={"model": tiny_model_path}, dense=False)
    retriever = RagHierSvdrRetriever(
        document_store=store,
        mode="beta",
        filters=EVEN,
        top_k=4,
        rerank_m=7,
        vocab_model=tiny_model_path,
        return_embedding=True,
        filter_policy=FilterPolicy.MERGE,
    )
    data = retriever.to_dict()
    assert data == {
        "type": "haystack_integrations.components.retrievers.rag_hier.svdr_retriever.RagHierSvdrRetriever",
        "init_parameters": {
            "document_store": {
                "type": STORE_TYPE,
                "init_parameters": {
                    "path": store_path,
                    "index": "flat",
                    "model": None,
                    "device": None,
                    "strict_datetime_comparison": False,
                    "token_index": {"model": tiny_model_path},
                    "dense": False,
                },
            },
            "mode": "beta",
            "filters": EVEN,
            "top_k": 4,
            "rerank_m": 7,
            "vocab_model": tiny_model_path,
            "return_embedding": True,
            "filter_policy": "merge",
        },
    }
    again = RagHierSvdrRetriever.from_dict(data)
    assert again.to_dict() == data and again.filter_policy == FilterPolicy.MERGE
    assert again.document_store.token_index == {"model": tiny_model_path}


def test_svdr_retriever_run_async_matches_run(svdr_store):
    retriever = RagHierSvdrRetriever(document_store=svdr_store, mode="beta", top_k=4)
    for query in QUERIES:
        assert asyncio.run(retriever.run_async(query=query, filters=EVEN)) == retriever.run(query=query, filters=EVEN)


FRESH_INTERPRETER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from haystack import Document, Pipeline

    indexing = Pipeline.loads(Path(sys.argv[1]).read_text())
    querying = Pipeline.loads(Path(sys.argv[2]).read_text())
    docs = [Document.from_dict(d) for d in json.loads(Path(sys.argv[3]).read_text())]
    written = indexing.run({"writer": {"documents": docs}})["writer"]["documents_written"]
    out = querying.run({"svdr": {"query": sys.argv[4]}})
    print(json.dumps({"written": written, "ids": [d.id for d in out["svdr"]["documents"]]}))
    """
)


def test_yaml_round_trip_in_a_fresh_interpreter(tmp_path, store_path, tiny_model_path):
    def store() -> RagHierDocumentStore:
        return RagHierDocumentStore(path=store_path, model=tiny_model_path, token_index=True, dense=False)

    indexing = Pipeline()
    indexing.add_component("writer", DocumentWriter(document_store=store(), policy=DuplicatePolicy.OVERWRITE))
    querying = Pipeline()
    querying.add_component("svdr", RagHierSvdrRetriever(document_store=store(), mode="beta-rerank", rerank_m=4))
    for pipeline in (indexing, querying):
        assert Pipeline.loads(pipeline.dumps()).to_dict() == pipeline.to_dict()
    files = [tmp_path / "indexing.yaml", tmp_path / "query.yaml", tmp_path / "docs.json"]
    files[0].write_text(indexing.dumps())
    files[1].write_text(querying.dumps())
    files[2].write_text(json.dumps([d.to_dict() for d in _docs()]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAYSTACK_")}  # default allowlist
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_INTERPRETER, *map(str, files), QUERIES[0]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["written"] == len(TEXTS)
    here = querying.run({"svdr": {"query": QUERIES[0]}})["svdr"]["documents"]
    assert [d.id for d in here] == result["ids"] and len(here) == len(TEXTS)


# ------------------------------------------------------------------------------------------------------
# sparse embeddings
# ------------------------------------------------------------------------------------------------------
def _sparse_docs(rng: np.random.Generator, n: int = 40) -> list[Document]:
    pool = np.concatenate([np.arange(30), 2**33 + np.arange(10)])  # a vocabulary and hashed buckets
    docs = []
    for i in range(n):
        sparse = None
        if i % 7 != 3:  # some documents have no sparse embedding
            idx = np.sort(rng.choice(pool, size=int(rng.integers(1, 8)), replace=False))
            sparse = SparseEmbedding(indices=idx.tolist(), values=rng.uniform(0.05, 3.0, idx.size).tolist())
        docs.append(
            Document(
                id=f"s{i}", content=f"doc {i}", meta={"group": "even" if i % 2 == 0 else "odd"}, sparse_embedding=sparse
            )
        )
    return docs


def _oracle(docs: list[Document], query: SparseEmbedding, top_k: int, group: str | None = None) -> list[str]:
    weights: dict[int, float] = {}
    for i, v in zip(query.indices, query.values, strict=True):
        weights[i] = weights.get(i, 0.0) + v
    scored = []
    for pos, d in enumerate(docs):
        if d.sparse_embedding is None or (group is not None and d.meta["group"] != group):
            continue
        s = sum(
            weights.get(i, 0.0) * v for i, v in zip(d.sparse_embedding.indices, d.sparse_embedding.values, strict=True)
        )
        if s != 0:
            scored.append((-np.float32(s), pos, d.id))
    return [d for _, _, d in sorted(scored)[:top_k]]


def test_sparse_embedding_retrieval_matches_brute_force(store_path):
    rng = np.random.default_rng(1)
    docs = _sparse_docs(rng)
    store = RagHierDocumentStore(path=store_path)
    store.write_documents(docs)
    assert store.filter_documents() == docs  # sparse embeddings come back exactly
    retriever = RagHierSparseEmbeddingRetriever(document_store=store, top_k=6)
    for _ in range(15):
        q = _sparse_docs(rng, 1)[0].sparse_embedding
        got = retriever.run(query_sparse_embedding=q)["documents"]
        assert [d.id for d in got] == _oracle(docs, q, 6)
        assert [d.score for d in got] == sorted((d.score for d in got), reverse=True)
        assert all(d.sparse_embedding is not None for d in got)
        filtered = retriever.run(query_sparse_embedding=q, filters=EVEN)["documents"]
        assert [d.id for d in filtered] == _oracle(docs, q, 6, "even")
    store.close()


def test_sparse_index_follows_writes_and_persists(store_path):
    store = RagHierDocumentStore(path=store_path)
    query = SparseEmbedding(indices=[5], values=[1.0])
    store.write_documents([Document(id="a", content="a"), Document(id="b", content="b")])
    assert store.sparse_embedding_retrieval(query) == []
    store.write_documents(
        [Document(id="a", content="a", sparse_embedding=SparseEmbedding(indices=[5, 9], values=[2.0, 1.0]))],
        policy=DuplicatePolicy.OVERWRITE,
    )
    assert [(d.id, d.score) for d in store.sparse_embedding_retrieval(query)] == [("a", 2.0)]
    store.write_documents(
        [Document(id="b", content="b", sparse_embedding=SparseEmbedding(indices=[5], values=[3.0]))],
        policy=DuplicatePolicy.OVERWRITE,
    )
    store.write_documents(
        [Document(id="a", content="a", sparse_embedding=SparseEmbedding(indices=[9], values=[1.0]))],
        policy=DuplicatePolicy.OVERWRITE,
    )
    assert [d.id for d in store.sparse_embedding_retrieval(query)] == ["b"]
    store.close()
    again = RagHierDocumentStore(path=store_path)
    assert [(d.id, d.score) for d in again.sparse_embedding_retrieval(query)] == [("b", 3.0)]
    assert again.hier_store.extension(SparseEmbeddingExtension.name) is not None
    again.delete_by_filter({"field": "id", "operator": "==", "value": "b"})
    assert again.sparse_embedding_retrieval(query) == []
    again.delete_all_documents(recreate_index=True)
    assert again.sparse_embedding_retrieval(query) == []
    again.close()


def test_bad_sparse_embeddings_are_refused_atomically(store_path):
    store = RagHierDocumentStore(path=store_path)
    good = Document(id="ok", content="x", sparse_embedding=SparseEmbedding(indices=[1], values=[1.0]))
    bad = Document(id="bad", content="y", sparse_embedding=SparseEmbedding(indices=[-4], values=[1.0]))
    with pytest.raises(DocumentStoreError, match="non-negative"):
        store.write_documents([good, bad])
    assert store.count_documents() == 0
    nan = Document(id="nan", content="y", sparse_embedding=SparseEmbedding(indices=[1], values=[float("nan")]))
    with pytest.raises(DocumentStoreError, match="finite"):
        store.write_documents([nan])
    store.close()


def test_sparse_retriever_conventions(store_path):
    store = RagHierDocumentStore(path=store_path)
    docs = _sparse_docs(np.random.default_rng(2), 12)
    store.write_documents(docs)
    q = SparseEmbedding(indices=list(range(30)), values=[1.0] * 30)
    with pytest.raises(TypeError):
        RagHierSparseEmbeddingRetriever(document_store=InMemoryDocumentStore())
    with pytest.raises(ValueError):
        RagHierSparseEmbeddingRetriever(document_store=store, top_k=0)
    retriever = RagHierSparseEmbeddingRetriever(document_store=store, filters=EVEN, filter_policy="merge", top_k=3)
    only_odd_ids = {"field": "id", "operator": "in", "value": ["s1", "s5"]}  # merged with EVEN: nothing left
    assert retriever.run(query_sparse_embedding=q, filters=only_odd_ids)["documents"] == []
    assert len(retriever.run(query_sparse_embedding=q)["documents"]) == 3
    assert retriever.run(query_sparse_embedding=q, top_k=0)["documents"] == []
    with pytest.raises(ValueError):
        retriever.run(query_sparse_embedding=q, top_k=-1)
    with pytest.raises(ValueError):
        retriever.run(query_sparse_embedding={"indices": [1], "values": [1.0]})  # type: ignore[arg-type]
    assert asyncio.run(retriever.run_async(query_sparse_embedding=q)) == retriever.run(query_sparse_embedding=q)
    data = retriever.to_dict()
    assert data["type"].endswith("sparse_embedding_retriever.RagHierSparseEmbeddingRetriever")
    assert data["init_parameters"]["filter_policy"] == "merge" and data["init_parameters"]["top_k"] == 3
    again = RagHierSparseEmbeddingRetriever.from_dict(data)
    assert again.to_dict() == data
    pipeline = Pipeline()
    pipeline.add_component("sparse", retriever)
    loaded = Pipeline.loads(pipeline.dumps())
    assert loaded.run({"sparse": {"query_sparse_embedding": q}}) == pipeline.run(
        {"sparse": {"query_sparse_embedding": q}}
    )
    store.close()
