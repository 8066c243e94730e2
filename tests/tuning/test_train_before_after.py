"""``rag-hier train hce|dhr --eval-queries``: base and trained model side by side; HCE takes QA questions."""

from __future__ import annotations

import json

from rag_hier.cli.main import main


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_hce_supervised_prints_base_and_trained(tmp_path, capsys, tiny_model_path, judged_template) -> None:
    _, beir = judged_template
    code, out, err = _run(
        capsys, "train", "hce", beir, "--output", tmp_path / "m", "--mode", "supervised",
        "--queries", beir / "queries.jsonl", "--qrels", beir / "qrels" / "train.tsv",
        "--eval-queries", beir / "queries.jsonl", "--eval-qrels", beir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--epochs", "1", "--max-steps", "2", "--batch-size", "8",
        "--branching", "4", "--no-progress", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    header = [line for line in out.splitlines() if line.startswith("held out (200 queries)")]
    assert header and "base" in header[0] and "trained" in header[0]
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ") and "@" in line}
    assert {"ndcg@10", "recall@10", "recall@100", "mrr@10"} <= set(rows)
    assert "the trained model is" in out and "held-out queries: ndcg@10" in out


def _qa_files(tmp_path):
    docs = tmp_path / "documents.jsonl"
    questions = tmp_path / "questions.jsonl"
    words = ["river", "stone", "cloud", "garden", "engine", "violin", "market", "planet"]
    rows, qs = [], []
    for i in range(8):
        paragraphs = [f"{words[i]} {words[(i + 1) % 8]} story {k}" for k in range(2)]
        rows.append({"doc_id": f"doc{i}", "title": f"T{i}", "paragraphs": paragraphs})
        for k in range(2):
            qs.append({"qid": f"q{i}_{k}", "question": paragraphs[k], "doc_id": f"doc{i}", "paragraph_index": k})
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    questions.write_text("".join(json.dumps(q) + "\n" for q in qs))
    return docs, questions


def test_hce_supervised_takes_qa_questions(tmp_path, capsys, tiny_model_path) -> None:
    docs, questions = _qa_files(tmp_path)
    code, out, err = _run(
        capsys, "train", "hce", docs, "--output", tmp_path / "m", "--mode", "supervised",
        "--queries", questions, "--eval-queries", questions,
        "--base-model", tiny_model_path, "--epochs", "1", "--max-steps", "1", "--batch-size", "4",
        "--branching", "2", "--no-progress", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    assert "held out (16 queries)" in out  # paragraph-level judgements from the gold paragraphs


def test_eval_qrels_without_queries_is_an_error(tmp_path, capsys, tiny_model_path) -> None:
    docs, questions = _qa_files(tmp_path)
    code, _, err = _run(
        capsys, "train", "hce", docs, "--output", tmp_path / "m", "--mode", "unsupervised", "--eval-qrels", questions,
        "--base-model", tiny_model_path, "--max-steps", "1", "--batch-size", "4", "--branching", "2", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "--eval-qrels needs --eval-queries" in err


def test_hce_stops_at_max_minutes(tmp_path, capsys, tiny_model_path, judged_template) -> None:
    _, beir = judged_template
    code, _, err = _run(
        capsys, "train", "hce", beir, "--output", tmp_path / "m", "--mode", "supervised",
        "--queries", beir / "queries.jsonl", "--qrels", beir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--epochs", "2", "--max-steps", "40", "--batch-size", "8",
        "--branching", "4", "--no-progress", "--device", "cpu", "--max-minutes", "0.0001",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "m" / "hce_training.json").read_text())
    trained = [e for e in report["history"] if e["epoch"] > 0]  # epoch 0: the base model's dev figures
    assert report["steps"] == 1 and len(trained) == 1  # stopped after the first step, no second epoch


def test_hce_prints_its_summary_not_the_trainers_dict(tmp_path, capsys, tiny_model_path) -> None:
    docs, questions = _qa_files(tmp_path)
    for progress in ((), ("--no-progress",)):  # with the bar and without
        code, out, err = _run(
            capsys, "train", "hce", docs, "--output", tmp_path / f"m{len(progress)}", "--mode", "supervised",
            "--queries", questions, "--base-model", tiny_model_path, "--max-steps", "1", "--batch-size", "4",
            "--branching", "2", "--device", "cpu", *progress,
        )  # fmt: skip
        assert code == 0, err
        assert out.startswith("trained HCE") and "train_runtime" not in out + err
