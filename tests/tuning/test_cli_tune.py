"""``rag-hier tune`` on the command line: adoption, report files, rollback, dry run, and one-line errors."""

from __future__ import annotations

import json

from tests.tuning.helpers import COMMON, LEARN_FLAGS
from tests.tuning.helpers import fingerprint as _fingerprint
from tests.tuning.helpers import run_cli as _run


def test_tune_adopts_reports_and_rolls_back(judged_store, tmp_path) -> None:
    path, beir = judged_store
    report = tmp_path / "tune.json"
    code, out, err = _run(
        ["tune", "--store", str(path), "--beir", str(beir), *LEARN_FLAGS, *COMMON, "--report", str(report)]
    )
    assert code == 0, err
    assert "ADOPTED" in out and "ndcg@10" in out
    assert (
        "an embedder from outside rag-hier" in out
        and "an embedder from outside rag-hier" in (path / "tune.md").read_text()
    )
    assert "estimate:" in err and "held back" in err
    data = json.loads(report.read_text())
    assert data["adopted"] is True and data["method"] == "contrastive" and data["steps"] > 0
    assert data["difference"]["ndcg@10"]["ci_low"] > 0
    assert (path / "tune.md").is_file() and (path / "tune.svg").is_file()
    code, out, _ = _run(["info", "--store", str(path)])
    assert code == 0 and "kept in the store" in out and "previous" in out
    code, out, err = _run(["eval", "--store", str(path), "--beir", str(beir), "--split", "train", *COMMON])
    assert code == 0, err
    code, out, err = _run(["tune", "--store", str(path), "--rollback", *COMMON])
    assert code == 0, err
    assert out.startswith("rolled back")


def test_dry_run_leaves_the_store_as_it_was(judged_store) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    code, out, err = _run(["tune", "--store", str(path), "--beir", str(beir), "--dry-run", *LEARN_FLAGS, *COMMON])
    assert code == 0, err
    assert "dry run" in out and "estimate:" in err
    assert _fingerprint(path) == before


def _error(argv: list[str]) -> str:
    code, out, err = _run(argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rag-hier tune: error: "), err
    return lines[0]


def test_errors_are_one_line_and_change_nothing(judged_store, tmp_path) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    assert "--generator MODULE:FUNCTION" in _error(["tune", "--store", str(path), *COMMON])
    foreign = tmp_path / "qrels.tsv"
    foreign.write_text("query-id\tcorpus-id\tscore\nq0_0\tnope\t1\nq0_1\tnada\t1\n")
    line = _error(["tune", "--store", str(path), "--queries", str(beir / "queries.jsonl"), "--qrels", str(foreign)])
    assert "names a relevant document the store holds" in line
    one = tmp_path / "one.tsv"
    one.write_text("query-id\tcorpus-id\tscore\nq0_0\td0\t1\n")
    line = _error(["tune", "--store", str(path), "--queries", str(beir / "queries.jsonl"), "--qrels", str(one)])
    assert "in 5 folds needs at least 5 judged queries" in line
    assert "dev_fraction" in _error(["tune", "--store", str(path), "--beir", str(beir), "--dev-fraction", "1.5"])
    assert "no previous model" in _error(["tune", "--store", str(path), "--rollback", *COMMON])
    assert "does not exist" in _error(["tune", "--store", str(tmp_path / "none"), "--beir", str(beir)])
    assert _fingerprint(path) == before
