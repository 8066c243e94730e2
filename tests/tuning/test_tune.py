"""store.tune(): adoption, refusal, force, dry run, rollback, and bad inputs that leave the store unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, TuneConfig
from rag_hier.errors import RagHierError, StoreCorruptedError, StoreError
from rag_hier.eval.judged import judged_from_mappings
from rag_hier.tuning.split import split_dev
from tests.tuning.helpers import fingerprint as _fingerprint


def _top(store: HierStore, query: str) -> list[str]:
    return [h.doc_id for h in store.search(query, top_k=5)]


def test_adopts_a_better_candidate_and_rolls_back(judged_store, learns, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    before = _top(store, queries["q0_0"])
    generation = store.generation
    report = store.tune(queries, qrels, **learns)
    assert report.adopted, report.reason
    assert report.difference["ndcg@10"]["ci_low"] > 0
    assert report.candidate["ndcg@10"] > report.base["ndcg@10"]
    assert report.train_queries + report.dev_queries == len(queries)
    assert report.generation == store.generation > generation
    current = store.model_info["current"]
    assert current["stored"] and current["model"].startswith("models/")
    assert (path / current["model"]).is_dir()  # the model lives inside the store
    assert current["adopted"]["method"] == "contrastive"
    tuned = _top(store, queries["q0_0"])
    store.close()
    # a new handle loads the stored model (checked by digest) and answers as the tuning handle did
    store = HierStore.open(path)
    assert store.encoder.model_name == str((path / current["model"]).absolute())
    assert _top(store, queries["q0_0"]) == tuned
    store.rollback_model()
    assert store.model_info["current"]["model"] == store.model_info["previous"]["adopted"]["base_model"]
    assert _top(store, queries["q0_0"]) == before
    store.close()


def test_refuses_a_candidate_that_is_not_better(judged_store, stays, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    before = _fingerprint(path)
    store = HierStore.open(path)
    generation = store.generation
    report = store.tune(queries, qrels, **stays)
    assert not report.adopted
    assert "not shown better" in report.reason
    assert report.difference["ndcg@10"]["ci_low"] <= 0
    assert store.generation == generation
    store.close()
    assert _fingerprint(path) == before  # nothing written, no model copied


def test_force_adopts_anyway(judged_store, stays, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, force=True, **stays)
    assert report.adopted and report.reason.startswith("forced")
    assert store.model_info["current"]["adopted"]["forced"] is True
    store.close()


def test_dry_run_estimates_and_changes_nothing(judged_store, learns, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    before = _fingerprint(path)
    store = HierStore.open(path)
    report = store.tune(queries, qrels, dry_run=True, **learns)
    assert report.dry_run and not report.adopted
    assert report.steps == 2 and report.planned_steps > 2
    assert report.estimate_seconds is not None and report.estimate_seconds > 0
    assert report.base and not report.candidate
    store.close()
    assert _fingerprint(path) == before


def test_queries_from_files_and_config_object(judged_store, stays) -> None:
    path, beir = judged_store
    store = HierStore.open(path)
    report = store.tune(beir / "queries.jsonl", beir / "qrels" / "train.tsv", config=TuneConfig(**stays))
    assert report.level == "doc" and report.dev_queries == 40
    store.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda q, r: ({}, {}), "share no query id"),
        (lambda q, r: (q, {k: {"nowhere": 1} for k in r}), "names a relevant document the store holds"),
        (lambda q, r: (dict(list(q.items())[:1]), r), "cross-fitting .* in 5 folds needs at least 5"),
        (lambda q, r: (q, None), "qrels as a mapping"),
    ],
)
def test_bad_inputs_leave_the_store_unchanged(judged_store, make, message, stays, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    before = _fingerprint(path)
    store = HierStore.open(path)
    q, r = make(queries, qrels)
    with pytest.raises(RagHierError, match=message):
        store.tune(q, r, **stays)
    store.close()
    assert _fingerprint(path) == before


def test_refused_with_an_extension_that_cannot_follow(judged_store, stays, judged_maps) -> None:
    from rag_hier.testing import kmeans_ehi_extension

    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    store.add_extension(kmeans_ehi_extension(store))
    with pytest.raises(StoreError, match="'ehi' extension"):
        store.tune(queries, qrels, **stays)
    store.close()


def test_tree_extension_is_rebuilt_in_the_same_commit(judged_store) -> None:
    from rag_hier.retrieval import build_retriever

    path, _ = judged_store
    store = HierStore.open(path)
    store.ensure_extension("tree")
    store.ensure_extension("doc-index", representation="mean")
    before = store.extension("tree").require_tree().centroids[-1].copy()
    store.adopt_model(_other_model(path))
    tree = store.extension("tree").require_tree()
    assert len(tree) == store.count_vectors()
    # the leaf centroids are those of the new model's vectors (each leaf's mean direction), not the old ones
    vectors = store.vectors(tree.item_ids)
    for leaf in np.unique(tree.item_leaf)[:3]:
        mean = vectors[tree.item_leaf == leaf].mean(axis=0)
        assert float(mean @ tree.centroids[-1][leaf]) / float(np.linalg.norm(mean)) > 0.99
    assert not np.allclose(before, tree.centroids[-1])
    assert len(build_retriever("tree", store).search("river stone cloud", top_k=3)) == 3
    # the document index (mean of passage vectors) follows too: one passage a document here, so it equals them
    docs = build_retriever("hierarchical", store, k1=5).search("river stone cloud", top_k=3)
    assert [h.doc_id for h in docs] == [h.doc_id for h in store.search("river stone cloud", top_k=3)]
    store.close()
    HierStore.open(path).close()  # checksums of the rebuilt files hold


def _other_model(where: Path) -> str:
    from rag_hier.testing import build_tiny_model

    target = where.parent / "other-model"
    if not target.exists():
        build_tiny_model(target, seed=7)
    return str(target)


def test_a_tampered_stored_model_is_refused(judged_store) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    store.adopt_model(_other_model(path))
    model_dir = path / store.model_info["current"]["model"]
    store.close()
    config = model_dir / "config.json"
    config.write_text(config.read_text().replace("}", ', "planted": 1}', 1))
    store = HierStore.open(path)
    with pytest.raises(StoreCorruptedError, match="do not match the digest"):
        store.search("river", top_k=1)
    store.close()


def test_split_keeps_queries_of_one_document_together(judged_store, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    # the queries about d0 also judge d1 relevant: with d1's own queries they form one group of 10
    linked = {q: ({**r, "d1": 1} if q.startswith("q0_") else r) for q, r in qrels.items()}
    store = HierStore.open(path)
    judged = judged_from_mappings(store, queries, linked, "doc")
    train, dev = split_dev(judged, 0.2, seed=3)
    store.close()
    for group in ("q0_", "q1_"):
        sides = {q in dev.queries for q in judged.queries if q.startswith(group)}
        assert len(sides) == 1
    assert {"q0_0" in dev.queries} == {"q1_0" in dev.queries}
    assert set(train.queries).isdisjoint(dev.queries)
    assert len(train) + len(dev) == len(judged)
    assert split_dev(judged, 0.2, seed=3)[1].queries.keys() == dev.queries.keys()  # seeded


def test_report_files(judged_store, stays, judged_maps) -> None:
    from rag_hier.tuning.workflow import report_files

    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, **stays)
    store.close()
    md, svg = report_files(report, path)
    assert md.parent == path and md.name == "tune.md"
    text = md.read_text()
    assert "not adopted" in text and "| ndcg@10 |" in text and "tune.svg" in text
    assert svg.read_text().startswith("<svg") and "candidate" in svg.read_text()
    assert json.loads(json.dumps(report.to_dict()))["difference"]["ndcg@10"]["wins"] >= 0


def test_a_tuned_store_migrates_to_milvus_and_back_with_its_model(judged_store, tmp_path, monkeypatch) -> None:
    pytest.importorskip("milvus_lite")
    from rag_hier.store.milvus.migrate import local_to_milvus, milvus_to_local

    monkeypatch.setenv("RAG_HIER_CACHE", str(tmp_path / "cache"))
    path, _ = judged_store
    store = HierStore.open(path)
    store.adopt_model(_other_model(path))
    want = [h.passage_id for h in store.search("a query", top_k=5)]
    remote = local_to_milvus(store, str(tmp_path / "m.db"))
    assert (
        remote.model_info["current"]["stored"]
        and remote.model_info["current"]["sha256"] == (store.model_info["current"]["sha256"])
    )
    assert [h.passage_id for h in remote.search("a query", top_k=5)] == want  # the tuned model, from Milvus
    back = milvus_to_local(remote, tmp_path / "back")
    assert back.model_info["current"]["stored"] and (back.path / back.model_info["current"]["model"]).is_dir()
    assert [h.passage_id for h in back.search("a query", top_k=5)] == want
    for s in (back, remote, store):
        s.close()


def test_random_split_and_the_dev_subsets(judged_store, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    judged = judged_from_mappings(store, queries, qrels, "doc")
    grouped = split_dev(judged, 0.2, seed=1)
    scattered = split_dev(judged, 0.2, seed=1, mode="random")
    mixed = split_dev(judged, 0.2, seed=1, mode="mixed")
    store.close()
    # grouped: no dev query is about a training document; random: most are (five queries a document)
    from rag_hier.tuning.split import seen_documents

    assert seen_documents(*grouped)[0] == []
    seen, unseen = seen_documents(*scattered)
    assert len(seen) > len(unseen) and len(seen) + len(unseen) == len(scattered[1])
    # mixed: half the dev part is whole documents' queries (new documents), half drawn one by one
    seen, unseen = seen_documents(*mixed)
    assert len(unseen) >= 0.1 * len(judged) and seen and len(mixed[1]) >= 0.2 * len(judged)
    assert split_dev(judged, 0.2, seed=1, mode="mixed")[1].queries.keys() == mixed[1].queries.keys()
    with pytest.raises(RagHierError, match="grouped, random or mixed"):
        split_dev(judged, 0.2, seed=1, mode="scattered")


def test_report_shows_both_kinds_of_dev_queries(judged_store, judged_maps, stays) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, dev_split="random", dev_fraction=0.6, **stays)
    store.close()
    assert set(report.dev_subsets) == {"seen_documents", "unseen_documents"}
    assert sum(s["queries"] for s in report.dev_subsets.values()) == report.dev_queries
    assert "dev queries about documents training saw" in report.summary()


@pytest.mark.parametrize("method", ["hce-s", "hce-j"])
def test_hce_methods_train_a_candidate(judged_store, judged_maps, method) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, method=method, max_steps=2, batch_size=8, show_progress_bar=False, device="cpu")
    store.close()
    assert report.method == method and report.steps == 2
    assert report.details["hce"]["mode"] == ("supervised" if method == "hce-s" else "joint")
    assert report.candidate and report.difference["ndcg@10"]["wins"] >= 0


def test_the_rule_refuses_a_candidate_worse_on_new_documents() -> None:
    from rag_hier.tuning.workflow import _verdict

    cfg = TuneConfig()
    better = {"delta": 0.08, "ci_low": 0.03, "ci_high": 0.12}
    worse = {"queries": 40.0, "delta": -0.05, "ci_low": -0.09, "ci_high": -0.01}
    reason, adopt = _verdict(better, worse, 100, cfg)
    assert not adopt and "shown worse on the 40 dev queries about documents no training query is about" in reason
    unclear = {"queries": 40.0, "delta": -0.02, "ci_low": -0.06, "ci_high": 0.02}
    reason, adopt = _verdict(better, unclear, 100, cfg)  # not shown worse: adopted, and the reason says so
    assert adopt and "not shown worse on the 40 dev queries" in reason
    assert _verdict(better, {**worse, "queries": 9.0}, 100, cfg)[1]  # too few to judge: the overall rule
    assert _verdict(better, None, 100, cfg)[1]
    assert not _verdict({"delta": 0.01, "ci_low": -0.01, "ci_high": 0.03}, None, 100, cfg)[1]
    reason, adopt = _verdict(better, worse, 100, TuneConfig(force=True))
    assert not adopt and reason.startswith("forced")  # adopted by force, not by the rule


def test_refit_adopts_a_model_trained_on_every_judged_query(judged_store, learns, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    report = store.tune(queries, qrels, refit=True, dev_split="mixed", **learns)
    assert report.adopted, report.reason
    refit = report.details["refit"]
    assert refit["queries"] == report.train_queries + report.dev_queries == len(queries)
    assert refit["steps"] > report.steps  # more pairs, same passes
    assert "refit" in report.seconds and "encode" in report.seconds
    assert store.model_info["current"]["adopted"]["refit"]["queries"] == len(queries)
    store.close()
