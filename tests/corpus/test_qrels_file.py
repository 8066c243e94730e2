"""read_qrels_file (repeated rows kept by line) and beir_split_files (BEIR folder layout, gzip, splits)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from rag_hier.corpus import beir_split_files, read_qrels, read_qrels_file
from rag_hier.errors import CorpusFormatError


def test_read_qrels_file_lists_repeated_rows(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq1\td1\t1\n\nq1\td1\t1\n", encoding="utf-8")
    info = read_qrels_file(path)
    assert info.qrels == read_qrels(path) == {"q1": {"d1": 1, "d2": 0}}
    assert info.rows == 4 and info.duplicates == (("q1", "d1", 4, 2), ("q1", "d1", 6, 2))
    assert info.path == path


def test_beir_split_files(tmp_path: Path) -> None:
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    with gzip.open(root / "queries.jsonl.gz", "wt") as f:
        f.write('{"_id": "q1", "text": "x"}\n')
    (root / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    with gzip.open(root / "qrels" / "dev.tsv.gz", "wt") as f:
        f.write("q1\td1\t1\n")
    assert beir_split_files(root) == (root / "queries.jsonl.gz", root / "qrels" / "test.tsv")
    assert beir_split_files(root, "dev")[1] == root / "qrels" / "dev.tsv.gz"
    assert read_qrels(beir_split_files(root, "dev")[1]) == {"q1": {"d1": 1}}
    with pytest.raises(CorpusFormatError, match=r"split 'train' \(it has dev, test\)") as exc:
        beir_split_files(root, "train")
    assert str(exc.value).startswith(f"{root}: ")
    (root / "queries.jsonl.gz").unlink()
    with pytest.raises(CorpusFormatError, match=r"no queries\.jsonl"):
        beir_split_files(root)
    with pytest.raises(CorpusFormatError, match="does not exist"):
        beir_split_files(tmp_path / "nope")
