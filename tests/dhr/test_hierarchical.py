"""HierarchicalRetriever: restriction to the top-k1 documents, exact fused scores, modes, oracles."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier import DenseRetriever, HierStore, IndexConfig, Passage
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.retrieval import Queries
from rag_hier.retrieval.hierarchical import HierarchicalRetriever
from rag_hier.store.extensions.doc_index import DocumentIndex

QUERIES = ["Deltas form where rivers slow.", "honey from nectar", "What pushes a comet tail?", "magma"]


def oracle(store: HierStore, q: np.ndarray, k1: int | None, lam: float, top_k: int) -> list[tuple[str, float]]:
    """Brute force: every passage's fused score, restricted to the top-k1 documents (None: all)."""
    ext = store.extension("doc-index")
    rows = store.rowids_of()
    recs = store.records(rows.tolist())
    pv = store.index.reconstruct(rows)
    fids = np.array([ext._ids[recs[r]["doc_id"]] for r in rows.tolist()])
    dv = ext._index.reconstruct(fids)
    ps, ds = pv @ q, dv @ q
    keep = np.ones(len(rows), bool)
    if k1 is not None:
        all_fids = np.array(sorted(ext._doc_of))
        doc_scores = ext._index.reconstruct(all_fids) @ q
        top = set(all_fids[np.argsort(-doc_scores, kind="stable")[:k1]].tolist())
        keep = np.isin(fids, list(top))
    fused = ps.astype(np.float64) + lam * ds.astype(np.float64)
    order = [i for i in np.argsort(-fused, kind="stable") if keep[i]][:top_k]
    return [(recs[int(rows[i])]["id"], float(fused[i])) for i in order]


def test_serial_returns_only_passages_of_the_top_k1_documents(store: HierStore) -> None:
    ext = store.extension("doc-index")
    r = HierarchicalRetriever(store, k1=2, lambda_=1.0)
    pq, dq = r.encode_queries(QUERIES)
    _, top = ext.search(dq, 2)
    for hits, fids in zip(r.search_vectors(pq, top_k=10, doc_vectors=dq), top, strict=True):
        allowed = {ext.doc_id(f) for f in fids.tolist()}
        assert hits and {h.doc_id for h in hits} <= allowed
        # every passage of those documents competes (2 docs x 4 passages)
        assert len(hits) == sum(len(store.rowids_of(doc_ids=[d])) for d in allowed)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0, -0.25])
def test_fused_score_is_passage_plus_lambda_document_exactly(store: HierStore, lam: float) -> None:
    ext = store.extension("doc-index")
    r = HierarchicalRetriever(store, k1=3, lambda_=lam)
    pq, _ = r.encode_queries(QUERIES)
    for q, hits in zip(pq, r.search_vectors(pq, top_k=6), strict=True):
        for h in hits:
            assert h.scores["fused"] == h.scores["passage"] + lam * h.scores["document"]
            assert h.score == h.scores["fused"]
            pv = store.index.reconstruct(store.rowids_of(passage_ids=[h.passage_id]))[0]
            assert h.scores["passage"] == pytest.approx(float(pv @ q), abs=1e-5)
            dv = ext._index.reconstruct(np.array([ext._ids[h.doc_id]]))[0]
            assert h.scores["document"] == pytest.approx(float(dv @ q), abs=1e-5)
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("gather_max", [65_536, 0])
@pytest.mark.parametrize(("k1", "lam"), [(1, 0.0), (2, 1.0), (3, 0.5), (6, 2.0)])
def test_serial_matches_brute_force(store: HierStore, k1: int, lam: float, gather_max: int) -> None:
    # gather_max=0: the pool goes through DenseIndex.search(allowed_ids=...) and the widening loop
    r = HierarchicalRetriever(store, k1=k1, lambda_=lam, gather_max=gather_max)
    pq, _ = r.encode_queries(QUERIES)
    for q, hits in zip(pq, r.search_vectors(pq, top_k=7), strict=True):
        want = oracle(store, q, k1, lam, 7)
        assert [h.passage_id for h in hits] == [p for p, _ in want]
        np.testing.assert_allclose([h.score for h in hits], [s for _, s in want], atol=1e-5)


@pytest.mark.parametrize("lam", [0.5, 1.0, -0.5])
def test_parallel_fuses_all_passages(store: HierStore, lam: float) -> None:
    r = HierarchicalRetriever(store, lambda_=lam, mode="parallel")
    pq, _ = r.encode_queries(QUERIES)
    for q, hits in zip(pq, r.search_vectors(pq, top_k=8), strict=True):
        want = oracle(store, q, None, lam, 8)
        assert [h.passage_id for h in hits] == [p for p, _ in want]
        assert all(h.scores["fused"] == h.scores["passage"] + lam * h.scores["document"] for h in hits)


def test_k1_covering_all_documents_with_lambda_0_equals_flat_search(store: HierStore) -> None:
    flat = DenseRetriever(store).search(QUERIES, top_k=12)
    for k1 in (store.count_documents(), 1000):
        hier = HierarchicalRetriever(store, k1=k1, lambda_=0.0).search(QUERIES, top_k=12)
        for f, h in zip(flat, hier, strict=True):
            assert [x.passage_id for x in f] == [x.passage_id for x in h]
            np.testing.assert_allclose([x.score for x in f], [x.score for x in h], atol=1e-6)


def test_large_pools_take_the_id_selector_path_and_stay_exact(tmp_path, dhr_encoder: DenseEncoder, docs) -> None:
    # exact_filter_max=2 forces FAISS id-selector search and the widening loop (pools of 10+ passages)
    store = HierStore.create(tmp_path / "s", encoder=dhr_encoder, index=IndexConfig(exact_filter_max=2))
    store.add_documents(docs, max_passage_words=0)
    store.add_extension(DocumentIndex())
    for mode, k1 in (("serial", 3), ("parallel", 1)):
        r = HierarchicalRetriever(store, k1=k1, lambda_=1.0, mode=mode, gather_max=0)  # type: ignore[arg-type]
        pq, _ = r.encode_queries(QUERIES)
        for q, hits in zip(pq, r.search_vectors(pq, top_k=2), strict=True):
            assert [h.passage_id for h in hits] == [
                p for p, _ in oracle(store, q, k1 if mode == "serial" else None, 1.0, 2)
            ]
    store.close()


def test_filters_and_document_aggregation(store: HierStore) -> None:
    r = HierarchicalRetriever(store, k1=2)
    hits = r.search("rivers of ice", top_k=10, filters={"field": "meta.topic", "operator": "==", "value": "bees"})
    assert hits and {h.doc_id for h in hits} == {"bees"}
    docs = r.search("rivers of ice", top_k=4, aggregate="doc")
    assert len(docs) == 4 and len({h.doc_id for h in docs}) == 4
    assert r.search(["a", "b"], top_k=3) and r.search([], top_k=3) == []


def test_search_reports_the_work_done(store: HierStore) -> None:
    r = HierarchicalRetriever(store, k1=2)
    (result,) = r.run(Queries(texts=["honey"]), top_k=3)
    assert result.stats == {"documents_searched": 2, "passages_scored": 8}  # 4 passages per document
    assert len(result.hits) == 3


def test_errors_name_the_parameter(store: HierStore, tmp_path, dhr_encoder: DenseEncoder) -> None:
    with pytest.raises(ValueError, match="k1"):
        HierarchicalRetriever(store, k1=0)
    with pytest.raises(ValueError, match="lambda_"):
        HierarchicalRetriever(store, lambda_=float("nan"))
    with pytest.raises(ValueError, match="mode"):
        HierarchicalRetriever(store, mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        HierarchicalRetriever(store).search("x", top_k=0)
    plain = HierStore.create(tmp_path / "plain", encoder=dhr_encoder)
    plain.add_passages([Passage("a#0", "a", 0, "alpha")])
    with pytest.raises(StoreError, match="--hierarchical"):
        HierarchicalRetriever(plain).search("alpha")
    plain.close()


def test_distinct_document_encoder_is_used_for_document_queries(tmp_path, dhr_encoder, doc_model_path, docs) -> None:
    store = HierStore.create(tmp_path / "s", encoder=dhr_encoder)
    store.add_documents(docs, max_passage_words=0)
    store.add_extension(DocumentIndex("summary", model=doc_model_path))
    r = HierarchicalRetriever(store, k1=2, lambda_=1.0)
    pq, dq = r.encode_queries(QUERIES)
    assert pq.shape[1] == 32 and dq.shape[1] == 16
    hits = r.search(QUERIES[0], top_k=3)
    assert all(h.scores["fused"] == h.scores["passage"] + h.scores["document"] for h in hits)
    store.close()


def test_corpus_without_sections(tmp_path, dhr_encoder: DenseEncoder) -> None:
    store = HierStore.create(tmp_path / "s", encoder=dhr_encoder)
    store.add_passages([Passage(f"d{i}#{j}", f"d{i}", j, f"text {i} {j}") for i in range(5) for j in range(3)])
    store.add_extension(DocumentIndex("summary"))
    hits = HierarchicalRetriever(store, k1=2).search("text 3 1", top_k=4)
    assert len(hits) == 4 and len({h.doc_id for h in hits}) <= 2
    store.close()


@pytest.mark.real_model
def test_real_model_finds_the_passage_through_its_document(tmp_path, real_model_path: str, docs) -> None:
    store = HierStore.create(tmp_path / "s", encoder=DenseEncoder(real_model_path, device="cpu"))
    store.add_documents(docs, max_passage_words=0)
    store.add_extension(DocumentIndex())
    hits = HierarchicalRetriever(store, k1=2, lambda_=0.5).search("What pushes the tail of a comet away?", top_k=3)
    assert hits[0].doc_id == "comets"
    assert any("Solar wind" in h.text for h in hits)
    store.close()
