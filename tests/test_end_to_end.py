"""End to end with the real offline MiniLM: ``rag-hier index`` then ``rag-hier eval`` on real data.

Indexing all of SciFact takes minutes on a CPU, so the SciFact test indexes a slice: the first 300
documents plus every document judged relevant for the first 20 test queries (the distractors are real
SciFact abstracts, so the task stays meaningful, just smaller).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rag_hier import HierStore
from rag_hier.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.real_model


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


@pytest.mark.data
def test_scifact_slice(
    shared_data: Path, real_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scifact = shared_data / "scifact"
    if not (scifact / "corpus.jsonl.gz").is_file():
        pytest.skip(f"SciFact not found under {scifact}")
    qrels: dict[str, dict[str, str]] = {}
    lines = (scifact / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:  # header: query-id corpus-id score
        qid, doc, score = line.split("\t")
        if qid not in qrels and len(qrels) == 20:
            continue
        qrels.setdefault(qid, {})[doc] = score
    relevant = {d for docs in qrels.values() for d in docs}

    corpus = tmp_path / "scifact" / "corpus.jsonl"
    corpus.parent.mkdir()
    kept = 0
    with gzip.open(scifact / "corpus.jsonl.gz", "rt", encoding="utf-8") as src, corpus.open("w") as dst:
        for n, line in enumerate(src):
            if n < 300 or json.loads(line)["_id"] in relevant:
                dst.write(line)
                kept += 1
    queries = tmp_path / "scifact" / "queries.jsonl"
    with (scifact / "queries.jsonl").open(encoding="utf-8") as src, queries.open("w") as dst:
        dst.writelines(line for line in src if json.loads(line)["_id"] in qrels)
    qrels_file = tmp_path / "scifact" / "qrels.tsv"
    qrels_file.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, ds in qrels.items() for d, s in ds.items()),
        encoding="utf-8",
    )

    store = tmp_path / "store"
    out = _run(
        capsys, "index", corpus.parent, "--store", store, "--model", real_model_path, "--no-progress", "--device", "cpu"
    )
    assert f"store now holds {kept} documents, {kept} passages" in out  # BEIR documents are kept whole
    metrics = tmp_path / "metrics.json"
    _run(
        capsys,
        "eval",
        "--store",
        store,
        "--queries",
        queries,
        "--qrels",
        qrels_file,
        "--output",
        metrics,
        "--no-progress",
        "--device",
        "cpu",
    )
    report = json.loads(metrics.read_text())
    assert report["queries"] == 20 and report["level"] == "doc"
    # measured on this slice: nDCG@10 0.925, Recall@10 0.95, Recall@100 1.0, MRR@10 0.917 (the full
    # SciFact test set, with 5,183 documents, gives nDCG@10 0.645)
    assert report["metrics"]["ndcg@10"] > 0.8
    assert report["metrics"]["recall@100"] > 0.9


def test_examples_corpus(real_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    _run(
        capsys,
        "index",
        EXAMPLES / "corpus",
        "--store",
        store,
        "--model",
        real_model_path,
        "--no-progress",
        "--device",
        "cpu",
    )
    metrics = tmp_path / "metrics.json"
    _run(
        capsys,
        "eval",
        "--store",
        store,
        "--queries",
        EXAMPLES / "queries.jsonl",
        "--qrels",
        EXAMPLES / "qrels.tsv",
        "--aggregate",
        "doc",
        "--output",
        metrics,
        "--no-progress",
        "--device",
        "cpu",
    )
    report = json.loads(metrics.read_text())
    assert report["level"] == "doc"
    assert report["queries"] == sum(1 for line in (EXAMPLES / "queries.jsonl").open() if line.strip())
    assert report["metrics"]["recall@10"] == 1.0
    assert report["metrics"]["mrr@10"] > 0.8


@pytest.mark.slow
def test_finetune_private_corpus_example_runs(tmp_path: Path) -> None:
    """examples/finetune_private_corpus.py, as a user runs it: index, generated questions, guarded tuning."""
    import subprocess
    import sys

    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "finetune_private_corpus.py"), "--steps", "2", "--work", str(work)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "9 documents" in out and "questions" in out
    assert "base  candidate" in out and "ndcg@10" in out
    verdict = [line for line in out.splitlines() if line.startswith(("ADOPTED", "not adopted"))]
    assert len(verdict) == 1
    store = HierStore.open(work / "store")
    stored = bool(store.model_info["current"].get("stored"))
    store.close()
    assert stored == verdict[0].startswith("ADOPTED")  # the store holds the tuned model only when adopted
