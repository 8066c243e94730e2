"""Every strategy on Milvus Lite returns what it returns on the local store, for the same vectors.

One local store (10 documents x 3 passages, dense vectors, sparse embeddings, the token index, the document
index, the tree, EHI and the BM25 index) is migrated into a Milvus Lite file without re-encoding; each registered
strategy then runs the same queries on both, unfiltered and filtered, and must return the same passages in the
same order with the same scores (FLAT is exact on both sides). Skips without ``pymilvus`` and ``milvus-lite``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval import Queries, build_retriever, strategy, strategy_names
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.extensions.tree import TreeExtension
from rag_hier.store.milvus import MilvusStore
from rag_hier.store.milvus.migrate import local_to_milvus, milvus_to_local

WORDS = ["river", "glacier", "magma", "honey", "moon", "comet", "delta", "nectar", "crust", "valley", "tide", "orbit"]
PARAMS = {"tree": {"beam": 64}, "hierarchical": {"k1": 100}}
TEXTS = ["river delta", "honey nectar bees", "moon tide orbit"]
FILTERS = [
    None,
    {"field": "meta.parity", "operator": "==", "value": 1},
    {
        "operator": "AND",
        "conditions": [
            {"field": "meta.n", "operator": ">=", "value": 3},
            {"field": "meta.n", "operator": "not in", "value": [5, 6]},
        ],
    },
]


def _docs() -> list[Document]:
    rng = np.random.default_rng(3)
    docs = []
    for d in range(10):
        paragraphs = tuple(" ".join(rng.choice(WORDS, size=5)) for _ in range(3))
        docs.append(Document(f"doc{d}", f"Title {d}", paragraphs, metadata={"n": d, "parity": d % 2}))
    return docs


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, encoder: DenseEncoder, tiny_model_path: str, vocab
) -> Iterator[tuple[HierStore, MilvusStore]]:
    """The local store and its copy in Milvus Lite."""
    from rag_hier.retrieval.svdr import encode_missing_vectors
    from rag_hier.testing import kmeans_ehi_extension

    root = tmp_path_factory.mktemp("milvus-strategies")
    local = HierStore.create(root / "local", encoder=encoder)
    local.add_extension(TokenIndexExtension(model=tiny_model_path))
    local.ensure_extension("sparse-embeddings")
    local.ensure_extension("bm25")
    local.add_documents(_docs(), max_passage_words=0)
    with local.batch():
        for p in local.filter_passages():
            ids = sorted({WORDS.index(w) for w in p.text.split()})
            local.add_passages(
                [dataclasses.replace(p, extra={"sparse_embedding": {"indices": ids, "values": [1.0] * len(ids)}})],
                local.get_embeddings([p.id]),
            )
    local.add_extension(DocumentIndex())
    local.add_extension(TreeExtension(branching=3))
    local.add_extension(kmeans_ehi_extension(local))
    encode_missing_vectors(local, vocab)
    remote = local_to_milvus(local, str(root / "m.db#contract"))
    remote.close()
    remote = MilvusStore.open(str(root / "m.db#contract"), encoder=encoder)
    yield local, remote
    remote.close()
    local.close()


def _queries(store, texts: list[str]) -> Queries:
    sparse = [sorted({WORDS.index(w) for w in t.split() if w in WORDS}) for t in texts]
    return Queries(texts=texts, vectors=store.encode_queries(texts), sparse=[(ids, [1.0] * len(ids)) for ids in sparse])


def _retriever(name: str, store, vocab):
    kwargs = {"encoder": vocab} if strategy(name).retriever.__name__ == "SvdrRetriever" else {}
    if name == "fusion":
        from rag_hier.retrieval.fusion import FusionRetriever

        parts = [build_retriever("dense", store), build_retriever("svdr-lexical", store)]
        return FusionRetriever(store, components=parts)
    return strategy(name).retriever(store, params=strategy(name).parse(PARAMS.get(name)), **kwargs)


def test_migration_round_trips_ids_titles_metadata_vectors(pair, tmp_path: Path) -> None:
    local, remote = pair
    assert remote.count_passages() == local.count_passages() == 30
    assert remote.count_documents() == 10 and remote.count_vectors() == 30
    assert sorted(remote.extensions) == sorted(local.extensions)
    mine = {p.id: p for p in local.filter_passages()}
    theirs = {p.id: p for p in remote.filter_passages()}
    assert mine == theirs  # ids, document ids, title paths, metadata, text
    ids = sorted(mine)
    for a, b in zip(local.get_embeddings(ids), remote.get_embeddings(ids), strict=True):
        np.testing.assert_array_equal(a, b)
    assert local.get_document("doc3") == remote.get_document("doc3")
    back = milvus_to_local(remote, tmp_path / "back")
    try:
        assert {p.id: p for p in back.filter_passages()} == mine
        assert sorted(back.extensions) == sorted(local.extensions)
    finally:
        back.close()


@pytest.mark.parametrize("name", strategy_names())
def test_same_top10_as_the_local_store(pair, vocab, name: str) -> None:
    local, remote = pair
    for filters in FILTERS:
        want = _retriever(name, local, vocab).run(_queries(local, TEXTS), top_k=10, filters=filters)
        got = _retriever(name, remote, vocab).run(_queries(remote, TEXTS), top_k=10, filters=filters)
        for w, g in zip(want, got, strict=True):
            assert w.hits, (name, filters)
            assert [h.passage_id for h in g.hits] == [h.passage_id for h in w.hits], (name, filters)
            assert [h.score for h in g.hits] == pytest.approx([h.score for h in w.hits], rel=1e-4, abs=1e-5)
            assert [h.meta for h in g.hits] == [h.meta for h in w.hits]


@pytest.mark.parametrize("name", ["dense", "hierarchical", "tree"])
def test_filtered_search_returns_top_k_whenever_that_many_match(pair, vocab, name: str) -> None:
    _, remote = pair
    retriever = _retriever(name, remote, vocab)
    q = _queries(remote, TEXTS[:1])
    for n_docs in (1, 5, 10):  # 3, 15, 30 passages match
        filters = {"field": "meta.n", "operator": "<", "value": n_docs}
        hits = retriever.run(q, top_k=10, filters=filters)[0].hits
        assert len(hits) == min(10, 3 * n_docs)
        assert all(h.meta["n"] < n_docs for h in hits)


def test_sparse_and_leaf_searches_run_inside_milvus(pair, vocab, monkeypatch) -> None:
    """The migrated token index, sparse embeddings and SVDR E(d) vectors are a Milvus sparse field, the tree / EHI
    leaves passage fields: searching them never touches client-side rows or vectors (SVDR full / α are one sparse
    search; β+rerank reads only its candidates' E(d), by rowid), and tree / EHI end in a leaf-filtered search."""
    from rag_hier.index.sparse import SparseRowIndex
    from rag_hier.store.extensions.ehi import EHIExtension

    _, remote = pair
    for name in ("token-index", "sparse-embeddings", "svdr-vectors", "tree", "ehi"):
        assert remote.extension_in_engine(name), name
    state = remote.info()
    for name in ("token-index", "sparse-embeddings", "svdr-vectors"):
        assert state["extensions"][name]["files"] == {}  # nothing in C__files: no file to load into the client
        assert state["extensions_state"][name]["milvus"]["rows"] == 30
        assert remote.extension(name).sparse_rows()[0].size == 0
    assert remote.extension("token-index").index.held_rows() is None

    def boom(*args, **kwargs):
        raise AssertionError("searched in the client")

    monkeypatch.setattr(SparseRowIndex, "search", boom)
    monkeypatch.setattr(TreeExtension, "item_vectors", boom)
    monkeypatch.setattr(EHIExtension, "item_vectors", boom)
    filters_seen: list[str] = []
    search_dense = MilvusStore.search_dense

    def spy(self, queries, top_k, allowed=None, *, where=None):
        filters_seen.append(where or "")
        return search_dense(self, queries, top_k, allowed, where=where)

    monkeypatch.setattr(MilvusStore, "search_dense", spy)
    read_by_rowid: list[int] = []
    rows_of = MilvusStore.sparse_rows_of

    def rows_spy(self, name, rowids, columns):
        assert name == "svdr-vectors"
        read_by_rowid.append(len(rowids))
        return rows_of(self, name, rowids, columns)

    monkeypatch.setattr(MilvusStore, "sparse_rows_of", rows_spy)
    monkeypatch.setattr(MilvusStore, "_read_file", boom)  # no extension file is loaded for any of these
    params = {**PARAMS, "tree": {"beam": 2}, "ehi": {"beam": 1}, "svdr-beta-rerank": {"rerank_m": 4}}
    generation = remote.generation
    searched = ("svdr-full", "svdr-alpha", "svdr-beta", "svdr-beta-rerank", "svdr-lexical", "sparse-embedding")
    for name in (*searched, "tree", "ehi"):
        info = strategy(name)
        kwargs = {"encoder": vocab} if info.retriever.__name__ == "SvdrRetriever" else {}
        results = info.retriever(remote, params=info.parse(params.get(name)), **kwargs).run(
            _queries(remote, TEXTS), top_k=10, filters=FILTERS[1]
        )
        assert all(r.hits for r in results), name
    assert read_by_rowid and max(read_by_rowid) <= 4 * len(TEXTS)  # the re-rank's candidates only
    assert remote.generation == generation  # searching wrote nothing
    assert any(w.startswith("tree_leaf in [") for w in filters_seen)
    assert any(w.startswith("array_contains_any(ehi_leaves, [") for w in filters_seen)
