"""CLI round trip: train hce -> index --model --tree -> search --strategy tree -v -> incremental index."""

from __future__ import annotations

import json
import logging

import pytest

from rag_hier.cli.main import main


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def beir_dir(tmp_path, small_corpus, small_queries):
    d = tmp_path / "beir"
    d.mkdir()
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in small_corpus.items())
    )
    queries, qrels = small_queries
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (d / "qrels").mkdir()
    (d / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d_}\t1\n" for q, r in qrels.items() for d_ in r)
    )
    return d


def test_train_index_search_round_trip(tmp_path, capsys, caplog, tiny_model_path, beir_dir):
    model = tmp_path / "hce-model"
    code, out, err = _run(
        capsys, "train", "hce", beir_dir, "--output", model, "--mode", "supervised",
        "--queries", beir_dir / "queries.jsonl", "--qrels", beir_dir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--epochs", "1", "--max-steps", "2", "--batch-size", "4",
        "--branching", "4", "--max-seq-length", "24", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert "model saved to" in out and (model / "modules.json").is_file()
    store = tmp_path / "store"
    code, out, err = _run(
        capsys, "index", beir_dir, "--store", store, "--model", model, "--tree", "--branching", "4", "--no-progress"
    )
    assert code == 0, err
    assert "tree: 48 passages, b=4" in out
    caplog.set_level(logging.INFO, logger="rag_hier.cli")
    code, out, err = _run(
        capsys, "-v", "search", "--store", store, "--query", "apple banana", "--strategy", "tree", "--beam", "2"
    )
    assert code == 0, err
    assert " 1. " in out
    assert any("scored" in r.getMessage() for r in caplog.records)
    (beir_dir / "corpus.jsonl").open("a").write(
        json.dumps({"_id": "extra", "title": "", "text": "comet planet"}) + "\n"
    )
    code, out, err = _run(capsys, "index", beir_dir, "--store", store, "--no-progress")
    assert code == 0, err
    assert "1 routed and 0 removed since it was built" in out


def test_cli_errors(tmp_path, capsys, tiny_model_path, beir_dir):
    code, _, err = _run(capsys, "train", "hce", beir_dir, "--output", tmp_path / "m", "--mode", "supervised")
    assert code == 2 and "needs --queries (and --qrels, unless they are QA questions)" in err
    store = tmp_path / "s"
    code, _, err = _run(capsys, "index", beir_dir, "--store", store, "--model", tiny_model_path, "--no-progress")
    assert code == 0
    code, _, err = _run(capsys, "search", "--store", store, "--query", "x", "--strategy", "tree")
    assert code == 2 and "--tree" in err


def test_queries_given_without_a_mode_train_supervised(tmp_path, capsys, tiny_model_path, beir_dir):
    model = tmp_path / "m"
    code, out, err = _run(
        capsys, "train", "hce", beir_dir, "--output", model,
        "--queries", beir_dir / "queries.jsonl", "--qrels", beir_dir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--epochs", "1", "--max-steps", "1", "--batch-size", "4",
        "--branching", "4", "--max-seq-length", "24", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert "trained HCE (supervised)" in out
    assert json.loads((model / "hce_training.json").read_text())["config"]["mode"] == "supervised"
    code, _, err = _run(
        capsys, "train", "hce", beir_dir, "--output", tmp_path / "u", "--mode", "unsupervised",
        "--queries", beir_dir / "queries.jsonl", "--base-model", tiny_model_path,
    )  # fmt: skip
    assert code == 2 and "--mode unsupervised trains on the corpus alone" in err


def test_joint_flags_reach_the_training_report(tmp_path, capsys, tiny_model_path, beir_dir):
    model = tmp_path / "joint-model"
    common = (
        "--queries", beir_dir / "queries.jsonl", "--qrels", beir_dir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--epochs", "1", "--max-steps", "1", "--batch-size", "4",
        "--branching", "4", "--max-seq-length", "24", "--no-progress",
    )  # fmt: skip
    code, _, err = _run(
        capsys, "train", "hce", beir_dir, "--output", model, "--mode", "joint",
        "--joint-schedule", "alternate", "--ict-remove-rate", "0.9", "--direction-reduction", "mean",
        "--level-weight", "0.2", "--attention-dropout", "-1", "--mini-batch-size", "0", *common,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((model / "hce_training.json").read_text())
    assert report["config"]["joint_schedule"] == "alternate" and report["config"]["ict_remove_rate"] == 0.9
    # the trainer's switches: the pre-fix loss weighting, the model's own attention dropout, no GradCache
    assert report["config"]["direction_reduction"] == "mean" and report["config"]["level_weight"] == 0.2
    assert report["config"]["attention_dropout"] is None and report["config"]["mini_batch_size"] is None
    code, _, err = _run(capsys, "train", "hce", beir_dir, "--output", tmp_path / "x", "--ict-remove-rate", "2", *common)
    assert code == 2 and "--ict-remove-rate must be in [0, 1]" in err
