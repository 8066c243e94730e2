"""The fusion strategy: each fusion function against a hand computation, and the strategy over a store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.retrieval import ParameterError, Queries, build_retriever
from rag_hier.retrieval.fusion import FUSIONS, FusionRetriever, register_fusion

DENSE = (np.array([3, 1, 2]), np.array([0.9, 0.5, 0.1]))  # best first
SPARSE = (np.array([2, 4]), np.array([7.0, 1.0]))


def _as_dict(ids: np.ndarray, fused: np.ndarray) -> dict[int, float]:
    return {int(i): float(f) for i, f in zip(ids, fused, strict=True)}


def test_rrf() -> None:
    got = _as_dict(*FUSIONS["rrf"]([DENSE, SPARSE], [1.0, 2.0], 60))
    assert got == pytest.approx({3: 1 / 61, 1: 1 / 62, 2: 1 / 63 + 2 / 61, 4: 2 / 62})


def test_relative_score_is_min_max_scaled() -> None:
    got = _as_dict(*FUSIONS["relative_score"]([DENSE, SPARSE], [0.7, 0.3], 60))
    dense = {3: 1.0, 1: 0.5, 2: 0.0}
    sparse = {2: 1.0, 4: 0.0}
    assert got == pytest.approx({i: 0.7 * dense.get(i, 0) + 0.3 * sparse.get(i, 0) for i in (1, 2, 3, 4)})


def test_dbsf_clips_at_three_sigma() -> None:
    got = _as_dict(*FUSIONS["dbsf"]([DENSE], [1.0], 60))
    mu, sd = DENSE[1].mean(), DENSE[1].std()
    want = {int(i): float(np.clip((s - (mu - 3 * sd)) / (6 * sd), 0, 1)) for i, s in zip(*DENSE, strict=True)}
    assert got == pytest.approx(want)


def test_convex_imputes_the_lowest_score_of_a_list() -> None:
    got = _as_dict(*FUSIONS["convex"]([DENSE, SPARSE], [1.0, 0.5], 60))
    assert got == pytest.approx({3: 0.9 + 0.5 * 1.0, 1: 0.5 + 0.5 * 1.0, 2: 0.1 + 0.5 * 7.0, 4: 0.1 + 0.5 * 1.0})


@pytest.fixture()
def store(tmp_path: Path) -> HierStore:
    s = HierStore.create(tmp_path / "s", model=None)
    rng = np.random.default_rng(0)
    s.add_passages([Passage(f"p{i}", f"d{i}", 0, f"word{i % 4} text") for i in range(12)], rng.standard_normal((12, 6)))
    s.ensure_extension("token-index")
    yield s
    s.close()


def test_strategy_scores_and_a_registered_fusion(store: HierStore) -> None:
    register_fusion("dense-only", lambda lists, weights, k: (lists[0][0], lists[0][1]))
    q = Queries(texts=["word1"], vectors=np.ones((1, 6), np.float32))
    dense = build_retriever("dense", store).run(q, top_k=5)[0].hits
    only = FusionRetriever(store, method="dense-only").run(q, top_k=5)[0].hits
    assert [h.passage_id for h in only] == [h.passage_id for h in dense]
    rrf = build_retriever("fusion", store, method="rrf").run(q, top_k=12)[0].hits
    for h in rrf:
        assert set(h.scores) <= {"dense", "svdr-lexical", "fused"} and h.scores["fused"] == h.score
        assert h.scores.get("svdr-lexical", 1.0) > 0  # a passage sharing no token is no lexical candidate


def test_the_default_is_relative_score_with_equal_weights(store: HierStore) -> None:
    q = Queries(texts=["word1 word2"], vectors=np.ones((1, 6), np.float32))
    default = build_retriever("fusion", store).run(q, top_k=12)[0].hits
    dense = build_retriever("dense", store).run(q, top_k=12)[0].hits
    lexical = [h for h in build_retriever("svdr-lexical", store).run(q, top_k=12)[0].hits if h.score != 0]

    def scaled(hits: list) -> dict[str, float]:
        s = np.array([h.score for h in hits])
        return {h.passage_id: float((h.score - s.min()) / (s.max() - s.min())) for h in hits}

    d, x = scaled(dense), scaled(lexical)
    for h in default:
        assert h.score == pytest.approx(d.get(h.passage_id, 0.0) + x.get(h.passage_id, 0.0))
    assert [h.score for h in default] == sorted((h.score for h in default), reverse=True)


def test_bad_parameters_name_the_field(store: HierStore) -> None:
    with pytest.raises(ParameterError, match="method"):
        FusionRetriever(store, method="average")
    with pytest.raises(ParameterError, match="weights"):
        FusionRetriever(store, weights=(1.0,))
    with pytest.raises(ParameterError, match="fusion"):
        FusionRetriever(store, strategies=("dense", "fusion"))


def test_uses_query_vectors_says_which_strategies_need_dense_query_vectors(store: HierStore) -> None:
    """Adapters embed a query with their framework's model only for strategies that use dense vectors."""
    assert build_retriever("dense", store).uses_query_vectors is True
    assert build_retriever("svdr-lexical", store).uses_query_vectors is False
    assert build_retriever("sparse-embedding", store).uses_query_vectors is False
    assert FusionRetriever(store, strategies=("dense", "svdr-lexical")).uses_query_vectors is True
    text_only = FusionRetriever(store, strategies=("svdr-lexical", "svdr-lexical"))
    assert text_only.uses_query_vectors is False
    # and it is true to its word: a text-only strategy searches with the text alone
    assert text_only.run(Queries(texts=["word1"]), top_k=3)[0].hits


def test_equal_fused_scores_follow_the_components_lists(tmp_path: Path) -> None:
    """Ties of the fused score go to the passage listed first (first component, then the next), not to the lowest
    rowid: so relative-score fusion weighted (1, 0) returns the dense ranking, although the weakest dense candidate
    (scaled to 0) ties with every sparse-only candidate."""
    s = HierStore.create(tmp_path / "ties", model=None)
    e1 = np.eye(4)[1]
    vectors = [np.eye(4)[0], np.eye(4)[2], np.eye(4)[3]] + [
        e1 * (1.0 - 0.1 * i) + np.eye(4)[0] * 0.1 * i for i in range(4)
    ]
    s.add_passages([Passage(f"p{i}", f"d{i}", 0, f"common word{i}") for i in range(7)], np.stack(vectors))
    s.ensure_extension("token-index")
    q = Queries(texts=["common"], vectors=e1[None, :].astype(np.float32))
    dense = [h.passage_id for h in build_retriever("dense", s).run(q, top_k=4)[0].hits]
    assert dense == ["p3", "p4", "p5", "p6"]  # the sparse-only p0..p2 have lower rowids than p6
    fusion = FusionRetriever(
        s, strategies=("dense", "svdr-lexical"), method="relative_score", weights=(1.0, 0.0), depths=(4, 7)
    )
    hits = fusion.run(q, top_k=4)[0].hits
    assert hits[-1].score == 0.0 and hits[-1].scores["svdr-lexical"] > 0  # p6 ties with p0..p2 at 0
    assert [h.passage_id for h in hits] == dense
    s.close()
