"""bench_tied_atomic's XQuAD case: every paragraph a docid, each paragraph's questions split into training and test."""

from __future__ import annotations

import json
import math
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
    per_query = result["per_query_ndcg@10"]  # what ``paired`` compares
    test = bench_tied_atomic.load_xquad_paragraphs(data)[2]
    assert set(per_query) == set(test) and sum(per_query.values()) / len(per_query) == pytest.approx(
        result["metrics"]["ndcg@10"], abs=1e-4
    )


def test_dsi_probe_stage_reads_a_saved_model(data: Path, tmp_path: Path) -> None:
    """``dsi-probe``: the probe of a saved seq2seq DSI-atomic model, with how much its first state varies by input."""
    from rag_hier.retrieval.dsi_seq2seq import DSIAtomicSeq2SeqModel
    from rag_hier.testing import build_tiny_t5
    from rag_hier.training.corpus import as_training_corpus

    ids = as_training_corpus(bench_tied_atomic.load_xquad_paragraphs(data)[0], 0).ids
    saved = tmp_path / "dsi"
    DSIAtomicSeq2SeqModel.from_pretrained(str(build_tiny_t5(tmp_path / "t5")), ids, device="cpu").save(saved)
    argv = ["dsi-probe", "--dataset", "xquad", "--data", str(data), "--out", str(tmp_path), "--threads", "1"]
    bench_tied_atomic.main([*argv, "--model", str(saved), "--tag=-t5"])
    probe = json.loads((tmp_path / "dsi-probe-xquad-t5.json").read_text(encoding="utf-8"))["probe"]
    assert probe["chance_docid_ce_docids"] == pytest.approx(math.log(len(ids)), abs=1e-4)
    for task in ("retrieval", "indexing"):
        # an untrained random T5 reads its input: different inputs, different first states
        assert -1.0 <= probe[task]["first_state_cosine"] < 0.999 and probe[task]["first_state_std"] > 0
    # without --model: the untrained start (here the tiny T5 as --base-model), its docid rows as --dsi-init
    bench_tied_atomic.main([*argv, "--base-model", str(tmp_path / "t5"), "--dsi-init", "random", "--tag=-start"])
    start = json.loads((tmp_path / "dsi-probe-xquad-start.json").read_text(encoding="utf-8"))
    assert start["model"].startswith("untrained start") and start["model"].endswith("(docid rows: random)")
    assert start["probe"]["retrieval"]["first_state_cosine"] == pytest.approx(probe["retrieval"]["first_state_cosine"])


def test_mean_pairwise_cosine() -> None:
    import numpy as np

    same = np.tile([[1.0, 2.0, 3.0]], (4, 1))
    assert bench_tied_atomic._mean_pairwise_cosine(same) == pytest.approx(1.0)
    assert bench_tied_atomic._mean_pairwise_cosine(np.eye(3)) == pytest.approx(0.0)
    assert bench_tied_atomic._mean_pairwise_cosine(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-1.0)
