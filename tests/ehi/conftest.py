"""Fixtures for the EHI tests: a small synthetic corpus with queries and judgements, and a BEIR folder of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier.testing import SYNTHETIC_WORDS as WORDS
from rag_hier.testing import write_beir


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
    queries, qrels = ehi_queries
    return write_beir(tmp_path / "beir", ehi_corpus, queries, qrels)
