"""``rag-hier train ehi``: a 2-step run on the tiny model, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag_hier.cli.main import main
from rag_hier.index.ehi import INDEXER_FILES, EHIIndexer


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _common(beir_dir: Path, tiny_model_path: str) -> tuple[object, ...]:
    return (
        "--queries", beir_dir / "queries.jsonl", "--qrels", beir_dir / "qrels" / "train.tsv",
        "--base-model", tiny_model_path, "--max-seq-length", "24", "--no-progress", "--device", "cpu",
    )  # fmt: skip


def test_train_ehi_two_steps(tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path) -> None:
    out = tmp_path / "ehi-model"
    code, stdout, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", out, *_common(beir_dir, tiny_model_path),
        "--branching", "3", "--height", "2", "--lambdas", "0.3", "0.6", "0.1", "--encoder-lr", "1e-4",
        "--indexer-lr", "0.01", "--epochs", "2", "--refresh-every", "1", "--batch-size", "8", "--max-steps", "2",
        "--init", "kmeans", "--init-steps", "10", "--seed", "7", "--refit-epochs", "2",
    )  # fmt: skip
    assert code == 0, err
    assert "B=3, H=2: 9 leaves" in stdout and "2 steps" in stdout
    assert "train_runtime" not in stdout  # the summary, not the transformers trainer's log dicts
    assert "indexer refit on the final vectors for 2 epochs" in stdout
    assert all((out / name).is_file() for name in (*INDEXER_FILES, "modules.json", "ehi_training.json"))
    report = json.loads((out / "ehi_training.json").read_text())
    cfg = report["config"]
    assert (cfg["lambda_siamese"], cfg["lambda_indexing"], cfg["lambda_intra"]) == (0.3, 0.6, 0.1)
    assert (cfg["encoder_lr"], cfg["indexer_lr"], cfg["seed"], cfg["init"]) == (1e-4, 0.01, 7, "kmeans")
    assert cfg["refit_epochs"] == 2 and sum(p["epochs"] for p in report["refit_history"]) == 2
    assert EHIIndexer.from_pretrained(out).n_leaves == 9


def test_train_ehi_frozen_encoder(tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path) -> None:
    out = tmp_path / "frozen"
    code, stdout, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", out, *_common(beir_dir, tiny_model_path),
        "--branching", "4", "--epochs", "3", "--refresh-every", "2", "--batch-size", "8", "--freeze-encoder",
    )  # fmt: skip
    assert code == 0, err
    assert "indexer only (frozen encoder)" in stdout
    assert json.loads((out / "ehi_training.json").read_text())["steps"] == 3 * 4  # 25 pairs, batches of 8


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--branching", "1"), "--branching must be >= 2"),
        (("--mine-leaves", "0"), "--mine-leaves must be in 1..branching"),
        (("--refresh-every", "0"), "--refresh-every must be >= 1"),
        (("--lambdas", "-1", "0.5", "0.5"), "--lambdas (1st) must be >= 0"),
        (("--encoder-lr", "0"), "--encoder-lr must be > 0"),
        (("--refit-epochs", "-1"), "--refit-epochs must be >= 0"),
    ],
)
def test_bad_flags(tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path, extra, message) -> None:
    code, _, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", tmp_path / "m", *_common(beir_dir, tiny_model_path), *extra
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_bad_paths(tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path) -> None:
    common = _common(beir_dir, tiny_model_path)
    code, _, err = _run(capsys, "train", "ehi", tmp_path / "missing", "--output", tmp_path / "m", *common)
    assert code == 2 and "does not exist" in err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    code, _, err = _run(capsys, "train", "ehi", beir_dir, "--output", busy, *common)
    assert code == 2 and "not an empty directory" in err and (busy / "keep.txt").read_text() == "mine"
    bad_qrels = tmp_path / "qrels.tsv"
    bad_qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    code, _, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", tmp_path / "m2", *common[:2], "--qrels", bad_qrels, *common[4:]
    )
    assert code == 2 and "qrels.tsv" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:  # argparse: a required flag is missing
        _run(capsys, "train", "ehi", beir_dir, "--output", tmp_path / "m3", "--qrels", bad_qrels)
    assert exc.value.code == 2 and "--queries" in capsys.readouterr().err


def test_train_ehi_prints_base_and_trained_and_stops_at_max_minutes(
    tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path
) -> None:
    out = tmp_path / "ehi-model"
    code, stdout, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", out, *_common(beir_dir, tiny_model_path),
        "--branching", "3", "--height", "1", "--epochs", "3", "--refresh-every", "1", "--batch-size", "8",
        "--max-minutes", "0.0001", "--refit-epochs", "0",
        "--eval-queries", beir_dir / "queries.jsonl", "--eval-qrels", beir_dir / "qrels" / "train.tsv",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((out / "ehi_training.json").read_text())
    assert report["steps"] == 1 and report["config"]["max_minutes"] == 0.0001  # stopped after the first step
    header = [line for line in stdout.splitlines() if line.startswith("held out (")]
    assert header and "base" in header[0] and "trained" in header[0]
    assert "(exact search) on" in stdout and "held-out queries: ndcg@10" in stdout
    # held-out queries without judgements (not a QA file) are refused before anything is trained
    code, _, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", tmp_path / "m2", *_common(beir_dir, tiny_model_path),
        "--eval-queries", beir_dir / "queries.jsonl",
    )  # fmt: skip
    assert code == 2 and "--eval-qrels is required" in err and not (tmp_path / "m2").exists()
