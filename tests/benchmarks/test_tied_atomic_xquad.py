"""bench_tied_atomic's XQuAD case: every paragraph a docid, each paragraph's questions split into training and test."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.common.smoke import smoke_data
from benchmarks.retrieval import bench_tied_atomic


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XQuAD-shaped folder: 3 articles of 2 paragraphs, 1 to 6 questions per paragraph (and the smoke SciFact)."""
    root = smoke_data(tmp_path_factory.mktemp("xquad-smoke"))
    qa = root / "xquad_en"
    docs, questions = [], []
    for a in range(3):
        paragraphs = [f"paragraph {p} of article {a} about topic{a}{p}" for p in range(2)]
        docs.append({"doc_id": f"Article_{a}", "title": f"Article {a}", "paragraphs": paragraphs})
        for p in range(2):
            for k in range(1 + (2 * a + p) % 6):
                questions.append(
                    {
                        "qid": f"q{a}{p}{k}",
                        "question": f"question {k} on topic{a}{p}?",
                        "answers": ["paragraph"],
                        "answer_starts": [0],
                        "doc_id": f"Article_{a}",
                        "paragraph_index": p,
                    }
                )
    (qa / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (qa / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return root


def test_every_paragraph_is_a_docid_with_questions_in_both_splits(data: Path) -> None:
    docs, queries, test, train = bench_tied_atomic.load_xquad_paragraphs(data, test_share=0.5, seed=0)
    qa = bench_tied_atomic.load_xquad(data)
    assert len(docs) == sum(len(d.paragraphs) for d in qa.documents)
    ids = [d.doc_id for d in docs]
    assert len(set(ids)) == len(ids)
    assert not set(test) & set(train)
    assert set(test) | set(train) == set(queries) == {q.qid for q in qa.questions if q.paragraph_index is not None}
    for q in qa.questions:  # each question keeps its own paragraph as its one relevant docid
        rels = (test.get(q.qid) or train[q.qid]).keys()
        assert list(rels) == [f"{q.doc_id}:{q.paragraph_index}"]
    per_para = Counter(f"{q.doc_id}:{q.paragraph_index}" for q in qa.questions)
    test_docs = Counter(next(iter(r)) for r in test.values())
    train_docs = Counter(next(iter(r)) for r in train.values())
    for pid, n in per_para.items():  # a paragraph with two or more questions is in both splits
        assert test_docs[pid] == (max(1, min(round(n * 0.5), n - 1)) if n > 1 else 1)
        assert train_docs[pid] == n - test_docs[pid]
    # seeded: the same split again, another with another seed
    assert bench_tied_atomic.load_xquad_paragraphs(data, test_share=0.5, seed=0)[2] == test
    assert bench_tied_atomic.load_xquad_paragraphs(data, test_share=0.5, seed=1)[2] != test


def test_bm25_stage_runs_on_xquad_paragraphs(data: Path, tmp_path: Path) -> None:
    bench_tied_atomic.main(
        ["bm25", "--dataset", "xquad", "--data", str(data), "--out", str(tmp_path), "--threads", "1"]
    )
    result = json.loads((tmp_path / "bm25-xquad.json").read_text(encoding="utf-8"))
    assert result["budget"]["dataset"] == "xquad" and 0 <= result["metrics"]["recall@1"] <= 1
