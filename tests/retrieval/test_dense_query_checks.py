"""DenseRetriever.search_vectors checks its query vectors and ``top_k`` as the general path does, on every input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.retrieval import DenseRetriever
from rag_hier.retrieval.base import Queries

D = 6


@pytest.fixture
def retriever(tmp_path: Path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, D)).astype(np.float32)
    store = HierStore.create(tmp_path / "s", model=None, dimension=D)
    store.add_passages([Passage(f"p{i}", f"d{i}", 0, f"text {i}") for i in range(30)], x)
    yield DenseRetriever(store)
    store.close()


def _ids(hit_lists):
    return [[(h.passage_id, h.score, h.rank) for h in hits] for hits in hit_lists]


@pytest.mark.parametrize(
    "queries",
    [
        np.linspace(-1, 1, D, dtype=np.float32)[None, :],
        np.linspace(-1, 1, 2 * D, dtype=np.float32).reshape(D, 2).T[:1],  # a non-contiguous view
        np.linspace(-1, 1, D)[None, :],  # float64
        np.linspace(-1, 1, 3 * D, dtype=np.float32).reshape(3, D),
        [np.linspace(-1, 1, D).tolist()],
    ],
)
@pytest.mark.parametrize("top_k", [1, 7, np.int64(7), 100])
def test_search_vectors_equals_run(retriever: DenseRetriever, queries, top_k) -> None:
    got = _ids(retriever.search_vectors(queries, top_k))
    want = _ids(r.hits for r in retriever.run(Queries(vectors=np.asarray(queries)), top_k))
    assert got == want


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("n", [1, 3])
def test_non_finite_queries_are_refused(retriever: DenseRetriever, bad: float, n: int) -> None:
    q = np.ones((n, D), np.float32)
    q[-1, 3] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        retriever.search_vectors(q, 5)


@pytest.mark.parametrize("top_k", [0, -1, True, 2.0, "3"])
def test_bad_top_k_is_refused(retriever: DenseRetriever, top_k) -> None:
    with pytest.raises(ValueError, match="top_k"):
        retriever.search_vectors(np.ones((1, D), np.float32), top_k)


def test_wrong_dimension_is_refused(retriever: DenseRetriever) -> None:
    with pytest.raises(ValueError, match="dimensions"):
        retriever.search_vectors(np.ones((1, D + 1), np.float32), 5)
