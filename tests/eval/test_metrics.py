"""IR metrics (oracle tests against hand-computed values and pytrec_eval) and TREC run files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rag_hier.errors import CorpusFormatError, RagHierError
from rag_hier.eval import (
    DEFAULT_METRICS,
    evaluate,
    evaluate_per_query,
    hits_to_run,
    metric_list,
    parse_metric,
    read_run,
    write_run,
)
from rag_hier.retrieval.hit import Hit


def log2(x: float) -> float:
    return math.log(x, 2)


# ------------------------------------------------------------------------------------------------------
# hand-computed values
# ------------------------------------------------------------------------------------------------------
def test_binary_relevance() -> None:
    qrels = {"q": {"a": 1, "c": 1, "z": 1}}  # z is never retrieved
    run = {"q": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}}
    scores = evaluate(run, qrels, ["ndcg@10", "recall@10", "recall@1", "mrr@10", "precision@2", "map@10"])
    dcg = 1 / log2(2) + 1 / log2(4)
    idcg = 1 / log2(2) + 1 / log2(3) + 1 / log2(4)
    assert scores["ndcg@10"] == pytest.approx(dcg / idcg)
    assert scores["ndcg@10"] == pytest.approx(0.703918, abs=1e-6)
    assert scores["recall@10"] == pytest.approx(2 / 3)
    assert scores["recall@1"] == pytest.approx(1 / 3)
    assert scores["mrr@10"] == pytest.approx(1.0)
    assert scores["precision@2"] == pytest.approx(0.5)
    assert scores["map@10"] == pytest.approx((1 / 1 + 2 / 3) / 3)


def test_first_relevant_at_rank_three() -> None:
    qrels = {"q": {"a": 1}}
    run = {"q": {"b": 0.9, "d": 0.8, "a": 0.7, "e": 0.1}}
    scores = evaluate(run, qrels, ["mrr@10", "mrr@3", "mrr@2", "ndcg@10", "ndcg@2", "recall@2", "recall@3"])
    assert scores["mrr@10"] == pytest.approx(1 / 3)
    assert scores["mrr@3"] == pytest.approx(1 / 3)
    assert scores["mrr@2"] == 0.0  # the cut-off applies (trec_eval's recip_rank has none)
    assert scores["ndcg@10"] == pytest.approx(1 / log2(4))
    assert scores["ndcg@2"] == 0.0
    assert scores["recall@2"] == 0.0
    assert scores["recall@3"] == 1.0


def test_graded_relevance_uses_linear_gains() -> None:
    qrels = {"q": {"a": 1, "b": 2, "c": 0}}  # c is judged but not relevant
    run = {"q": {"a": 0.9, "c": 0.8, "b": 0.7}}
    scores = evaluate(run, qrels, ["ndcg@10", "ndcg@1", "recall@2", "mrr@10"])
    dcg = 1 / log2(2) + 0 / log2(3) + 2 / log2(4)
    idcg = 2 / log2(2) + 1 / log2(3)
    assert scores["ndcg@10"] == pytest.approx(dcg / idcg)
    assert scores["ndcg@10"] == pytest.approx(0.760188, abs=1e-6)
    assert scores["ndcg@1"] == pytest.approx(1 / 2)
    assert scores["recall@2"] == pytest.approx(1 / 2)  # grade 0 does not count as relevant
    assert scores["mrr@10"] == pytest.approx(1.0)


def test_perfect_and_empty_runs() -> None:
    qrels = {"q": {"a": 2, "b": 1}}
    assert evaluate({"q": {"a": 2.0, "b": 1.0}}, qrels) == {m: pytest.approx(1.0) for m in DEFAULT_METRICS}
    assert evaluate({"q": {}}, qrels) == {m: 0.0 for m in DEFAULT_METRICS}
    assert evaluate({}, qrels) == {m: 0.0 for m in DEFAULT_METRICS}


def test_query_missing_from_run_counts_as_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"q1": {"a": 1.0}, "q3": {}}  # q2 missing, q3 retrieved nothing
    scores = evaluate(run, qrels, ["ndcg@10", "recall@10", "mrr@10"])
    assert scores == {
        "ndcg@10": pytest.approx(1 / 3),
        "recall@10": pytest.approx(1 / 3),
        "mrr@10": pytest.approx(1 / 3),
    }
    per_query = evaluate_per_query(run, qrels, ["mrr@10"])
    assert per_query == {"mrr@10": {"q1": 1.0, "q2": 0.0, "q3": 0.0}}


def test_run_queries_without_qrels_are_ignored() -> None:
    qrels = {"q1": {"a": 1}, "empty": {}}  # a query without judgements does not count either
    run = {"q1": {"a": 1.0}, "q9": {"x": 1.0}, "empty": {"y": 1.0}}
    assert evaluate(run, qrels, ["ndcg@10", "mrr@10"]) == {"ndcg@10": 1.0, "mrr@10": 1.0}
    assert set(evaluate_per_query(run, qrels, ["ndcg@10"])["ndcg@10"]) == {"q1"}


def test_no_judgements_at_all() -> None:
    with pytest.raises(RagHierError, match="no relevance judgements"):
        evaluate({"q": {"a": 1.0}}, {})
    with pytest.raises(RagHierError, match="no relevance judgements"):
        evaluate({"q": {"a": 1.0}}, {"q": {}})


def test_metric_names_keep_their_spelling_and_order() -> None:
    scores = evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["MRR@10", "nDCG@5", "P@1", "hits@3"])
    assert list(scores) == ["MRR@10", "nDCG@5", "P@1", "hits@3"]
    assert all(v == 1.0 for v in scores.values())


# ------------------------------------------------------------------------------------------------------
# ties: trec_eval ranks equal scores by document id, descending; every measure must agree
# ------------------------------------------------------------------------------------------------------
def test_ties_are_broken_like_trec_eval() -> None:
    run = {"q": {"a": 1.0, "b": 1.0}}  # trec_eval ranks b first
    first_is_b = evaluate(run, {"q": {"b": 1}}, ["ndcg@1", "precision@1", "mrr@1", "mrr@10"])
    assert first_is_b == {"ndcg@1": 1.0, "precision@1": 1.0, "mrr@1": 1.0, "mrr@10": 1.0}
    first_is_a = evaluate(run, {"q": {"a": 1}}, ["ndcg@1", "precision@1", "mrr@1", "mrr@10"])
    assert first_is_a == {"ndcg@1": 0.0, "precision@1": 0.0, "mrr@1": 0.0, "mrr@10": 0.5}


def test_mrr_never_decreases_with_the_cut_off() -> None:
    rng = np.random.default_rng(7)
    docs = [f"d{i:02d}" for i in range(30)]
    for trial in range(20):
        scores = rng.integers(0, 4, size=len(docs)).astype(float)  # many ties
        run = {"q": dict(zip(docs, scores.tolist(), strict=True))}
        qrels = {"q": {docs[int(i)]: 1 for i in rng.choice(len(docs), size=2, replace=False)}}
        values = [evaluate(run, qrels, [f"mrr@{k}"])[f"mrr@{k}"] for k in range(1, 31)]
        assert values == sorted(values), trial


def _reference_ranking(scores: dict[str, float]) -> list[str]:
    """trec_eval's order: score descending, then document id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def _reference_mrr(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], k: int) -> float:
    total = 0.0
    for qid, rel in qrels.items():
        for rank, doc in enumerate(_reference_ranking(run.get(qid, {}))[:k], start=1):
            if rel.get(doc, 0) > 0:
                total += 1 / rank
                break
    return total / len(qrels)


def test_oracle_against_pytrec_eval_and_reference_mrr() -> None:
    import pytrec_eval

    rng = np.random.default_rng(3)
    docs = [f"doc{i}" for i in range(40)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(15):
        qid = f"q{q}"
        judged = rng.choice(len(docs), size=int(rng.integers(1, 6)), replace=False)
        qrels[qid] = {docs[int(i)]: int(rng.integers(0, 3)) for i in judged}
        if q % 5 == 4:
            continue  # some queries are missing from the run
        retrieved = rng.choice(len(docs), size=int(rng.integers(0, 30)), replace=False)
        run[qid] = {docs[int(i)]: float(np.round(rng.random(), 2)) for i in retrieved}  # rounding makes ties
    names = {
        "ndcg@10": "ndcg_cut_10",
        "recall@10": "recall_10",
        "recall@100": "recall_100",
        "map@5": "map_cut_5",
        "precision@3": "P_3",
        "success@5": "success_5",
    }
    judged_qrels = {q: r for q, r in qrels.items() if r}
    ours = evaluate_per_query(run, qrels, [*names, "mrr@10", "mrr@3"])
    for name, measure in names.items():
        evaluator = pytrec_eval.RelevanceEvaluator(judged_qrels, {measure})
        ref = evaluator.evaluate({q: r for q, r in run.items() if r})
        for qid in judged_qrels:
            assert ours[name][qid] == pytest.approx(ref.get(qid, {}).get(measure, 0.0)), (name, qid)
    for k in (3, 10):
        mean = sum(ours[f"mrr@{k}"].values()) / len(judged_qrels)
        assert mean == pytest.approx(_reference_mrr(run, judged_qrels, k))


# ------------------------------------------------------------------------------------------------------
# metric names
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ndcg@10", ("ndcg", 10)),
        ("nDCG@10", ("ndcg", 10)),
        (" recall@100 ", ("recall", 100)),
        ("mrr@10", ("mrr", 10)),
        ("map@1000", ("map", 1000)),
        ("precision@5", ("precision", 5)),
        ("P@5", ("precision", 5)),
        ("success@3", ("success", 3)),
        ("hits@3", ("success", 3)),
    ],
)
def test_parse_metric(name: str, expected: tuple[str, int]) -> None:
    assert parse_metric(name) == expected


@pytest.mark.parametrize(
    "name", ["ndcg", "ndcg@", "@10", "bleu@4", "ndcg@ten", "ndcg@-1", "ndcg@10@20", "", "recall 10"]
)
def test_parse_metric_rejects_unknown_names(name: str) -> None:
    with pytest.raises(RagHierError, match="unknown metric") as exc:
        parse_metric(name)
    assert repr(name) in str(exc.value)
    assert "ndcg@K" in str(exc.value)  # says what is allowed


@pytest.mark.parametrize("name", ["ndcg@0", "recall@0", "mrr@0", "precision@00"])
def test_parse_metric_rejects_zero_cut_off(name: str) -> None:
    # trec_eval aborts the process on a zero cut-off, so this must never reach it
    with pytest.raises(RagHierError, match="K must be >= 1"):
        parse_metric(name)
    with pytest.raises(RagHierError):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, [name])


def test_metric_list() -> None:
    assert metric_list(None) == DEFAULT_METRICS
    assert DEFAULT_METRICS == ("ndcg@10", "recall@10", "recall@100", "mrr@10")
    assert metric_list("ndcg@10, mrr@10,,") == ("ndcg@10", "mrr@10")
    assert metric_list(["recall@5", " map@10 "]) == ("recall@5", "map@10")
    with pytest.raises(RagHierError, match="'bad'"):
        metric_list("ndcg@10,bad")


# ------------------------------------------------------------------------------------------------------
# TREC run files
# ------------------------------------------------------------------------------------------------------
def test_write_run_layout(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    write_run({"q1": {"a": 0.5, "b": 0.9, "c": 0.5}, "q2": {"x": -1.25}, "q3": {}}, path)
    assert path.read_text().splitlines() == [
        "q1 Q0 b 1 0.900000 rag-hier",
        "q1 Q0 a 2 0.500000 rag-hier",
        "q1 Q0 c 3 0.500000 rag-hier",
        "q2 Q0 x 1 -1.250000 rag-hier",
    ]
    write_run({"q": {"d": 1.0}}, path, tag="my-system")
    assert path.read_text() == "q Q0 d 1 1.000000 my-system\n"


def test_run_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    run = {
        f"q{q}": {f"doc{d}#{p}": float(np.round(rng.standard_normal(), 6)) for d in range(8) for p in range(2)}
        for q in range(5)
    }
    path = tmp_path / "run.trec"
    write_run(run, path)
    back = read_run(path)
    assert back == run
    qrels = {q: {f"doc{i}#0": 1 for i in range(3)} for q in run}
    assert evaluate(back, qrels) == evaluate(run, qrels)
    for lines in _group(path.read_text()).values():
        assert [int(c[3]) for c in lines] == list(range(1, len(lines) + 1))
        scores = [float(c[4]) for c in lines]
        assert scores == sorted(scores, reverse=True)


def _group(text: str) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        cols = line.split()
        out.setdefault(cols[0], []).append(cols)
    return out


def test_read_run_accepts_tabs_blank_lines_and_exponents(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text("q1\tQ0\ta\t1\t1e-3\tx\n\n   \nq1 Q0 b 2 -2 x\nq2 Q0 c 1 7 x\n", encoding="utf-8")
    assert read_run(path) == {"q1": {"a": 0.001, "b": -2.0}, "q2": {"c": 7.0}}


def test_read_run_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.trec"
    with pytest.raises(CorpusFormatError, match="does not exist") as exc:
        read_run(path)
    assert str(path) in str(exc.value)


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        ("q1 Q0 a 1 0.5 t\n\nq1 Q0 b 2 0.4\n", 3, "expected 6 columns"),
        ("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 high t\n", 2, "score 'high' is not a number"),
        ("q1 Q0 a 1 0.5 t extra\n", 1, "got 7"),
    ],
)
def test_read_run_malformed(tmp_path: Path, content: str, line: int, fragment: str) -> None:
    path = tmp_path / "run.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusFormatError) as exc:
        read_run(path)
    assert str(exc.value).startswith(f"{path}:{line}: ")
    assert fragment in str(exc.value)
    assert exc.value.line == line


def _hit(pid: str, score: float, rank: int) -> Hit:
    return Hit(passage_id=pid, doc_id=pid.split("#")[0], text="", title_path=(), meta={}, score=score, rank=rank)


def test_hits_to_run() -> None:
    hits = [[_hit("a#1", 0.9, 1), _hit("b#0", 0.8, 2), _hit("a#0", 0.7, 3)], []]
    assert hits_to_run(["q1", "q2"], hits) == {"q1": {"a#1": 0.9, "b#0": 0.8, "a#0": 0.7}, "q2": {}}
    # document level: each document once, scored by its first (best) hit
    assert hits_to_run(["q1", "q2"], hits, level="doc") == {"q1": {"a": 0.9, "b": 0.8}, "q2": {}}
    with pytest.raises(ValueError, match="zip"):
        hits_to_run(["q1"], hits)
