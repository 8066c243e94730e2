"""The strategy reference in Milvus: its migration round trip, and the searches that run inside Milvus.

The pair (the contract's strategy reference, a local store with every extension, and its copy in Milvus Lite or on
the server of ``$RAG_HIER_TEST_MILVUS_URI``) comes from ``tests/milvus/conftest.py``; that every registered strategy
returns the local store's top 10 on it is the contract suite's ``SearchContract``
(``tests/milvus/test_contract_milvus.py``). Skips without ``pymilvus``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pymilvus")

from rag_hier import HierStore
from rag_hier.retrieval import strategy
from rag_hier.store.extensions.tree import TreeExtension
from rag_hier.store.milvus import MilvusStore
from rag_hier.store.milvus.migrate import milvus_to_local
from tests.conftest import skip_without
from tests.store.contract.search import PARAMS, STRATEGY_FILTERS, TEXTS
from tests.store.contract.search import strategy_queries as _queries


@pytest.fixture()
def pair(strategy_pair: tuple[Any, Any]) -> tuple[HierStore, MilvusStore]:
    """The session's strategy pair (tests/milvus/conftest.py)."""
    return strategy_pair


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


@pytest.mark.parametrize(
    ("name", "capability"),
    [
        ("token-index", "sparse_vectors"),
        ("sparse-embeddings", "sparse_vectors"),
        ("svdr-vectors", "sparse_vectors"),
        ("tree", "nullable_fields"),
        ("ehi", "nullable_fields"),
    ],
)
def test_an_extension_is_kept_in_a_milvus_field_exactly_where_the_server_can(
    pair, milvus_capabilities, name: str, capability: str
) -> None:
    """Sparse rows need sparse vectors (Milvus 2.4), leaf fields nullable fields (2.5); without, the extension's
    files are in ``C__files`` and its searches the client-side ones (their top 10: the contract suite)."""
    _, remote = pair
    can = getattr(milvus_capabilities, capability)
    assert remote.extension_in_engine(name) is can
    files = remote.info()["extensions"][name]["files"]
    assert bool(files) is not can or capability == "nullable_fields"  # a tree keeps its centroids in a file
    if not can:
        assert remote.extension_files(name)  # the whole extension, read back from C__files


def test_sparse_and_leaf_searches_run_inside_milvus(pair, vocab, monkeypatch, milvus_capabilities) -> None:
    """The migrated token index, sparse embeddings and SVDR E(d) vectors are a Milvus sparse field, the tree / EHI
    leaves passage fields: searching them never touches client-side rows or vectors (SVDR full / α are one sparse
    search; β+rerank reads only its candidates' E(d), by rowid), and tree / EHI end in a leaf-filtered search."""
    from rag_hier.index.sparse import SparseRowIndex
    from rag_hier.store.extensions.ehi import EHIExtension

    skip_without(milvus_capabilities, "sparse_vectors", "nullable_fields")
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
            _queries(remote, TEXTS), top_k=10, filters=STRATEGY_FILTERS[1]
        )
        assert all(r.hits for r in results), name
    assert read_by_rowid and max(read_by_rowid) <= 4 * len(TEXTS)  # the re-rank's candidates only
    assert remote.generation == generation  # searching wrote nothing
    assert any(w.startswith("tree_leaf in [") for w in filters_seen)
    assert any(w.startswith("array_contains_any(ehi_leaves, [") for w in filters_seen)
