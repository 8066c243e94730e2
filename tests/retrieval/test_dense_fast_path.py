"""DenseRetriever's unfiltered passage search (its own short path, in or out of a read block) = the general path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.retrieval import DenseRetriever
from rag_hier.retrieval.base import READ_BLOCK_QUERIES, Queries, Retriever

D = 8


def _general(retriever: DenseRetriever, queries: np.ndarray, top_k: int) -> list[list[tuple[str, float, int]]]:
    """The base class's path (rank, then the shared sort and one read), as every other strategy runs it."""
    with retriever.read_block():
        results = Retriever._run_prepared(retriever, queries, len(queries), top_k, None, "passage")
    return [[(h.passage_id, h.score, h.rank) for h in r.hits] for r in results]


def _short(retriever: DenseRetriever, queries: np.ndarray, top_k: int) -> list[list[tuple[str, float, int]]]:
    return [[(h.passage_id, h.score, h.rank) for h in hits] for hits in retriever.search_vectors(queries, top_k)]


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_short_path_matches_the_general_path(tmp_path: Path, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    x = rng.standard_normal((n, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # unit vectors: a passage is its own vector's best match
    x[10:20] = x[10]  # ten identical vectors: tied scores that FAISS may return in any order
    x[30:33] = x[31]
    index = {"kind": kind, "nlist": 4, "nprobe": 4, "train_min": 40} if kind == "ivf" else {"kind": kind}
    store = HierStore.create(tmp_path / kind, model=None, dimension=D, index=index)
    store.add_passages([Passage(f"p{i}", f"d{i // 5}", i % 5, f"text {i}") for i in range(n)], x)
    store.delete_passages(["p12", "p31", "p40"])  # tombstones (flat, hnsw) or removed vectors (ivf)
    retriever = DenseRetriever(store)
    queries = np.vstack([x[10], x[31], rng.standard_normal((4, D)).astype(np.float32)])
    for top_k in (1, 5, 12, 100):  # 100 > live vectors: padded rows
        short, general = _short(retriever, queries, top_k), _general(retriever, queries, top_k)
        assert short == general
        ran = retriever.run(Queries(vectors=queries), top_k)  # the adapters' entry: the same hits
        assert [[(h.passage_id, h.score, h.rank) for h in r.hits] for r in ran] == general
        with store.reading():  # inside a read block the short path reads within the block's transaction
            assert _short(retriever, queries, top_k) == general
        if kind == "flat" and top_k >= 9:  # all nine tied passages come back: ordered by insertion
            assert [h[0] for h in short[0][:9]] == [f"p{i}" for i in range(10, 20) if i != 12]
    store.close()


def test_filters_and_documents_take_the_general_path(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, D)).astype(np.float32)
    store = HierStore.create(tmp_path / "s", model=None, dimension=D)
    store.add_passages([Passage(f"p{i}", f"d{i // 4}", i % 4, f"text {i}", meta={"i": i}) for i in range(20)], x)
    retriever = DenseRetriever(store)
    hits = retriever.search_vectors(x[:1], top_k=5, filters={"field": "meta.i", "operator": ">=", "value": 10})[0]
    assert hits and all(h.meta["i"] >= 10 for h in hits)
    docs = retriever.search_vectors(x[:1], top_k=3, aggregate="doc")[0]
    assert len({h.doc_id for h in docs}) == 3
    assert retriever.search_vectors(x[:1], top_k=5, filters={})[0] == retriever.search_vectors(x[:1], top_k=5)[0]
    store.delete_all()
    assert retriever.search_vectors(x[:2], top_k=5) == [[], []]
    store.close()


def test_a_batch_reading_more_rows_than_one_statement_binds(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1500, D)).astype(np.float32)
    store = HierStore.create(tmp_path / "big", model=None, dimension=D)
    store.add_passages([Passage(f"p{i}", f"d{i}", 0, f"text {i}") for i in range(1500)], x)
    store.close()
    reader = HierStore.open(tmp_path / "big", read_only=True)
    retriever = DenseRetriever(reader)
    queries = rng.standard_normal((200, D)).astype(np.float32)
    statements: list[str] = []
    retriever.search_vectors(queries[:1], 1)  # the first search of a generation runs in a read transaction
    reader._core.db.set_trace_callback(statements.append)
    try:
        short = _short(retriever, queries, 30)
    finally:
        reader._core.db.set_trace_callback(None)
    assert len({h[0] for hits in short for h in hits}) > 900  # more rows than one statement binds
    groups = -(-len(queries) // READ_BLOCK_QUERIES)  # each group of queries reads its rows on its own
    assert groups <= len(statements) <= 2 * groups and "BEGIN" not in statements, statements  # no fallback
    assert short == _general(retriever, queries, 30)
    reader.close()
