"""Fixtures for the Tied-Atomic tests: a tiny random T5 on MiniLM's vocabulary, a small corpus with judgements."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

WORDS = [
    "apple",
    "banana",
    "cherry",
    "river",
    "mountain",
    "ocean",
    "forest",
    "desert",
    "city",
    "village",
    "music",
    "painting",
    "science",
    "history",
    "volcano",
    "glacier",
    "harbor",
    "castle",
    "garden",
    "bridge",
    "engine",
    "planet",
    "comet",
    "meadow",
]


@pytest.fixture(scope="session")
def tiny_t5_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random T5 (v1.0 style, 32-d) as a Tied-Atomic sentence-transformers directory."""
    from rag_hier.testing import build_tiny_t5

    return str(build_tiny_t5(tmp_path_factory.mktemp("tiny-t5")))


@pytest.fixture(scope="session")
def corpus() -> dict[str, str]:
    rng = np.random.default_rng(0)
    return {f"d{i}": " ".join(rng.choice(WORDS, 20)) for i in range(30)}


@pytest.fixture(scope="session")
def judged(corpus: dict[str, str]) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {f"q{i}": " ".join(corpus[f"d{i}"].split()[:5]) for i in range(16)}
    return queries, {f"q{i}": {f"d{i}": 1} for i in range(16)}


@pytest.fixture()
def beir_dir(tmp_path: Path, corpus: dict[str, str], judged: tuple[dict[str, str], dict]) -> Path:
    d = tmp_path / "beir"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in corpus.items())
    )
    queries, qrels = judged
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (d / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{x}\t1\n" for q, r in qrels.items() for x in r)
    )
    return d
