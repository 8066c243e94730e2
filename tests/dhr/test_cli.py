"""The DHR command line: index --hierarchical, search/eval --strategy hierarchical, train dhr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rag_hier.cli.main import main
from rag_hier.store.store import HierStore

DOCS = [
    {
        "doc_id": "rivers",
        "title": "Rivers",
        "paragraphs": ["Rivers carry sediment to the sea.", "Deltas form where rivers slow down."],
    },
    {
        "doc_id": "glaciers",
        "title": "Glaciers",
        "paragraphs": ["Glaciers are rivers of ice.", "They carve U-shaped valleys.", "Moraines mark their edges."],
    },
    {"doc_id": "bees", "title": "Bees", "paragraphs": ["Bees make honey from nectar.", "A hive has one queen."]},
]
QUESTIONS = [
    {
        "qid": "a",
        "question": "Rivers, Deltas form where rivers slow down.",
        "answers": ["deltas"],
        "doc_id": "rivers",
        "paragraph_index": 1,
    },
    {
        "qid": "b",
        "question": "Glaciers, They carve U-shaped valleys.",
        "answers": ["U-shaped"],
        "doc_id": "glaciers",
        "paragraph_index": 1,
    },
    {
        "qid": "c",
        "question": "Bees, A hive has one queen.",
        "answers": ["queen"],
        "doc_id": "bees",
        "paragraph_index": 1,
    },
]


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def qa(tmp_path: Path) -> Path:
    root = tmp_path / "qa"
    root.mkdir()
    (root / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return root


def test_index_search_eval_round_trip(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    store = tmp_path / "store"
    code, out, err = run(
        capsys,
        "index",
        qa,
        "--store",
        store,
        "--model",
        tiny_model_path,
        "--max-passage-words",
        "0",
        "--hierarchical",
        "--no-progress",
    )
    assert code == 0, err
    assert "document index: 3 documents (mean), built" in out
    with HierStore.open(store, read_only=True) as s:
        assert s.extension("doc-index") is not None and "doc.faiss" in s.manifest["files"]
    # a query equal to a passage's embedding text finds it first; passage ids are <doc>#<paragraph>
    run_file = tmp_path / "run.trec"
    code, _, err = run(
        capsys,
        "search",
        "--store",
        store,
        "--queries",
        qa / "questions.jsonl",
        "--strategy",
        "hierarchical",
        "--k1",
        "1",
        "--lambda",
        "0.5",
        "--top-k",
        "3",
        "--output",
        run_file,
    )
    assert code == 0, err
    lines = [line.split() for line in run_file.read_text().splitlines()]
    firsts = {c[0]: c[2] for c in lines if c[3] == "1"}
    assert firsts == {"a": "rivers#1", "b": "glaciers#1", "c": "bees#1"}
    # k1=1: every result of a query comes from one document
    for qid in "abc":
        assert len({c[2].split("#")[0] for c in lines if c[0] == qid}) == 1
    code, out, err = run(
        capsys,
        "eval",
        "--store",
        store,
        "--queries",
        qa / "questions.jsonl",
        "--strategy",
        "hierarchical",
        "--hierarchical-mode",
        "parallel",
        "--metrics",
        "mrr@10",
    )
    assert code == 0, err
    assert "mrr@10  1.0000" in out
    code, out, _ = run(capsys, "search", "--store", store, "--query", "ice valleys", "--strategy", "hierarchical")
    assert code == 0 and "glaciers#" in out
    # a later index run keeps the document index in sync without --hierarchical
    (qa / "documents.jsonl").write_text(
        "".join(json.dumps(d) + "\n" for d in [*DOCS, {"doc_id": "new", "title": "New", "paragraphs": ["x y"]}])
    )
    code, out, err = run(capsys, "index", qa, "--store", store, "--no-progress")
    assert code == 0, err
    assert "document index (mean): follows this write" in out
    with HierStore.open(store, read_only=True) as s:
        assert len(s.extension("doc-index")) == 4


def test_search_errors(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    store = tmp_path / "store"
    assert run(capsys, "index", qa, "--store", store, "--model", tiny_model_path, "--no-progress")[0] == 0
    code, _, err = run(capsys, "search", "--store", store, "--query", "x", "--strategy", "hierarchical")
    assert code == 2 and "--hierarchical" in err
    assert (
        run(
            capsys, "index", qa, "--store", store, "--hierarchical", "--doc-representation", "summary", "--no-progress"
        )[0]
        == 0
    )
    code, _, err = run(capsys, "search", "--store", store, "--query", "x", "--strategy", "hierarchical", "--k1", "0")
    assert code == 2 and "--k1 must be >= 1" in err
    code, _, err = run(
        capsys, "index", qa, "--store", store, "--doc-representation", "mean", "--doc-model", "m", "--no-progress"
    )
    assert code == 2 and "--doc-model" in err


def test_train_dhr_cli(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    out_dir = tmp_path / "model"
    code, out, err = run(
        capsys,
        "train",
        "dhr",
        qa / "documents.jsonl",
        "--qa",
        qa / "questions.jsonl",
        "--output",
        out_dir,
        "--base-model",
        tiny_model_path,
        "--max-passage-words",
        "0",
        "--batch-size",
        "2",
        "--levels",
        "passage",
        "--device",
        "cpu",
        "--mined-negatives",
        "replace",
        "--attention-dropout",
        "-1",
        "--mini-batch-size",
        "0",
        "--max-steps",
        "1",
        "--max-minutes",
        "10",
        "--eval-queries",
        qa / "questions.jsonl",
        "--no-progress",
    )
    assert code == 0, err
    assert "trained DHR on 3 questions over 3 documents" in out and f"model: {out_dir}" in out
    assert "held out (3 queries)" in out and "the trained model is" in out  # base and trained side by side
    config = json.loads((out_dir / "dhr_training.json").read_text())["config"]
    assert config["max_steps"] == 1 and config["max_minutes"] == 10
    assert config["mined_negatives"] == "replace" and config["in_doc_negatives"] == 1  # the paper's In-Doc default
    assert config["attention_dropout"] is None and config["mini_batch_size"] is None
    assert (out_dir / "modules.json").is_file()
    # the trained model indexes a store
    code, _, err = run(
        capsys, "index", qa, "--store", tmp_path / "s", "--model", out_dir, "--hierarchical", "--no-progress"
    )
    assert code == 0, err
    code, _, err = run(
        capsys, "train", "dhr", qa, "--qa", qa / "questions.jsonl", "--output", out_dir, "--levels", "nope"
    )
    assert code == 2 and "levels" in err


def test_train_dhr_takes_beir_queries_and_qrels(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": q["qid"], "text": q["question"]}) + "\n" for q in QUESTIONS))
    qrels = tmp_path / "qrels.tsv"  # a passage id, a document id (judged whole), and a grade-0 line (ignored)
    qrels.write_text("query-id\tcorpus-id\tscore\na\trivers#1\t1\nb\tglaciers\t1\nc\tbees#1\t1\nc\tbees#0\t0\n")
    common = ("--output", tmp_path / "m", "--base-model", tiny_model_path, "--max-passage-words", "0",
              "--batch-size", "2", "--max-steps", "1", "--device", "cpu", "--no-progress")  # fmt: skip
    code, out, err = run(
        capsys, "train", "dhr", qa / "documents.jsonl", "--queries", queries, "--qrels", qrels, *common
    )
    assert code == 0, err
    assert "trained DHR on 3 questions over 3 documents" in out
    # a judged id that is neither a document nor one of its passages; no training data; both kinds at once
    qrels.write_text("query-id\tcorpus-id\tscore\na\trivers#9\t1\n")
    code, _, err = run(capsys, "train", "dhr", qa / "documents.jsonl", "--queries", queries, "--qrels", qrels, *common)
    assert code == 2 and "'rivers#9'" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "train", "dhr", qa / "documents.jsonl", *common)
    assert code == 2 and "--qa FILE or as --queries FILE" in err
    code, _, err = run(
        capsys, "train", "dhr", qa / "documents.jsonl", "--qa", qa / "questions.jsonl", "--queries", queries, *common
    )
    assert code == 2 and "--qa FILE or as --queries FILE" in err


def _train_dhr(capsys, qa: Path, out_dir: Path, tiny_model_path: str, *extra: Any) -> tuple[int, str, str]:
    return run(
        capsys, "train", "dhr", qa / "documents.jsonl", "--qa", qa / "questions.jsonl", "--output", out_dir,
        "--base-model", tiny_model_path, "--batch-size", "2", "--levels", "passage", "--device", "cpu",
        "--max-steps", "1", *extra,
    )  # fmt: skip


@pytest.mark.parametrize("progress", [(), ("--no-progress",)], ids=["bar", "no-bar"])
def test_train_dhr_prints_a_summary_not_the_trainers_dict(
    capsys, qa: Path, tmp_path: Path, tiny_model_path: str, progress: tuple[str, ...]
) -> None:
    code, out, err = _train_dhr(capsys, qa, tmp_path / "m", tiny_model_path, *progress)
    assert code == 0, err
    assert out.startswith("trained DHR on 3 questions over 3 documents")
    assert "train_runtime" not in out + err and "{'" not in out


def test_train_dhr_cuts_passages_as_index_does(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    code, _, err = _train_dhr(capsys, qa, tmp_path / "m", tiny_model_path, "--no-progress")
    assert code == 0, err
    # QA documents: whole paragraphs, as `rag-hier index` cuts them (the passage ids are DOC#<paragraph>)
    assert json.loads((tmp_path / "m" / "dhr_training.json").read_text())["config"]["max_passage_words"] == 0
    code, _, err = _train_dhr(capsys, qa, tmp_path / "m2", tiny_model_path, "--no-progress", "--max-passage-words", 5)
    assert code == 0, err
    assert json.loads((tmp_path / "m2" / "dhr_training.json").read_text())["config"]["max_passage_words"] == 5


def test_train_dhr_has_one_documented_held_out_flag(capsys, qa: Path, tmp_path: Path, tiny_model_path: str) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "train", "dhr", "--help")
    help_text = capsys.readouterr().out
    assert "--eval-queries" in help_text and "--eval-qa" not in help_text
    assert "questions per training step" in help_text  # --batch-size: training, not encoding
    # the older spelling still works, as --eval-queries does: base and trained model side by side
    code, out, err = _train_dhr(capsys, qa, tmp_path / "m", tiny_model_path, "--no-progress", "--eval-qa",
                                qa / "questions.jsonl")  # fmt: skip
    assert code == 0, err
    assert "held out (3 queries)" in out and "the trained model is" in out


def test_tune_help_says_what_each_batch_size_and_aggregate_mean(capsys) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "tune", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "texts per encoding batch" in help_text and "not training's batch, which is --train-" in help_text
    assert "training pairs per optimizer step" in help_text
    assert "store.tune(..., level=...)" in help_text
