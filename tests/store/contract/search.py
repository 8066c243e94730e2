"""Search: dense search by text, batches, and every registered strategy giving the reference's top 10.

The reference is the local store: :func:`strategy_reference` builds one (10 documents x 3 passages, dense vectors,
sparse embeddings, the token index, the document index, the tree, EHI and the BM25 index) and the backend's
``factory.copy_of`` copies it without re-encoding; each strategy then runs the same queries on both, unfiltered
and filtered, and must return the same passages in the same order with the same scores (FLAT is exact).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import Document, HierStore
from rag_hier.retrieval import Queries, build_retriever, strategy, strategy_names
from rag_hier.store.contract import StoreBackend

from .base import DOCS, ContractBase, StoreFactory, unique_name

WORDS = ["river", "glacier", "magma", "honey", "moon", "comet", "delta", "nectar", "crust", "valley", "tide", "orbit"]
PARAMS = {"tree": {"beam": 64}, "hierarchical": {"k1": 100}}
TEXTS = ["river delta", "honey nectar bees", "moon tide orbit"]
STRATEGY_FILTERS = [
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


def strategy_docs() -> list[Document]:
    """10 documents x 3 passages of five words from :data:`WORDS`, metadata ``n`` and ``parity``."""
    rng = np.random.default_rng(3)
    docs = []
    for d in range(10):
        paragraphs = tuple(" ".join(rng.choice(WORDS, size=5)) for _ in range(3))
        docs.append(Document(f"doc{d}", f"Title {d}", paragraphs, metadata={"n": d, "parity": d % 2}))
    return docs


def strategy_reference(root: Path, encoder: Any, tiny_model_path: str, vocab: Any) -> HierStore:
    """A local store with every extension a registered strategy reads (see the module docstring)."""
    from rag_hier.retrieval.svdr import encode_missing_vectors
    from rag_hier.store.extensions.doc_index import DocumentIndex
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.extensions.tree import TreeExtension
    from rag_hier.testing import kmeans_ehi_extension

    local = HierStore.create(root, encoder=encoder)
    local.add_extension(TokenIndexExtension(model=tiny_model_path))
    local.ensure_extension("sparse-embeddings")
    local.ensure_extension("bm25")
    local.add_documents(strategy_docs(), max_passage_words=0)
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
    return local


def strategy_queries(store: StoreBackend, texts: list[str]) -> Queries:
    """Texts, their dense vectors and sparse queries over :data:`WORDS`."""
    sparse = [sorted({WORDS.index(w) for w in t.split() if w in WORDS}) for t in texts]
    return Queries(texts=texts, vectors=store.encode_queries(texts), sparse=[(ids, [1.0] * len(ids)) for ids in sparse])


def strategy_retriever(name: str, store: StoreBackend, vocab: Any) -> Any:
    """The registered strategy ``name`` on ``store`` (with :data:`PARAMS`; fusion of dense and SVDR lexical)."""
    kwargs = {"encoder": vocab} if strategy(name).retriever.__name__ == "SvdrRetriever" else {}
    if name == "fusion":
        from rag_hier.retrieval.fusion import FusionRetriever

        parts = [build_retriever("dense", store), build_retriever("svdr-lexical", store)]
        return FusionRetriever(store, components=parts)
    return strategy(name).retriever(store, params=strategy(name).parse(PARAMS.get(name)), **kwargs)


class SearchContract(ContractBase):
    """Dense search answers like the local store's, and so does every registered strategy."""

    @pytest.fixture(scope="class")
    @classmethod
    def reference(cls, tmp_path_factory: pytest.TempPathFactory, encoder: Any) -> Iterator[HierStore]:
        """A local store holding :data:`DOCS` (the reference the backend's searches are compared with)."""
        local = HierStore.create(tmp_path_factory.mktemp("reference") / "local", encoder=encoder)
        local.add_documents(list(DOCS), max_passage_words=0)
        yield local
        local.close()

    @pytest.fixture(scope="class")
    @classmethod
    def strategy_pair(
        cls,
        factory: StoreFactory,
        tmp_path_factory: pytest.TempPathFactory,
        encoder: Any,
        tiny_model_path: str,
        vocab: Any,
    ) -> Iterator[tuple[HierStore, StoreBackend]]:
        """``(reference, the backend's copy of it)``; a backend may override it to share one built elsewhere."""
        local = strategy_reference(tmp_path_factory.mktemp("strategies") / "local", encoder, tiny_model_path, vocab)
        copy = factory.copy_of(local, unique_name("strategies"))
        yield local, copy
        factory.dispose(copy)
        local.close()

    def test_batch_queries_match_single(self, shared_store: StoreBackend) -> None:
        queries = ["moon and tides", "magma", "nectar"]
        batch = shared_store.search(queries, top_k=2)
        assert len(batch) == 3
        for q, hits in zip(queries, batch, strict=True):
            single = shared_store.search(q, top_k=2)
            assert [h.passage_id for h in hits] == [h.passage_id for h in single]
        assert shared_store.search([], top_k=2) == []

    def test_search_is_the_local_stores_search(self, shared_store: StoreBackend, reference: HierStore) -> None:
        # the README's first call works on any backend: same hits, same order, filters pushed down alike
        for query in ("how do bees store honey?", ["tides and the moon", "volcanoes"]):
            want, got = reference.search(query, top_k=4), shared_store.search(query, top_k=4)
            if isinstance(query, str):
                rows = (want, got)
            else:
                rows = ([h for r in want for h in r], [h for r in got for h in r])
            assert [(h.passage_id, h.rank) for h in rows[1]] == [(h.passage_id, h.rank) for h in rows[0]]
            assert np.allclose([h.score for h in rows[1]], [h.score for h in rows[0]], atol=1e-5)
            assert [(h.text, h.meta, h.title_path) for h in rows[1]] == [
                (h.text, h.meta, h.title_path) for h in rows[0]
            ]
        only = {"field": "meta.topic", "operator": "in", "value": ["animals", "sea"]}
        want_ids = [h.passage_id for h in reference.search("honey", 3, only)]
        assert [h.passage_id for h in shared_store.search("honey", 3, only)] == want_ids
        assert want_ids and all(not i.startswith("volcano") for i in want_ids)

    def test_stored_passages_are_the_references(self, shared_store: StoreBackend, reference: HierStore) -> None:
        # ids, document ids, title paths, metadata, text; documents; vectors as written
        assert {p.id: p for p in shared_store.filter_passages()} == {p.id: p for p in reference.filter_passages()}
        assert shared_store.get_document("bees") == reference.get_document("bees")
        assert shared_store.document_ids() == reference.document_ids()
        np.testing.assert_array_equal(
            shared_store.get_embeddings(["bees#0"])[0], reference.get_embeddings(["bees#0"])[0]
        )

    def test_the_copy_holds_the_references_passages(self, strategy_pair: tuple[HierStore, StoreBackend]) -> None:
        local, copy = strategy_pair
        assert copy.count_passages() == local.count_passages() == 30
        assert copy.count_documents() == 10 and copy.count_vectors() == 30
        assert sorted(copy.extensions) == sorted(local.extensions)
        assert {p.id: p for p in copy.filter_passages()} == {p.id: p for p in local.filter_passages()}

    @pytest.mark.parametrize("name", strategy_names())
    def test_same_top10_as_the_local_store(
        self, strategy_pair: tuple[HierStore, StoreBackend], vocab: Any, name: str
    ) -> None:
        local, copy = strategy_pair
        for filters in STRATEGY_FILTERS:
            want = strategy_retriever(name, local, vocab).run(strategy_queries(local, TEXTS), top_k=10, filters=filters)
            got = strategy_retriever(name, copy, vocab).run(strategy_queries(copy, TEXTS), top_k=10, filters=filters)
            for w, g in zip(want, got, strict=True):
                assert w.hits, (name, filters)
                assert [h.passage_id for h in g.hits] == [h.passage_id for h in w.hits], (name, filters)
                assert [h.score for h in g.hits] == pytest.approx([h.score for h in w.hits], rel=1e-4, abs=1e-5)
                assert [h.meta for h in g.hits] == [h.meta for h in w.hits]

    @pytest.mark.parametrize("name", ["dense", "hierarchical", "tree"])
    def test_filtered_search_returns_top_k_whenever_that_many_match(
        self, strategy_pair: tuple[HierStore, StoreBackend], vocab: Any, name: str
    ) -> None:
        _, copy = strategy_pair
        retriever = strategy_retriever(name, copy, vocab)
        q = strategy_queries(copy, TEXTS[:1])
        for n_docs in (1, 5, 10):  # 3, 15, 30 passages match
            filters = {"field": "meta.n", "operator": "<", "value": n_docs}
            hits = retriever.run(q, top_k=10, filters=filters)[0].hits
            assert len(hits) == min(10, 3 * n_docs)
            assert all(h.meta["n"] < n_docs for h in hits)

    def test_searching_writes_nothing(self, strategy_pair: tuple[HierStore, StoreBackend], vocab: Any) -> None:
        _, copy = strategy_pair
        generation = copy.generation
        for name in ("dense", "svdr-beta-rerank", "tree", "ehi"):
            assert strategy_retriever(name, copy, vocab).run(strategy_queries(copy, TEXTS), top_k=3)[0].hits
        assert copy.generation == generation
