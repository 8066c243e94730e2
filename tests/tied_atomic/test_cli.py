"""CLI: train tied-atomic -> index --model -> search / eval; bad inputs give one line and exit 2."""

from __future__ import annotations

import json

from rag_hier.cli.main import main


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_train_index_search_eval(tmp_path, capsys, tiny_t5_path, beir_dir):
    model = tmp_path / "tied"
    q, r = beir_dir / "queries.jsonl", beir_dir / "qrels" / "train.tsv"
    code, out, err = _run(
        capsys, "train", "tied-atomic", beir_dir, "--queries", q, "--qrels", r, "--output", model,
        "--base-model", tiny_t5_path, "--max-steps", "2", "--batch-size", "4", "--bm25-depth", "3",
        "--max-seq-length", "32", "--eval-queries", q, "--eval-qrels", r, "--device", "cpu", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert "2 steps" in out and "model saved to" in out
    assert "train_runtime" not in out  # the summary, not the transformers trainer's log dicts
    assert "held out (" in out and "trained" in out and "the trained model is" in out  # base and trained, paired
    assert json.loads((model / "tied_atomic_training.json").read_text())["config"]["max_seq_length"] == 32
    store = tmp_path / "store"
    code, out, err = _run(capsys, "index", beir_dir, "--store", store, "--model", model, "--no-progress")
    assert code == 0, err
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["encoder"]["normalize_embeddings"] is False and manifest["dimension"] == 32
    code, out, err = _run(capsys, "search", "--store", store, "--query", "apple banana")
    assert code == 0 and " 1. " in out, err
    code, out, err = _run(capsys, "eval", "--store", store, "--queries", q, "--qrels", r)
    assert code == 0 and "ndcg@10" in out, err


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys, tiny_model_path, tiny_t5_path, beir_dir):
    q, r = beir_dir / "queries.jsonl", beir_dir / "qrels" / "train.tsv"
    common = ("--queries", q, "--qrels", r, "--max-steps", "1", "--batch-size", "4", "--device", "cpu", "--no-progress")
    code, _, err = _run(capsys, "train", "tied-atomic", beir_dir, "--output", tmp_path / "m", "--base-model",
                        tiny_model_path, *common)  # fmt: skip
    assert code == 2 and "not an encoder-decoder" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()
    code, _, err = _run(capsys, "train", "tied-atomic", tmp_path / "nope", "--output", tmp_path / "m", *common)
    assert code == 2 and "does not exist" in err
    code, _, err = _run(capsys, "train", "tied-atomic", beir_dir, "--output", tmp_path / "m", "--bm25-depth", "0",
                        "--base-model", tiny_t5_path, *common)  # fmt: skip
    assert code == 2 and "--bm25-depth must be" in err
    code, _, err = _run(capsys, "train", "tied-atomic", beir_dir, "--output", tmp_path / "m", "--eval-queries", q,
                        "--base-model", tiny_t5_path, *common)  # fmt: skip
    assert code == 2 and "--eval-qrels is required unless --eval-queries is a QA questions.jsonl" in err
    # a store built with the Tied-Atomic model refuses another model, and keeps its documents
    store = tmp_path / "store"
    assert _run(capsys, "index", beir_dir, "--store", store, "--model", tiny_t5_path, "--no-progress")[0] == 0
    code, _, err = _run(capsys, "index", beir_dir, "--store", store, "--model", tiny_model_path, "--no-progress")
    assert code == 2 and "was built with model" in err
    code, out, _ = _run(capsys, "info", "--store", store)
    assert code == 0 and "30" in out


def test_max_minutes_stops_after_the_current_step(tmp_path, capsys, tiny_t5_path, beir_dir):
    q, r = beir_dir / "queries.jsonl", beir_dir / "qrels" / "train.tsv"
    code, _, err = _run(
        capsys, "train", "tied-atomic", beir_dir, "--queries", q, "--qrels", r, "--output", tmp_path / "m",
        "--base-model", tiny_t5_path, "--max-steps", "6", "--batch-size", "4", "--bm25-depth", "3",
        "--max-seq-length", "32", "--max-minutes", "0.0001", "--device", "cpu", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "m" / "tied_atomic_training.json").read_text())
    assert report["steps"] == 1 and report["config"]["max_minutes"] == 0.0001
