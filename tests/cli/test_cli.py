"""The ``rag-hier`` command line, run in-process: index, search, eval, info."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag_hier.corpus.readers import read_corpus, read_qrels
from rag_hier.eval.metrics import evaluate
from rag_hier.eval.trec import read_run
from rag_hier.store.store import HierStore

from .conftest import Corpora


def parse_trec(text: str) -> dict[str, list[tuple[str, int, float, str]]]:
    """Parse TREC run lines, checking the column layout: ``qid Q0 id rank score tag``."""
    run: dict[str, list[tuple[str, int, float, str]]] = {}
    for line in text.splitlines():
        cols = line.split()
        assert len(cols) == 6, line
        qid, q0, doc, rank, score, tag = cols
        assert q0 == "Q0"
        run.setdefault(qid, []).append((doc, int(rank), float(score), tag))
    return run


def assert_valid_ranking(rows: list[tuple[str, int, float, str]], k: int) -> None:
    assert [r[1] for r in rows] == list(range(1, k + 1))
    scores = [r[2] for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert len({r[0] for r in rows}) == len(rows)  # each id once per query


# ------------------------------------------------------------------------------------------------------
# index
# ------------------------------------------------------------------------------------------------------
def test_index_markdown_dir_prints_summary(probe, corpora, index_cli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = index_cli(corpora.markdown, store)
    assert f"created store {store} from 3 markdown documents" in result.out
    assert "documents: 3 added, 0 updated, 0 unchanged" in result.out
    assert "passages:  6 encoded and written, 0 unchanged, 0 removed" in result.out
    assert "store now holds 3 documents, 6 passages, 6 vectors" in result.out
    assert probe.counts(store) == {"documents": 3, "passages": 6, "vectors": 6}
    # lead + one passage per section (default 100 words, split only inside a section)
    assert sorted(probe.passage_ids(store)) == [
        "alpha#0",
        "alpha#1",
        "alpha#2",
        "beta#0",
        "beta#1",
        "sub/gamma#0",
    ]
    with HierStore.open(store, read_only=True) as s:
        assert s.corpus_info["format"] == "markdown"
        assert s.corpus_info["max_passage_words"] == 100
        assert s.get_passages(["alpha#1"])[0].title_path == ("Alpha", "Growing")


@pytest.mark.parametrize(
    ("which", "fmt", "counts"),
    [
        ("text", "text", {"documents": 2, "passages": 2, "vectors": 2}),
        ("beir", "beir", {"documents": 5, "passages": 5, "vectors": 5}),
        ("qa", "qa-docs", {"documents": 2, "passages": 5, "vectors": 5}),
    ],
)
def test_index_other_formats(
    probe, corpora, index_cli, tmp_path: Path, which: str, fmt: str, counts: dict[str, int]
) -> None:
    source = getattr(corpora, which)
    if which == "beir":
        source = source / "corpus.jsonl"  # a BEIR corpus file, detected from its first record
    store = tmp_path / "store"
    result = index_cli(source, store)
    assert f"from {counts['documents']} {fmt} documents" in result.out
    assert probe.counts(store) == counts
    with HierStore.open(store, read_only=True) as s:
        assert s.corpus_info["format"] == fmt
        # BEIR documents are kept whole and QA documents' paragraphs are passages by default (so that
        # paragraph judgements name passages); the others are split at 100 words
        assert s.corpus_info["max_passage_words"] == (0 if fmt in ("beir", "qa-docs") else 100)


def test_index_explicit_format(probe, corpora, index_cli, tmp_path: Path) -> None:
    index_cli(corpora.qa / "documents.jsonl", tmp_path / "store", "--format", "qa-docs")
    assert probe.counts(tmp_path / "store")["documents"] == 2


def test_reindex_same_corpus_changes_nothing(probe, corpora, index_cli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    index_cli(corpora.markdown, store)
    before = probe.counts(store)
    ids_before = probe.passage_ids(store)
    result = index_cli(corpora.markdown, store)
    assert f"updated store {store}" in result.out
    assert "documents: 0 added, 0 updated, 3 unchanged" in result.out
    assert "passages:  0 encoded and written, 6 unchanged, 0 removed" in result.out
    assert probe.counts(store) == before
    assert probe.passage_ids(store) == ids_before


def test_changed_file_reencodes_only_changed_passages(probe, corpora, index_cli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    index_cli(corpora.markdown, store)
    with HierStore.open(store, read_only=True) as s:
        old = dict(zip(probe.passage_ids(store), s.get_embeddings(probe.passage_ids(store)), strict=True))
    # same number of words in the same section: only that one passage changes
    path = corpora.markdown / "alpha.md"
    path.write_text(path.read_text().replace("baked into pies", "pressed into cider"), encoding="utf-8")
    (corpora.markdown / "delta.md").write_text("# Delta\n\nRivers fan out into deltas.\n", encoding="utf-8")
    result = index_cli(corpora.markdown, store)
    assert "documents: 1 added, 1 updated, 2 unchanged" in result.out
    assert "passages:  2 encoded and written, 5 unchanged, 1 removed" in result.out
    assert probe.counts(store) == {"documents": 4, "passages": 7, "vectors": 7}
    with HierStore.open(store, read_only=True) as s:
        assert s.get_passages(["alpha#2"])[0].text == "Apples are pressed into cider."
        new = dict(zip(probe.passage_ids(store), s.get_embeddings(probe.passage_ids(store)), strict=True))
    for pid in ("alpha#0", "alpha#1", "beta#0", "beta#1", "sub/gamma#0"):
        np.testing.assert_array_equal(new[pid], old[pid])
    assert not np.allclose(new["alpha#2"], old["alpha#2"])


def test_prune_removes_documents_absent_from_the_corpus(probe, corpora, index_cli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    index_cli(corpora.markdown, store)
    (corpora.markdown / "beta.md").unlink()
    result = index_cli(corpora.markdown, store)  # without --prune the document stays
    assert "pruned" not in result.out
    assert probe.counts(store)["documents"] == 3
    result = index_cli(corpora.markdown, store, "--prune")
    assert "2 unchanged, 1 pruned" in result.out
    assert probe.counts(store) == {"documents": 2, "passages": 4, "vectors": 4}
    assert not any(pid.startswith("beta#") for pid in probe.passage_ids(store))


def test_max_passage_words_zero_gives_paragraph_ids(probe, corpora, index_cli, tmp_path: Path) -> None:
    store = tmp_path / "store"
    index_cli(corpora.markdown, store, "--max-passage-words", "0")
    expected = {f"{d.doc_id}#{i}" for d in read_corpus(corpora.markdown) for i, _ in enumerate(d.iter_paragraphs())}
    assert set(probe.passage_ids(store)) == expected
    assert "alpha#3" in expected  # the second "Growing" paragraph is its own passage
    with HierStore.open(store, read_only=True) as s:
        assert s.corpus_info["max_passage_words"] == 0
        assert s.get_passages(["alpha#2"])[0].text == "Bees pollinate the blossom."


def test_reindex_with_other_max_passage_words_is_recorded_or_refused(
    probe, corpora, index_cli, cli, tiny_model_path: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    index_cli(corpora.markdown, store)  # 100 words: "Growing" is one passage
    result = cli(
        "index",
        corpora.markdown,
        "--store",
        store,
        "--model",
        tiny_model_path,
        "--no-progress",
        "--max-passage-words",
        "0",
    )
    if result.code == 0:
        assert "alpha#3" in probe.passage_ids(store)  # the store now holds whole paragraphs...
        with HierStore.open(store, read_only=True) as s:
            assert s.corpus_info["max_passage_words"] == 0  # ...and must say so
    else:
        assert result.code == 2 and "--max-passage-words" in result.err


def test_max_passage_words_splits_long_sections(probe, index_cli, tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(25))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "long.txt").write_text(words + "\n", encoding="utf-8")
    index_cli(tmp_path / "c", tmp_path / "store", "--max-passage-words", "10")
    assert probe.passage_ids(tmp_path / "store") == ["long#0", "long#1", "long#2"]


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_index_kind_is_accepted(corpora, index_cli, cli, tmp_path: Path, kind: str) -> None:
    store = tmp_path / "store"
    index_cli(corpora.beir, store, "--index", kind)
    with HierStore.open(store, read_only=True) as s:
        assert s.index_config.kind == kind
    target = corpora.beir_docs[2]
    result = cli(
        "search", "--store", store, "--query", corpora.beir_embedding_text(target), "--top-k", 3, "--no-progress"
    )
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].split()[2] == target["_id"]
    # re-indexing with the same kind works (and needs no --index)
    index_cli(corpora.beir, store, "--index", kind)
    index_cli(corpora.beir, store)


def test_relative_model_path_is_recorded_absolute(
    corpora, cli, tiny_model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a store must keep working from another directory: a local model is recorded by its absolute path
    model = Path(tiny_model_path)
    monkeypatch.chdir(model.parent)
    store = tmp_path / "store"
    result = cli("index", corpora.beir, "--store", store, "--model", model.name, "--no-progress")
    assert result.code == 0, result.err
    monkeypatch.chdir(tmp_path)
    with HierStore.open(store, read_only=True) as s:
        assert s.manifest["encoder"]["model"] == str(model)
    result = cli("search", "--store", store, "--query", "moon", "--no-progress")
    assert result.code == 0, result.err
    # the same model spelled differently (relative, trailing slash) is the same model
    monkeypatch.chdir(model.parent)
    result = cli("index", corpora.beir, "--store", store, "--model", f"{model.name}/", "--no-progress")
    assert result.code == 0, result.err
    assert "5 unchanged" in result.out


# ------------------------------------------------------------------------------------------------------
# search
# ------------------------------------------------------------------------------------------------------
def test_search_query_prints_ranked_passages(md_store: Path, cli) -> None:
    result = cli(
        "search",
        "--store",
        md_store,
        "--query",
        "Alpha, Eating, Apples are baked into pies.",
        "--top-k",
        4,
        "--no-progress",
    )
    assert result.code == 0, result.err
    ranked = [line for line in result.out.splitlines() if not line.startswith("     ")]
    assert len(ranked) == 4
    assert [int(line.split(".")[0]) for line in ranked] == [1, 2, 3, 4]
    scores = [float(line.split()[1]) for line in ranked]
    assert scores == sorted(scores, reverse=True)
    first = ranked[0].split()
    assert first[2] == "alpha#2"
    assert "[Alpha > Eating]" in ranked[0]
    assert "Apples are baked into pies." in result.out
    assert scores[0] == pytest.approx(1.0, abs=1e-3)


def test_search_queries_writes_trec_run_of_doc_ids_for_beir(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    out = tmp_path / "run.trec"
    result = cli(
        "search",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--top-k",
        3,
        "--output",
        out,
        "--no-progress",
    )
    assert result.code == 0, result.err
    assert result.out == ""
    assert f"wrote 15 results for 5 queries to {out}" in result.err
    run = parse_trec(out.read_text())
    assert list(run) == [f"q{d['_id']}" for d in corpora.beir_docs]
    for qid, rows in run.items():
        assert_valid_ranking(rows, 3)
        assert {r[3] for r in rows} == {"rag-hier"}
        assert all("#" not in r[0] for r in rows)  # document ids: BEIR stores default to doc level
        assert rows[0][0] == qid[1:]  # each query is its document's text
    assert read_run(out)["qd1"]["d1"] == pytest.approx(1.0, abs=1e-3)


def test_search_queries_to_stdout(beir_store: Path, corpora, cli) -> None:
    result = cli(
        "search", "--store", beir_store, "--queries", corpora.beir / "queries.jsonl", "--top-k", 2, "--no-progress"
    )
    assert result.code == 0, result.err
    run = parse_trec(result.out)
    assert len(run) == 5
    for rows in run.values():
        assert_valid_ranking(rows, 2)


def test_search_qa_questions_writes_passage_run(corpora, index_cli, cli, tmp_path: Path) -> None:
    store = tmp_path / "qa-store"
    index_cli(corpora.qa, store, "--max-passage-words", "0")
    out = tmp_path / "run.trec"
    result = cli(
        "search",
        "--store",
        store,
        "--queries",
        corpora.qa / "questions.jsonl",
        "--top-k",
        5,
        "--output",
        out,
        "--no-progress",
    )
    assert result.code == 0, result.err
    run = parse_trec(out.read_text())
    assert list(run) == [q["qid"] for q in corpora.qa_questions]
    for q in corpora.qa_questions:
        rows = run[q["qid"]]
        assert_valid_ranking(rows, 5)  # 5 paragraphs in all
        assert rows[0][0] == f"{q['doc_id']}#{q['paragraph_index']}"


def test_search_aggregate_doc_gives_each_document_once(md_store: Path, corpora, cli, tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "x", "text": "apples"}\n{"_id": "y", "text": "bridges"}\n', encoding="utf-8")
    out = tmp_path / "run.trec"
    result = cli(
        "search",
        "--store",
        md_store,
        "--queries",
        queries,
        "--aggregate",
        "doc",
        "--top-k",
        10,
        "--output",
        out,
        "--no-progress",
    )
    assert result.code == 0, result.err
    run = parse_trec(out.read_text())
    for rows in run.values():
        assert_valid_ranking(rows, 3)  # 3 documents, fewer than top-k
        assert {r[0] for r in rows} == {name.removesuffix(".md") for name in corpora.markdown_files}
    # passage level (the default for a Markdown store) has passage ids
    result = cli("search", "--store", md_store, "--queries", queries, "--top-k", 10, "--no-progress")
    for rows in parse_trec(result.out).values():
        assert_valid_ranking(rows, 6)
        assert all("#" in r[0] for r in rows)


def test_search_aggregate_doc_scores_documents_by_best_passage(md_store: Path, cli) -> None:
    query = "Beta, Kinds, Arch bridges push outwards."
    passage = cli("search", "--store", md_store, "--query", query, "--top-k", 6, "--no-progress")
    doc = cli("search", "--store", md_store, "--query", query, "--top-k", 3, "--aggregate", "doc", "--no-progress")
    assert passage.code == doc.code == 0
    best: dict[str, float] = {}
    for line in passage.out.splitlines():
        if not line.startswith("     "):
            _, score, pid, *_ = line.split()
            best.setdefault(pid.split("#")[0], float(score))
    doc_rows = [line.split() for line in doc.out.splitlines() if not line.startswith("     ")]
    assert [r[2] for r in doc_rows] == list(best)
    assert [float(r[1]) for r in doc_rows] == pytest.approx(list(best.values()))


def test_search_filters(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    flt = json.dumps({"field": "meta.year", "operator": ">=", "value": 2015})
    out = tmp_path / "run.trec"
    result = cli(
        "search",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--top-k",
        10,
        "--filters",
        flt,
        "--output",
        out,
        "--no-progress",
    )
    assert result.code == 0, result.err
    for rows in parse_trec(out.read_text()).values():
        assert_valid_ranking(rows, 3)
        assert {r[0] for r in rows} == {"d3", "d4", "d5"}
    nested = json.dumps(
        {
            "operator": "OR",
            "conditions": [
                {"field": "meta.year", "operator": "==", "value": 2001},
                {"field": "doc_id", "operator": "in", "value": ["d5"]},
            ],
        }
    )
    result = cli("search", "--store", beir_store, "--query", "anything", "--filters", nested, "--no-progress")
    assert result.code == 0, result.err
    shown = {line.split()[2] for line in result.out.splitlines() if not line.startswith("     ")}
    assert shown == {"d1", "d5"}


def test_search_filter_matching_nothing_prints_no_results(beir_store: Path, cli) -> None:
    flt = json.dumps({"field": "meta.year", "operator": ">", "value": 3000})
    result = cli("search", "--store", beir_store, "--query", "tides", "--filters", flt, "--no-progress")
    assert result.code == 0, result.err
    assert result.out.strip() == "no results"


def test_search_does_not_modify_the_store(probe, beir_store: Path, corpora, cli) -> None:
    before = probe.snapshot(beir_store)
    assert cli("search", "--store", beir_store, "--query", "moon", "--no-progress").code == 0
    assert (
        cli(
            "eval",
            "--store",
            beir_store,
            "--queries",
            corpora.beir / "queries.jsonl",
            "--qrels",
            corpora.beir / "qrels" / "test.tsv",
            "--no-progress",
        ).code
        == 0
    )
    assert cli("info", "--store", beir_store).code == 0
    assert probe.snapshot(beir_store) == before


# ------------------------------------------------------------------------------------------------------
# eval
# ------------------------------------------------------------------------------------------------------
def test_eval_prints_and_writes_metrics_equal_to_evaluate(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    metrics_json, run_file = tmp_path / "metrics.json", tmp_path / "run.trec"
    qrels = corpora.beir / "qrels" / "test.tsv"
    result = cli(
        "eval",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        qrels,
        "--output",
        metrics_json,
        "--run-output",
        run_file,
        "--no-progress",
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("5 queries, doc level, top 100, dense")
    printed = {line.split()[0]: float(line.split()[1]) for line in lines[1:]}
    assert list(printed) == ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
    report = json.loads(metrics_json.read_text())
    assert report["queries"] == 5 and report["level"] == "doc" and report["top_k"] == 100
    assert report["strategy"] == "dense"
    assert list(report["metrics"]) == list(printed)
    expected = evaluate(read_run(run_file), read_qrels(qrels), list(printed))
    for name, value in expected.items():
        assert report["metrics"][name] == pytest.approx(value, abs=1e-4)
        assert printed[name] == pytest.approx(value, abs=1e-4)
    # every query is its document's text, so it is found first
    assert report["metrics"]["mrr@10"] == pytest.approx(1.0)
    assert report["metrics"]["recall@10"] == pytest.approx(1.0)
    run = parse_trec(run_file.read_text())
    for rows in run.values():
        assert_valid_ranking(rows, 5)  # top 100, but only 5 documents


def test_eval_custom_metrics_and_top_k(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    metrics_json = tmp_path / "m.json"
    result = cli(
        "eval",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        corpora.beir / "qrels" / "test.tsv",
        "--metrics",
        "map@5,precision@1,success@3",
        "--top-k",
        2,
        "--output",
        metrics_json,
        "--no-progress",
    )
    assert result.code == 0, result.err
    report = json.loads(metrics_json.read_text())
    assert report["top_k"] == 2
    assert report["metrics"] == {"map@5": 1.0, "precision@1": 1.0, "success@3": 1.0}


def test_eval_only_judged_queries_are_run(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("qd1\td1\t1\nqd2\td3\t1\n", encoding="utf-8")
    run_file = tmp_path / "run.trec"
    result = cli(
        "eval",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        qrels,
        "--metrics",
        "mrr@10",
        "--run-output",
        run_file,
        "--no-progress",
    )
    assert result.code == 0, result.err
    assert result.out.startswith("2 queries")
    assert set(read_run(run_file)) == {"qd1", "qd2"}
    value = float(result.out.splitlines()[1].split()[1])
    assert value == pytest.approx(evaluate(read_run(run_file), read_qrels(qrels), ["mrr@10"])["mrr@10"], abs=1e-4)
    assert value < 1.0  # qd2 is judged against the wrong document


def test_eval_qa_questions_without_qrels(corpora, index_cli, cli, tmp_path: Path) -> None:
    store = tmp_path / "qa-store"
    index_cli(corpora.qa, store, "--max-passage-words", "0")
    questions = corpora.qa / "questions.jsonl"
    out = tmp_path / "m.json"
    result = cli("eval", "--store", store, "--queries", questions, "--output", out, "--no-progress")
    assert result.code == 0, result.err
    report = json.loads(out.read_text())
    assert report["level"] == "passage" and report["queries"] == 3
    assert report["metrics"]["mrr@10"] == pytest.approx(1.0)
    assert report["metrics"]["ndcg@10"] == pytest.approx(1.0)
    result = cli(
        "eval", "--store", store, "--queries", questions, "--aggregate", "doc", "--output", out, "--no-progress"
    )
    assert result.code == 0, result.err
    report = json.loads(out.read_text())
    assert report["level"] == "doc"
    assert report["metrics"]["recall@10"] == pytest.approx(1.0)
    assert report["metrics"]["mrr@10"] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------------------
# info
# ------------------------------------------------------------------------------------------------------
def test_info_human(beir_store: Path, cli, tiny_model_path: str) -> None:
    result = cli("info", "--store", beir_store)
    assert result.code == 0, result.err
    out = result.out
    assert f"store      {beir_store}  (format v1" in out
    assert f"encoder    {tiny_model_path}  dim=32  normalized=True" in out
    assert "counts     5 documents, 5 passages, 5 vectors" in out
    assert "file       dense.faiss" in out
    assert "'kind': 'flat'" in out


def test_info_json(beir_store: Path, cli, tiny_model_path: str) -> None:
    result = cli("info", "--store", beir_store, "--json")
    assert result.code == 0, result.err
    info = json.loads(result.out)
    assert info["counts"] == {"documents": 5, "passages": 5, "vectors": 5}
    assert info["dimension"] == 32
    assert info["encoder"]["model"] == tiny_model_path
    assert info["corpus"]["format"] == "beir"
    assert info["index_state"]["ntotal"] == 5
    assert info["path"] == str(beir_store)
    assert cli("info", "--store", beir_store, "--no-verify").code == 0


# ------------------------------------------------------------------------------------------------------
# the real console script (exit codes)
# ------------------------------------------------------------------------------------------------------
def test_console_script_and_module_exit_codes(beir_store: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rag-hier")
    assert script.is_file(), "the rag-hier console script is not installed next to this Python"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    missing = tmp_path / "missing"
    bad = subprocess.run(
        [str(script), "info", "--store", str(missing)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.splitlines() == [f"rag-hier info: error: store directory {missing} does not exist"]
    good = subprocess.run(
        [sys.executable, "-m", "rag_hier", "info", "--store", str(beir_store), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["counts"]["documents"] == 5
    usage = subprocess.run([str(script), "search"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert usage.returncode == 2
    assert "--store" in usage.stderr


def test_help_lists_the_commands(cli) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("--help")
    assert exc.value.code == 0


def test_qa_fixture_is_consistent(corpora) -> None:
    # guards the fixtures: every question points at a real paragraph
    paragraphs = {d["doc_id"]: d["paragraphs"] for d in corpora.qa_docs}
    for q in corpora.qa_questions:
        title = next(d["title"] for d in corpora.qa_docs if d["doc_id"] == q["doc_id"])
        assert q["question"] == f"{title}, {paragraphs[q['doc_id']][q['paragraph_index']]}"


def test_console_script_hides_library_debug_logs(corpora: Corpora, tmp_path: Path, tiny_model_path: str) -> None:
    # bm25s sets its own logger to DEBUG at import (SVDR's training mines BM25 negatives with it); the command line
    # prints warnings and errors only, info with -v
    script = Path(sys.executable).with_name("rag-hier")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    train = ["train", "svdr", str(corpora.qa), "--queries", str(corpora.qa / "questions.jsonl"), "--model"]
    train += [tiny_model_path, "--max-steps", "1", "--batch-size", "2", "--no-progress", "--output"]

    def stderr(*args: str) -> str:
        run = subprocess.run([str(script), *args], capture_output=True, text=True, env=env, timeout=300, check=False)
        assert run.returncode == 0, run.stderr
        return run.stderr

    quiet = stderr(*train, str(tmp_path / "m"))
    assert "DEBUG" not in quiet and "INFO" not in quiet
    verbose = stderr("-v", *train, str(tmp_path / "m2"))
    assert "DEBUG" not in verbose and "INFO rag_hier" in verbose


def test_info_says_what_the_generation_of_a_new_store_counts(corpora, index_cli, cli, tmp_path: Path) -> None:
    store = tmp_path / "new-store"
    index_cli(corpora.beir, store)
    result = cli("info", "--store", store)
    assert result.code == 0, result.err
    with HierStore.open(store, read_only=True) as s:
        generation = s.generation
    # a new store is past generation 1: the count is of commits (the empty store, the passages, the settings)
    assert generation >= 3
    assert f"generation {generation}, its count of commits: each write batch and each model switch adds one" in (
        result.out
    )


def test_the_tune_report_says_what_the_generation_counts() -> None:
    from rag_hier.tuning.report import TuneReport

    markdown = TuneReport(store="s", method="contrastive", generation=3).to_markdown()
    assert "| store generation after (its count of commits) | 3 |" in markdown
