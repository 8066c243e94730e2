"""Fixtures for the EHI tests: a small synthetic corpus with queries and judgements, and a BEIR folder of it."""

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
def ehi_corpus() -> dict[str, str]:
    rng = np.random.default_rng(0)
    return {f"d{i}": " ".join(rng.choice(WORDS, 20)) for i in range(48)}


@pytest.fixture(scope="session")
def ehi_queries(ehi_corpus: dict[str, str]) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {f"q{i}": " ".join(ehi_corpus[f"d{i}"].split()[:6]) for i in range(24)}
    qrels: dict[str, dict[str, int]] = {f"q{i}": {f"d{i}": 1} for i in range(24)}
    qrels["q0"]["d30"] = 1  # a query with two relevant documents
    return queries, qrels


@pytest.fixture()
def beir_dir(tmp_path: Path, ehi_corpus: dict[str, str], ehi_queries: tuple[dict, dict]) -> Path:
    d = tmp_path / "beir"
    d.mkdir()
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in ehi_corpus.items())
    )
    queries, qrels = ehi_queries
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (d / "qrels").mkdir()
    (d / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d_}\t{g}\n" for q, r in qrels.items() for d_, g in r.items())
    )
    return d
