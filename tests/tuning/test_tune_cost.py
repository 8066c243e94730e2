"""What makes tune affordable and decisive: re-ranked dev scoring, cross-fitting, pass selection, the advice."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rag_hier import HierStore, TuneConfig
from rag_hier.errors import ParameterError, RagHierError
from rag_hier.eval.judged import judged_from_mappings
from rag_hier.store.encoder_switch import encode_passages
from rag_hier.tuning.rerank import prefer_rerank, rerank_pool
from rag_hier.tuning.scoring import candidate_index, score_queries
from rag_hier.tuning.split import fold_split
from rag_hier.tuning.train import _uses_gradcache, planned_steps
from rag_hier.tuning.workflow import resolution

METRICS = ("ndcg@10", "recall@10", "mrr@10")


def _subset(judged_maps, n: int, seed: int = 0):
    queries, qrels = judged_maps
    qids = sorted(queries)
    random.Random(seed).shuffle(qids)
    keep = qids[:n]
    return {q: queries[q] for q in keep}, {q: qrels[q] for q in keep}


def test_rerank_over_the_whole_store_equals_a_full_encode(judged_store, judged_maps, tiny_model_path) -> None:
    """The oracle: a pool holding every passage ranks as the full search does, query by query."""
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path, read_only=True)
    judged = judged_from_mappings(store, queries, qrels, "doc").subset(list(queries)[:60])
    q = store.encoder.encode_queries(list(judged.queries.values()))
    pool = rerank_pool(store, judged, q, depth=store.count_vectors())
    assert pool.size == store.count_vectors()
    other = store.encoder_for(tiny_model_path)  # any model: here the same weights through a second encoder
    full = score_queries(
        store,
        judged,
        other.encode_queries(list(judged.queries.values())),
        METRICS,
        index=candidate_index(store, encode_passages(store, other, show_progress_bar=False)),
    )
    reranked = pool.score(other, METRICS)
    for m in METRICS:
        assert reranked[m] == pytest.approx(full[m], abs=1e-6)
    store.close()


def test_a_shallow_pool_keeps_every_judged_positive(judged_store, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path, read_only=True)
    judged = judged_from_mappings(store, queries, qrels, "doc").subset(list(queries)[:30])
    q = store.encoder.encode_queries(list(judged.queries.values()))
    pool = rerank_pool(store, judged, q, depth=3)
    for i, qid in enumerate(judged.queries):
        keys = {pool.keys[j] for j in pool.members[i].tolist()}
        assert set(judged.qrels[qid]) <= keys
        assert len(pool.members[i]) <= 3 + len(judged.qrels[qid])
    assert pool.size < store.count_vectors()
    assert prefer_rerank(10, 100, "auto") and not prefer_rerank(60, 100, "auto")
    assert prefer_rerank(60, 100, "rerank") and not prefer_rerank(1, 100, "full")
    store.close()


def test_held_out_scoring_by_rerank_agrees_with_full(judged_store, judged_maps, learns) -> None:
    """The same candidate (same seed and data) scored both ways: the same verdict; re-ranking never scores lower.

    How close the two figures are depends on the base's ranking (the pools come from it): this tiny random base
    ranks the collection poorly, the worst case; docs/tuning.md gives the gap on real data.
    """
    path, _ = judged_store
    queries, qrels = judged_maps
    reports = {}
    for mode in ("rerank", "full"):
        store = HierStore.open(path)
        reports[mode] = store.tune(queries, qrels, dev_scoring=mode, rerank_depth=10, force=False, **learns)
        if reports[mode].adopted:
            store.rollback_model()
        store.close()
    r, f = reports["rerank"], reports["full"]
    assert r.details["dev_scoring"] == "rerank" and f.details["dev_scoring"] == "full"
    assert r.adopted == f.adopted
    # re-ranking can only miss passages that would push relevant ones down: never below the full figure
    assert r.candidate["ndcg@10"] >= f.candidate["ndcg@10"] - 1e-9


def test_cross_fitting_adopts_a_real_gain_on_sixty_queries(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = _subset(judged_maps, 60)
    store = HierStore.open(path)
    generation = store.generation
    report = store.tune(queries, qrels, **{**learns, "epochs": 6.0})
    assert report.details["evaluation"] == "cross-fitted, 5 folds"
    assert report.dev_queries == report.train_queries == 60  # every query scored once; the adopted model saw all
    assert sum(report.details["fold_sizes"]) == 60
    assert report.adopted, report.reason
    assert report.difference["ndcg@10"]["ci_low"] > 0
    assert store.generation > generation
    assert store.model_info["current"]["adopted"]["folds"] == 5
    store.close()


def test_cross_fitting_adopts_nothing_under_shuffled_judgements(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, _ = _subset(judged_maps, 60)
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(40)]
    shuffled = {q: {rng.choice(docs): 1} for q in queries}
    store = HierStore.open(path)
    generation = store.generation
    report = store.tune(queries, shuffled, **{**learns, "epochs": 6.0})
    assert report.details["evaluation"].startswith("cross-fitted")
    assert not report.adopted
    assert store.generation == generation
    store.close()


def test_not_adopted_says_what_would_resolve_it(judged_store, judged_maps, stays) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, cross_fit="off", **stays)
    assert not report.adopted
    assert report.resolution["advice"] in report.reason
    assert "changed nothing" in report.reason or "no better" in report.reason or "would need about" in report.reason
    store.close()


def test_resolution_from_the_spread_of_per_query_differences() -> None:
    cfg = TuneConfig()
    rng = np.random.default_rng(0)
    diffs = list(rng.normal(0.03, 0.2, size=40))
    r = resolution(diffs, cfg, judged_total=200, cross_fit=False)
    sd = float(np.std(diffs, ddof=1))
    assert r["detectable"] == pytest.approx(2.8016 * sd / np.sqrt(40), rel=1e-3)
    delta = float(np.mean(diffs))
    dev_needed = int(np.ceil((2.8016 * sd / delta) ** 2))
    assert r["queries_needed"] == int(np.ceil(dev_needed / (40 / 200)))
    assert "would need about" in r["advice"] and "--cross-fit on" in r["advice"]
    crossed = resolution(diffs, cfg, judged_total=40, cross_fit=True)
    assert crossed["queries_needed"] == dev_needed
    assert "no better" in resolution([-0.1, 0.0, 0.05], cfg, judged_total=3, cross_fit=True)["advice"]
    assert "changed nothing" in resolution([0.0, 0.0], cfg, judged_total=2, cross_fit=True)["advice"]


def test_passes_are_chosen_on_dev(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, cross_fit="off", **{**learns, "epochs": 3.0})
    by_pass = report.details["dev_by_pass"]
    assert 1 <= len(by_pass) <= 3
    best = report.details["best_pass"]
    assert by_pass[best - 1] == max(by_pass)
    if len(by_pass) < 3:  # stopped: the last pass was not better than the best
        assert by_pass[-1] <= max(by_pass)
    store.close()


def test_fold_split_is_a_partition_and_keeps_groups_together(judged_store, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path, read_only=True)
    judged = judged_from_mappings(store, queries, qrels, "doc")
    for mode in ("grouped", "random", "mixed"):
        parts = fold_split(judged, 5, 3, mode=mode)
        flat = [q for p in parts for q in p]
        assert sorted(flat) == sorted(judged.queries) and len(flat) == len(set(flat))
        assert max(map(len, parts)) - min(map(len, parts)) <= (5 if mode == "grouped" else 1)
    for part in fold_split(judged, 5, 3, mode="grouped"):
        docs = {d for q in part for d in judged.qrels[q]}
        others = {d for p in fold_split(judged, 5, 3, mode="grouped") if p != part for q in p for d in judged.qrels[q]}
        assert not docs & others
    with pytest.raises(RagHierError, match="in 5 folds needs at least 5"):
        fold_split(judged.subset(list(judged.queries)[:4]), 5, 0)
    store.close()


def test_cost_settings() -> None:
    assert not _uses_gradcache(TuneConfig())  # the plain loss: one forward pass per step
    assert _uses_gradcache(TuneConfig(mini_batch_size=8))
    assert not _uses_gradcache(TuneConfig(mini_batch_size=32))
    assert planned_steps(60, TuneConfig()) == 2
    assert planned_steps(60, TuneConfig(min_steps=10)) == 10
    assert planned_steps(60, TuneConfig(min_steps=10, max_steps=4)) == 4
    for bad in ({"epochs": float("inf")}, {"epochs": float("nan")}, {"max_minutes": float("inf")}, {"folds": 1}):
        with pytest.raises(ParameterError):
            TuneConfig(**bad)
    with pytest.raises(ParameterError, match="dev_scoring"):
        TuneConfig(dev_scoring="sometimes")  # type: ignore[arg-type]


def test_max_minutes_fits_the_steps_up_front(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    lines: list[str] = []
    report = store.tune(queries, qrels, cross_fit="off", say=lines.append, **{**learns, "max_minutes": 0.001})
    assert report.details["fitted_steps"] == [1]
    assert report.steps == 1 < report.planned_steps
    assert any("planned steps fit" in line for line in lines)
    store.close()


def test_refit_continue_trains_the_candidate_on_the_dev_part(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, cross_fit="off", refit="continue", rerank_depth=10, **learns)
    assert report.adopted, report.reason
    assert report.details["dev_scoring"] == "rerank"  # every passage is encoded again anyway: the pools suffice
    assert report.details["refit"]["mode"] == "continue"
    assert report.details["refit"]["queries"] == report.dev_queries
    assert store.model_info["current"]["adopted"]["refit"]["mode"] == "continue"
    assert TuneConfig(refit=True).refit == "full" and TuneConfig(refit=False).refit == "off"
    store.close()


def test_rerank_leaves_out_metrics_deeper_than_its_pools(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, cross_fit="off", dev_scoring="rerank", rerank_depth=10, **learns)
    assert "recall@100" in report.base and "recall@100" not in report.candidate
    assert "recall@100" not in report.difference and "ndcg@10" in report.difference
    assert "-" in report.summary()
    store.close()


def test_cross_fitting_adopts_only_a_gain_every_fold_shows() -> None:
    from types import SimpleNamespace

    from rag_hier.tuning.report import TuneReport
    from rag_hier.tuning.workflow import _Run

    cfg = TuneConfig()
    qids = [f"q{i}" for i in range(40)]
    folds = [qids[:20], qids[20:]]
    base = {m: dict.fromkeys(qids, 0.5) for m in cfg.metrics}

    def decide(gain_second_fold: float) -> tuple[bool, TuneReport]:
        cand = {m: {q: 0.5 + (0.3 if q in folds[0] else gain_second_fold) for q in qids} for m in cfg.metrics}
        report = TuneReport(store="s", method="contrastive", config=cfg.to_dict())
        run = _Run(SimpleNamespace(encoder=None), cfg, report, {}, lambda line: None, 1.0, 10, False, 0.0)
        run._decide(base, cand, qids, {}, len(qids), cross_fit=True, folds=folds)
        return run.better, report

    better, report = decide(0.05)
    assert better and report.details["fold_differences"] == [0.3, 0.05]
    better, report = decide(-0.01)  # better overall, but one fold's candidate made its queries worse
    assert report.difference["ndcg@10"]["ci_low"] > 0
    assert not better and "not in every fold" in report.reason


def test_the_rule_also_needs_students_t_interval_above_zero() -> None:
    from scipy import stats

    from rag_hier.tuning.workflow import _t_low, _verdict

    diffs = [0.3, -0.1, 0.25, 0.0, 0.2, -0.05, 0.15, 0.0]
    x = np.asarray(diffs)
    expected = x.mean() - stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    assert _t_low(diffs, 0.95) == pytest.approx(expected)
    cfg = TuneConfig()
    d = {"delta": 0.08, "ci_low": 0.004, "ci_high": 0.16, "t_low": -0.004}
    reason, adopt = _verdict(d, None, 60, cfg)
    assert not adopt and "Student's t interval reaches -0.0040" in reason
    assert _verdict({**d, "t_low": 0.001}, None, 60, cfg)[1]


def test_cross_fitting_with_shallow_pools_reports_the_metrics_they_measure(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    queries, qrels = _subset(judged_maps, 40)
    store = HierStore.open(path)
    report = store.tune(queries, qrels, rerank_depth=10, **{**learns, "epochs": 6.0})
    assert report.details["dev_scoring"] == "rerank"
    assert "recall@100" not in report.candidate and "ndcg@10" in report.candidate
    store.close()
