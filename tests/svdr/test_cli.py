"""``rag-hier index --token-index [--no-dense]``, ``search/eval --strategy svdr-*``, ``train svdr``."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from rag_hier import HierStore
from rag_hier.cli.main import main

DOCS = [
    {"_id": "d1", "title": "Tides", "text": "The moon pulls the oceans into two bulges.", "metadata": {"year": 2001}},
    {"_id": "d2", "title": "Bees", "text": "Honeybees store nectar as honey in wax cells.", "metadata": {"year": 2010}},
    {"_id": "d3", "title": "Volcanoes", "text": "Magma rises through cracks in the crust.", "metadata": {"year": 2015}},
    {"_id": "d4", "title": "Compost", "text": "Microbes turn kitchen scraps into humus.", "metadata": {"year": 2020}},
]


def run(*argv: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture()
def beir(tmp_path: Path) -> Path:
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    queries = [{"_id": f"q{d['_id']}", "text": f"{d['title']}, {d['text']}"} for d in DOCS]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = "".join(f"q{d['_id']}\t{d['_id']}\t1\n" for d in DOCS)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def test_no_dense_round_trip(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    store = tmp_path / "store"
    code, out, err = run(
        "index", beir, "--store", store, "--token-index", "--no-dense", "--model", tiny_model_path, "--no-progress"
    )
    assert code == 0, err
    assert "token index: 4 passages" in out and "0 vectors" in out
    assert {p.name for p in store.iterdir()} == {"manifest.json", "store.sqlite", "store.lock", "tokens.npz"}
    code, out, err = run("info", "--store", store)
    assert code == 0 and "built with --no-dense" in out, (out, err)
    code, out, err = run("search", "--store", store, "--query", "bees", "--no-progress")  # default: dense
    assert code != 0 and "--no-dense" in err and "svdr-lexical" in err, err
    for strategy in ("svdr-lexical", "svdr-beta", "svdr-beta-rerank", "svdr-alpha", "svdr-full"):
        code, out, err = run(
            "search",
            "--store",
            store,
            "--query",
            "Honeybees store nectar",
            "--strategy",
            strategy,
            "--top-k",
            "2",
            "--rerank-m",
            "2",
            "--no-progress",
        )
        assert code == 0, (strategy, err)
        assert out.splitlines()[0].split()[2] == "d2", (strategy, out)
    # β+rerank and full cached what they encoded, through a short-lived writable handle
    with HierStore.open(store, read_only=True) as s:
        assert len(s.extension("svdr-vectors").index) == 4
        assert s.manifest["counts"]["vectors"] == 0
    code, out, err = run(
        "eval",
        "--store",
        store,
        "--queries",
        beir / "queries.jsonl",
        "--qrels",
        beir / "qrels" / "test.tsv",
        "--strategy",
        "svdr-beta-rerank",
        "--no-progress",
    )
    assert code == 0, err
    assert "ndcg@10     1.0000" in out
    # dense search on a store without vectors is a clear error; re-indexing keeps it text-only
    code, _, err = run("search", "--store", store, "--query", "bees", "--no-progress")
    assert code == 2 and "--no-dense" in err
    code, out, err = run("index", beir, "--store", store, "--no-progress")
    assert code == 0, err
    assert "4 unchanged" in out and "token index: 4 passages" in out


def test_token_index_next_to_dense_vectors_and_svdr_vectors(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    store = tmp_path / "store"
    code, out, err = run(
        "index", beir, "--store", store, "--token-index", "--svdr-vectors", "--model", tiny_model_path, "--no-progress"
    )
    assert code == 0, err
    assert "4 vectors" in out and "SVDR vectors: 4 encoded" in out
    code, out, err = run(
        "search", "--store", store, "--query", "magma crust", "--strategy", "svdr-alpha", "--no-progress"
    )
    assert code == 0 and out.split()[2] == "d3", err
    code, out, err = run(
        "search", "--store", store, "--query", "magma crust", "--strategy", "svdr-full", "--no-cache", "--no-progress"
    )
    assert code == 0 and out.split()[2] == "d3", err


def test_cli_errors(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    code, _, err = run(
        "index", beir, "--store", tmp_path / "a", "--no-dense", "--model", tiny_model_path, "--no-progress"
    )
    assert code == 2 and "--token-index" in err
    code, _, err = run("index", beir, "--store", tmp_path / "b", "--model", tiny_model_path, "--no-progress")
    assert code == 0
    code, _, err = run("search", "--store", tmp_path / "b", "--query", "x", "--strategy", "svdr-beta", "--no-progress")
    assert code == 2 and "no token index" in err


def test_train_svdr_command(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    out_dir = tmp_path / "svdr-model"
    code, out, err = run(
        "train",
        "svdr",
        beir,
        "--queries",
        beir / "queries.jsonl",
        "--qrels",
        beir / "qrels" / "test.tsv",
        "--output",
        out_dir,
        "--model",
        tiny_model_path,
        "--batch-size",
        "2",
        "--max-steps",
        "1",
        "--negative-schedule",
        "beta",
        "--negative-depth",
        "30",
        "--no-progress",
    )
    assert code == 0, err
    assert "1 steps" in out and (out_dir / "vocab_encoder.json").is_file()
    config = json.loads((out_dir / "training.json").read_text())["config"]
    assert config["negative_schedule"] == "beta" and config["negative_depth"] == 30  # the 0.1.0 schedule
    assert config["attention_dropout"] == 0.0  # the default
    store = tmp_path / "store"
    assert (
        run(
            "index", beir, "--store", store, "--token-index", "--no-dense", "--model", tiny_model_path, "--no-progress"
        )[0]
        == 0
    )
    code, out, err = run(
        "search",
        "--store",
        store,
        "--query",
        "magma crust",
        "--strategy",
        "svdr-beta",
        "--vocab-model",
        out_dir,
        "--no-progress",
    )
    assert code == 0, err


QA_DOCS = [
    {"doc_id": "rivers", "title": "Rivers", "paragraphs": ["Rivers carry sediment.", "Deltas form where rivers slow."]},
    {"doc_id": "bees", "title": "Bees", "paragraphs": ["Bees make honey from nectar.", "A hive has one queen."]},
]
QA_QUESTIONS = [
    {"qid": "a", "question": "where do deltas form", "answers": ["deltas"], "doc_id": "rivers", "paragraph_index": 1},
    {"qid": "b", "question": "how many queens", "answers": ["one queen"], "doc_id": "bees", "paragraph_index": 1},
    {"qid": "c", "question": "what do bees make", "answers": ["honey"], "doc_id": "bees", "paragraph_index": 0},
]


def test_train_svdr_on_qa_questions_without_qrels(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    qa = tmp_path / "qa"
    qa.mkdir()
    (qa / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in QA_DOCS))
    (qa / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QA_QUESTIONS))
    common = ["--model", tiny_model_path, "--batch-size", "2", "--max-steps", "1", "--no-progress"]
    # each question judges its paragraph (DOC#N): three pairs over four passages
    with_bar = [c for c in common if c != "--no-progress"]
    questions = qa / "questions.jsonl"
    code, out, err = run("train", "svdr", qa, "--queries", questions, "--output", tmp_path / "m", *with_bar)
    assert code == 0, err
    assert "train_runtime" not in out + err  # the summary, not the transformers trainer's log dicts under the bar
    data = json.loads((tmp_path / "m" / "training.json").read_text())["data"]
    assert data == {"passages": 4, "queries": 3, "pairs": 3}
    # with passages split by words, the passages of the question's paragraph that hold an answer are judged
    code, _, err = run(
        "train", "svdr", qa, "--queries", qa / "questions.jsonl", "--output", tmp_path / "m2", "--max-passage-words",
        "3", *common,
    )  # fmt: skip
    assert code == 0, err
    data = json.loads((tmp_path / "m2" / "training.json").read_text())["data"]
    assert data["queries"] == 3 and data["pairs"] == 3 and data["passages"] > 4
    # BEIR queries carry no judgements: --qrels is required, and the message says why
    code, _, err = run("train", "svdr", beir, "--queries", beir / "queries.jsonl", "--output", tmp_path / "m3", *common)
    assert code == 2 and "--qrels is required" in err and "queries.jsonl" in err


def test_train_svdr_prints_base_and_trained(beir: Path, tmp_path: Path, tiny_model_path: str) -> None:
    code, out, err = run(
        "train", "svdr", beir, "--queries", beir / "queries.jsonl", "--qrels", beir / "qrels" / "test.tsv",
        "--output", tmp_path / "m", "--model", tiny_model_path, "--batch-size", "2", "--max-steps", "1",
        "--eval-queries", beir / "queries.jsonl", "--eval-qrels", beir / "qrels" / "test.tsv", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    header = [line for line in out.splitlines() if line.startswith("held out (4 queries)")]
    assert header and "base" in header[0] and "trained" in header[0]
    assert "the trained model is" in out and "held-out queries: ndcg@10" in out
