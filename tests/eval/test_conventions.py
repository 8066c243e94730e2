"""BEIR/MTEB conventions: metric values equal BEIR's EvaluateRetrieval.evaluate, ir_measures and MTEB's MRR.

Oracles (each test skips when its package is absent; all three are in the ``test`` extra):

- ``beir.retrieval.evaluation.EvaluateRetrieval.evaluate`` itself (it pops identical ids, then runs
  pytrec_eval, and rounds every mean to 5 decimals: our means, rounded the same way, must be equal);
- ``ir_measures`` on the same run with the identical ids popped (unrounded: equal within 1e-9);
- MTEB's own ``mrr`` (ties broken by id, descending, as trec_eval does) for MRR@k.

Runs are hand-made (ties, identical ids, grade-0 judgements) and random (rounded scores: many ties).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from rag_hier.eval import IdenticalIds, evaluate, evaluate_per_query, remove_identical_ids

KS = [1, 3, 5, 10, 100]
TREC = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P"}


def _ours_for_beir(run, qrels):
    names = [f"{kind}@{k}" for kind in TREC for k in KS]
    return evaluate(run, qrels, names)


def _beir_flat(qrels, run):
    from beir.retrieval.evaluation import EvaluateRetrieval

    ndcg, _map, recall, precision = EvaluateRetrieval.evaluate(
        copy.deepcopy(qrels), copy.deepcopy(run), KS, ignore_identical_ids=True
    )
    flat = {**ndcg, **_map, **recall, **precision}
    return {f"{kind}@{k}": flat[f"{label}@{k}"] for kind, label in TREC.items() for k in KS}


def _hand_made():
    qrels = {
        "q1": {"a": 1, "c": 2, "z": 1},  # z never retrieved
        "q2": {"q2": 1, "b": 1},  # the query's own id is judged relevant: BEIR still removes the hit
        "q3": {"d": 0, "e": 1},  # grade 0: judged non-relevant
        "q4": {"x": 1},
    }
    run = {
        "q1": {"q1": 9.0, "a": 0.5, "b": 0.5, "c": 0.5, "d": 0.1},  # identical id on top, then a 3-way tie
        "q2": {"q2": 1.0, "a": 1.0, "b": 1.0},  # ties across the identical id
        "q3": {"d": 0.7, "e": 0.7, "f": 0.7, "g": 0.2},
        "q4": {"y": 0.3, "x": 0.3},
        "q9": {"x": 1.0},  # not judged: ignored by everyone
    }
    return qrels, run


def _random(seed: int, *, n_queries: int = 25, n_docs: int = 60):
    rng = np.random.default_rng(seed)
    docs = [f"d{i:02d}" for i in range(n_docs)]
    qrels, run = {}, {}
    for i in range(n_queries):
        qid = f"q{i}"
        judged = rng.choice(n_docs, size=int(rng.integers(1, 8)), replace=False)
        qrels[qid] = {docs[int(j)]: int(rng.integers(0, 3)) for j in judged}
        if not any(g > 0 for g in qrels[qid].values()):
            qrels[qid][docs[int(judged[0])]] = 1
        retrieved = rng.choice(n_docs, size=int(rng.integers(1, 40)), replace=False)
        scores = {docs[int(j)]: float(np.round(rng.random(), 1)) for j in retrieved}  # 11 levels: many ties
        if i % 3 == 0:
            scores[qid] = 2.0  # the query's own id, at rank 1
        run[qid] = scores
    return qrels, run


CASES = [_hand_made(), *(_random(s) for s in range(5))]


@pytest.mark.parametrize(("qrels", "run"), CASES)
def test_equal_to_beir_evaluate(qrels, run) -> None:
    pytest.importorskip("beir")
    ours = _ours_for_beir(run, qrels)
    theirs = _beir_flat(qrels, run)
    for name, value in theirs.items():
        assert round(ours[name], 5) == pytest.approx(value, abs=1e-12), name


@pytest.mark.parametrize(("qrels", "run"), CASES)
def test_equal_to_ir_measures(qrels, run) -> None:
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import AP, RR, P, R, Success, nDCG

    popped, _ = remove_identical_ids(run)
    judged = {q: r for q, r in qrels.items() if q in popped}
    measures = {}
    for k in KS:
        measures |= {
            f"ndcg@{k}": nDCG @ k,
            f"map@{k}": AP @ k,
            f"recall@{k}": R @ k,
            f"precision@{k}": P @ k,
            f"success@{k}": Success @ k,
        }
    measures["mrr@1000"] = RR  # trec_eval's recip_rank (no cut-off) through ir_measures' pytrec_eval provider
    ours = evaluate_per_query(run, judged, list(measures))
    for name, measure in measures.items():
        ref = {m.query_id: m.value for m in ir_measures.iter_calc([measure], judged, popped)}
        for qid in judged:
            assert ours[name][qid] == pytest.approx(ref.get(qid, 0.0), abs=1e-9), (name, qid)


@pytest.mark.parametrize(("qrels", "run"), CASES)
def test_mrr_equal_to_mteb(qrels, run) -> None:
    metrics = pytest.importorskip("mteb._evaluators.retrieval_metrics")  # MTEB's own MRR (a private module)
    mrr = metrics.mrr

    popped, _ = remove_identical_ids({q: r for q, r in run.items() if q in qrels})
    judged = {q: r for q, r in qrels.items() if q in popped}
    ours = evaluate_per_query(run, judged, [f"mrr@{k}" for k in KS])
    theirs = mrr(judged, popped, KS)
    qids = list(popped)  # MTEB lists values in the run's query order
    for k in KS:
        assert len(theirs[f"MRR@{k}"]) == len(qids)
        for qid, value in zip(qids, theirs[f"MRR@{k}"], strict=True):
            if qid in judged:
                assert ours[f"mrr@{k}"][qid] == pytest.approx(value, abs=1e-12), (k, qid)


def test_identical_ids_are_removed_by_default() -> None:
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"q1": 1.0, "a": 0.5}}
    assert evaluate(run, qrels, ["mrr@10", "precision@1"]) == {"mrr@10": 1.0, "precision@1": 1.0}
    kept = evaluate(run, qrels, ["mrr@10", "precision@1"], ignore_identical_ids=False)
    assert kept == {"mrr@10": 0.5, "precision@1": 0.0}


def test_remove_identical_ids_counts_and_keeps_order() -> None:
    run = {"q1": {"x": 3.0, "q1": 2.0, "y": 1.0}, "q2": {"a": 1.0}, "q3": {"q3": 1.0}}
    out, removed = remove_identical_ids(run)
    assert removed == IdenticalIds(hits=2, queries=2)
    assert list(out["q1"]) == ["x", "y"]
    assert out["q3"] == {}
    assert run["q1"]["q1"] == 2.0  # the input is not changed


def test_query_left_without_hits_counts_as_zero_like_beir() -> None:
    # q2's only hit is its own id: after the removal it has an empty ranking, which scores 0 (BEIR too)
    pytest.importorskip("beir")
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}, "q2": {"q2": 1.0}}
    assert evaluate(run, qrels, ["ndcg@10"])["ndcg@10"] == pytest.approx(0.5)
    assert _beir_flat(qrels, run)["ndcg@10"] == pytest.approx(0.5)


def test_judged_query_missing_from_the_run_counts_as_zero_unlike_beir() -> None:
    # The one documented difference: a judged query absent from the run is left out of BEIR's (and
    # MTEB's) mean, as plain trec_eval does; rag-hier counts it as 0, as trec_eval -c does. `rag-hier
    # eval` always puts every judged query it searched into the run, so its figures are BEIR's.
    pytest.importorskip("beir")
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}}
    assert evaluate(run, qrels, ["ndcg@10"])["ndcg@10"] == pytest.approx(0.5)
    assert _beir_flat(qrels, run)["ndcg@10"] == pytest.approx(1.0)


def test_per_query_means_are_the_means() -> None:
    qrels, run = _random(11)
    per = evaluate_per_query(run, qrels, ["ndcg@10", "mrr@10"])
    means = evaluate(run, qrels, ["ndcg@10", "mrr@10"])
    for name, values in per.items():
        assert math.isclose(sum(values.values()) / len(values), means[name])
