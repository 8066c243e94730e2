"""The tree as a store extension: built from the store, follows writes, persists, beam search = exhaustive."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier import Document, HierStore, Passage
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.retrieval import Queries
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.retrieval.tree import TreeRetriever
from rag_hier.store.extensions.tree import TreeExtension


@pytest.fixture(scope="module")
def encoder(tiny_model_path: str) -> DenseEncoder:
    return DenseEncoder(tiny_model_path, device="cpu")


@pytest.fixture()
def store(tmp_path, encoder: DenseEncoder, small_corpus: dict[str, str]) -> HierStore:
    s = HierStore.create(tmp_path / "store", encoder=encoder)
    s.add_documents([Document(k, "", (v,)) for k, v in small_corpus.items()], max_passage_words=0)
    yield s
    s.close()


def _ids(hits) -> list[str]:
    return [h.passage_id for h in hits]


def test_build_sync_reopen_and_exhaustive_beam(store: HierStore, encoder: DenseEncoder) -> None:
    store.add_extension(TreeExtension(branching=4))
    ext = store.extension("tree")
    assert isinstance(ext, TreeExtension) and len(ext.tree) == 48
    assert {"tree.safetensors", "tree.json"} <= set(store.manifest["files"])
    # new passages are routed, deleted ones leave, without rebuilding the centroids
    centroids = [c.copy() for c in ext.tree.centroids]
    store.add_documents([Document("new1", "", ("volcano glacier harbor castle",)), Document("new2", "", ("music",))])
    store.delete_documents(["d0", "d1"])
    assert len(ext.tree) == 48 and ext.tree.routed_since_build == 2 and ext.tree.removed_since_build == 2
    assert all(np.array_equal(a, b) for a, b in zip(centroids, ext.tree.centroids, strict=True))
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=encoder)
    tree = again.extension("tree").tree
    assert len(tree) == 48 and set(tree.item_ids.tolist()) == set(again.rowids_of().tolist())
    queries = ["volcano glacier harbor", "apple banana", "music painting science"]
    wide = max(tree.level_sizes)
    tree_results = TreeRetriever(again, beam=wide).run(Queries(texts=queries), top_k=5)
    flat_hits = DenseRetriever(again).search(queries, top_k=5)
    for t, f in zip(tree_results, flat_hits, strict=True):
        assert _ids(t.hits) == _ids(f)
        assert t.stats["passages_scored"] == 48.0 and t.stats["fraction_scored"] == 1.0
        assert t.hits[0].scores == {}  # counts are statistics of the query, not scores of a hit
    narrow = TreeRetriever(again, beam=1).run(Queries(vectors=again.encode_queries(queries)), top_k=5)
    assert all(r.stats["passages_scored"] < 48 and r.stats["leaves_visited"] == 1 for r in narrow)
    docs = TreeRetriever(again, beam=wide).search("apple banana", top_k=3, aggregate="doc")
    assert len({h.doc_id for h in docs}) == 3
    again.close()


def test_rollback_restores_the_tree(store: HierStore) -> None:
    store.add_extension(TreeExtension(branching=4))
    before = store.extension("tree").tree.item_ids.copy()
    with pytest.raises(RuntimeError), store.batch():
        store.add_documents([Document("x", "", ("comet planet",))])
        raise RuntimeError("boom")
    assert np.array_equal(np.sort(store.extension("tree").tree.item_ids), np.sort(before))


def test_empty_tree_is_built_from_the_first_passages(tmp_path) -> None:
    s = HierStore.create(tmp_path / "ext", model=None, dimension=4)
    s.add_extension(TreeExtension(branching=2))
    rng = np.random.default_rng(0)
    s.add_passages([Passage(f"p{i}", "doc", i, f"t{i}") for i in range(10)], rng.standard_normal((10, 4)))
    tree = s.extension("tree").tree
    assert len(tree) == 10 and tree.depth >= 1 and tree.routed_since_build == 0
    s.close()


def test_search_without_tree_is_a_clear_error(store: HierStore) -> None:
    with pytest.raises(StoreError, match="--tree"):
        TreeRetriever(store).search("apple")
    with pytest.raises(ValueError, match="beam"):
        TreeRetriever(store, beam=0)
