"""Inputs of each benchmark's smallest setting: a tiny random model and generated SciFact- and XQuAD-shaped data.

``tests/benchmarks`` runs every script on these (``python -m benchmarks.<folder>.<script> --data DIR --model
MODEL ...``), and the device scripts' ``--smoke`` mode builds them, so that no script rots between real runs.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path


def tiny_model(path: Path) -> str:
    """The test suite's tiny random BERT (built once per folder)."""
    from rag_hier.testing import build_tiny_model

    if not (path / "modules.json").exists():
        build_tiny_model(path)
    return str(path)


_WORDS = [
    *("cell", "protein", "gene", "tumor", "immune", "virus", "brain", "heart", "blood", "insulin", "muscle"),
    *("bone", "liver", "lung", "kidney", "neuron", "enzyme", "receptor", "antibody", "vaccine", "mutation"),
    *("therapy", "dose", "trial", "risk", "mortality", "infection", "cancer", "diabetes"),
]


def smoke_beir(path: Path, n_docs: int = 60, n_queries: int = 40, seed: int = 0) -> Path:
    """A small BEIR-shaped folder (``corpus.jsonl.gz``, ``queries.jsonl``, ``qrels/{train,test}.tsv``).

    Each query repeats words of its one relevant document, so a trained model has something to learn.
    """
    if (path / "qrels" / "test.tsv").exists():
        return path
    rng = random.Random(seed)
    (path / "qrels").mkdir(parents=True, exist_ok=True)
    docs = {f"d{i}": " ".join(rng.choices(_WORDS, k=40)) for i in range(n_docs)}
    with gzip.open(path / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i, (doc_id, text) in enumerate(docs.items()):
            fh.write(json.dumps({"_id": doc_id, "title": f"Study {i}", "text": text}) + "\n")
    rows: dict[str, list[str]] = {"train": [], "test": []}
    with (path / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for q in range(n_queries):
            doc_id = f"d{rng.randrange(n_docs)}"
            words = docs[doc_id].split()
            fh.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.sample(words, 6))}) + "\n")
            rows["train" if q % 4 else "test"].append(f"q{q}\t{doc_id}\t1")
    for split, lines in rows.items():
        (path / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return path


def smoke_qa(path: Path, n_docs: int = 8, paragraphs: int = 3, seed: int = 0) -> Path:
    """A small XQuAD-shaped folder (``documents.jsonl``, ``questions.jsonl``): documents → paragraphs → questions.

    Each question repeats words of its paragraph and names one of them as its answer.
    """
    if (path / "questions.jsonl").exists():
        return path
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    docs, questions = [], []
    for d in range(n_docs):
        paras = [" ".join(rng.choices(_WORDS, k=30)) for _ in range(paragraphs)]
        docs.append({"doc_id": f"doc{d}", "title": f"Topic {d}", "paragraphs": paras})
        for i, text in enumerate(paras):
            words = text.split()
            answer = words[5]
            questions.append(
                {
                    "qid": f"q{d}-{i}",
                    "question": " ".join(rng.sample(words, 6)),
                    "answers": [answer],
                    "answer_starts": [text.index(answer)],
                    "doc_id": f"doc{d}",
                    "paragraph_index": i,
                }
            )
    for name, rows in (("documents.jsonl", docs), ("questions.jsonl", questions)):
        (path / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def smoke_data(path: Path) -> Path:
    """A data folder (see :func:`benchmarks.common.data.data_dir`) with generated ``scifact/`` and ``xquad_en/``."""
    smoke_beir(path / "scifact")
    smoke_qa(path / "xquad_en")
    return path
