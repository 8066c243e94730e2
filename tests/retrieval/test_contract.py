"""Every registered strategy passes the same checks (the retriever contract of rag_hier.retrieval.base).

The store holds 10 documents of 3 passages each, a dense vector per passage, a sparse embedding per passage,
and every extension a built-in strategy needs. Queries carry text, a dense vector and a sparse vector, so each
strategy takes what it uses. A strategy registered later is picked up here automatically; give it parameters
in ``PARAMS`` if its defaults do not search exhaustively on 30 passages.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval import Queries, build_retriever, strategy, strategy_names
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.ehi import EHIExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.extensions.tree import TreeExtension
from rag_hier.testing import kmeans_ehi_extension

WORDS = ["river", "glacier", "magma", "honey", "moon", "comet", "delta", "nectar", "crust", "valley", "tide", "orbit"]
PARAMS = {"tree": {"beam": 64}, "hierarchical": {"k1": 100}, "ehi": {"beam": 3}}
TEXTS = ["river delta", "honey nectar bees", "moon tide orbit"]


def _docs() -> list[Document]:
    rng = np.random.default_rng(3)
    docs = []
    for d in range(10):
        paragraphs = tuple(" ".join(rng.choice(WORDS, size=5)) for _ in range(3))
        docs.append(Document(f"doc{d}", f"Title {d}", paragraphs, metadata={"n": d, "parity": d % 2}))
    return docs


def _ehi(store: HierStore) -> EHIExtension:
    """An EHI indexer of 3 leaves fitted to the store's vectors (a k-means warm start; no training needed here)."""
    return kmeans_ehi_extension(store, 3)


def _store(path: Path, encoder: DenseEncoder, tiny_model_path: str) -> HierStore:
    store = HierStore.create(path, encoder=encoder)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.ensure_extension("sparse-embeddings")
    store.ensure_extension("bm25")
    store.add_documents(_docs(), max_passage_words=0)
    # a sparse embedding per passage: its word ids as indices
    updates = []
    for p in store.filter_passages():
        ids = sorted({WORDS.index(w) for w in p.text.split()})
        updates.append((p, {"indices": ids, "values": [1.0] * len(ids)}))
    with store.batch():
        for p, sparse in updates:
            store.add_passages(
                [dataclasses.replace(p, extra={"sparse_embedding": sparse})],
                store.get_embeddings([p.id]),
            )
    store.add_extension(DocumentIndex())
    store.add_extension(TreeExtension(branching=3))
    store.add_extension(_ehi(store))
    return store


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, encoder: DenseEncoder, tiny_model_path: str, vocab) -> Path:
    """The store, built once (with every passage's SVDR vector cached); each test gets a copy."""
    from rag_hier.retrieval.svdr import encode_missing_vectors

    path = tmp_path_factory.mktemp("contract") / "template"
    store = _store(path, encoder, tiny_model_path)
    encode_missing_vectors(store, vocab)
    store.close()
    return path


@pytest.fixture()
def store(tmp_path: Path, template: Path, encoder: DenseEncoder) -> Iterator[HierStore]:
    shutil.copytree(template, tmp_path / "store")
    s = HierStore.open(tmp_path / "store", encoder=encoder)
    yield s
    s.close()


def _queries(store: HierStore, texts: list[str]) -> Queries:
    sparse = [(sorted({WORDS.index(w) for w in t.split() if w in WORDS}), None) for t in texts]
    return Queries(
        texts=texts,
        vectors=store.encode_queries(texts),
        sparse=[(ids, [1.0] * len(ids)) for ids, _ in sparse],
    )


def _retriever(name: str, store: HierStore, vocab):
    kwargs = {"encoder": vocab} if strategy(name).retriever.__name__ == "SvdrRetriever" else {}
    if name == "fusion":
        from rag_hier.retrieval.fusion import FusionRetriever

        parts = [build_retriever("dense", store), build_retriever("svdr-lexical", store)]
        return FusionRetriever(store, components=parts)
    return strategy(name).retriever(store, params=strategy(name).parse(PARAMS.get(name)), **kwargs)


STRATEGIES = strategy_names()


def _check_ranked(hits) -> None:
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert len({h.passage_id for h in hits}) == len(hits)
    assert all(h.rowid >= 0 for h in hits)


@pytest.mark.parametrize("name", STRATEGIES)
def test_results_are_ranked_hits_of_stored_passages(store: HierStore, vocab, name: str) -> None:
    results = _retriever(name, store, vocab).run(_queries(store, TEXTS), top_k=5)
    assert len(results) == len(TEXTS)
    stored = {p.id for p in store.filter_passages()}
    for r in results:
        assert 0 < len(r.hits) <= 5
        _check_ranked(r.hits)
        assert {h.passage_id for h in r.hits} <= stored
        assert all(isinstance(v, float) for v in r.stats.values())


@pytest.mark.parametrize("name", STRATEGIES)
def test_filters_none_some_all(store: HierStore, vocab, name: str) -> None:
    retriever = _retriever(name, store, vocab)
    q = _queries(store, TEXTS[:1])
    nothing = {"field": "meta.n", "operator": ">", "value": 100}
    assert retriever.run(q, top_k=5, filters=nothing)[0].hits == []
    some = {"field": "meta.parity", "operator": "==", "value": 1}
    hits = retriever.run(q, top_k=30, filters=some)[0].hits
    assert hits and all(h.meta["parity"] == 1 for h in hits)
    everything = {"field": "meta.n", "operator": ">=", "value": 0}
    unfiltered = retriever.run(q, top_k=5)[0].hits
    assert [h.passage_id for h in retriever.run(q, top_k=5, filters=everything)[0].hits] == [
        h.passage_id for h in unfiltered
    ]


@pytest.mark.parametrize("name", STRATEGIES)
def test_top_k_beyond_the_store_is_capped(store: HierStore, vocab, name: str) -> None:
    retriever = _retriever(name, store, vocab)
    hits = retriever.run(_queries(store, TEXTS[:1]), top_k=10**9)[0].hits
    assert 0 < len(hits) <= store.count_passages() == 30
    _check_ranked(hits)
    with pytest.raises(ValueError, match="top_k"):
        retriever.run(_queries(store, TEXTS[:1]), top_k=0)


@pytest.mark.parametrize("name", [n for n in STRATEGIES if n != "sparse-embedding"])
def test_document_aggregation_returns_top_k_documents(store: HierStore, vocab, name: str) -> None:
    retriever = _retriever(name, store, vocab)
    for r in retriever.run(_queries(store, TEXTS), top_k=7, aggregate="doc"):
        assert len(r.hits) == 7 and len({h.doc_id for h in r.hits}) == 7
        _check_ranked(r.hits)


@pytest.mark.parametrize("name", STRATEGIES)
def test_batch_equals_singles(store: HierStore, vocab, name: str) -> None:
    retriever = _retriever(name, store, vocab)
    batch = retriever.run(_queries(store, TEXTS), top_k=6)
    for i, text in enumerate(TEXTS):
        (single,) = retriever.run(_queries(store, [text]), top_k=6)
        assert [h.passage_id for h in single.hits] == [h.passage_id for h in batch[i].hits]
        assert [h.score for h in single.hits] == pytest.approx([h.score for h in batch[i].hits], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", STRATEGIES)
def test_deleted_passages_are_never_returned(store: HierStore, vocab, name: str) -> None:
    retriever = _retriever(name, store, vocab)
    first = retriever.run(_queries(store, TEXTS[:1]), top_k=3)[0].hits
    gone = {h.passage_id for h in first}
    store.delete_passages(sorted(gone))
    after = _retriever(name, store, vocab).run(_queries(store, TEXTS[:1]), top_k=30)[0].hits
    assert after and not gone & {h.passage_id for h in after}


@pytest.mark.parametrize("name", STRATEGIES)
def test_empty_store(store: HierStore, vocab, name: str) -> None:
    queries = _queries(store, TEXTS)
    store.delete_all()
    results = _retriever(name, store, vocab).run(queries, top_k=5)
    assert len(results) == len(TEXTS) and all(r.hits == [] for r in results)


@pytest.mark.parametrize("name", ["dense", "tree", "ehi", "hierarchical", "svdr-lexical", "bm25", "sparse-embedding"])
def test_ties_are_broken_by_insertion_order(tmp_path: Path, encoder, tiny_model_path: str, vocab, name: str) -> None:
    store = HierStore.create(tmp_path / "ties", encoder=encoder)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.ensure_extension("sparse-embeddings")
    store.ensure_extension("bm25")
    same = "moon tide orbit"
    docs = [Document(f"t{i}", "", (same,)) for i in range(6)]
    store.add_documents(docs, max_passage_words=0)
    for p in store.filter_passages():  # identical text, vector and sparse embedding for every passage
        store.add_passages(
            [dataclasses.replace(p, extra={"sparse_embedding": {"indices": [10, 11], "values": [1.0, 1.0]}})],
            store.get_embeddings([p.id]),
        )
    store.add_extension(DocumentIndex())
    store.add_extension(TreeExtension(branching=2))
    store.add_extension(_ehi(store))
    order = [p.id for p in store.filter_passages()]  # insertion order
    hits = _retriever(name, store, vocab).run(_queries(store, [same]), top_k=4)[0].hits
    assert [h.passage_id for h in hits] == order[:4]
    store.close()


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_long_batch_reads_in_short_blocks_with_the_same_results(
    store: HierStore, vocab, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a writer in another process waits for one block of queries, not for the whole batch
    from rag_hier.retrieval import base

    retriever = _retriever(name, store, vocab)
    queries = _queries(store, TEXTS * 3)
    whole = retriever.run(queries, top_k=4)
    blocks = {"n": 0}
    real = retriever.read_block

    def counted():
        blocks["n"] += 1
        return real()

    monkeypatch.setattr(base, "READ_BLOCK_QUERIES", 2)
    monkeypatch.setattr(retriever, "read_block", counted)
    parts = retriever.run(queries, top_k=4)
    if name != "dense":  # the dense path reads each group in one statement, without a read block
        assert blocks["n"] >= -(-len(TEXTS * 3) // 2)
    assert [[h.passage_id for h in r.hits] for r in parts] == [[h.passage_id for h in r.hits] for r in whole]
