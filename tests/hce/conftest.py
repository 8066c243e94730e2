"""Fixtures for the HCE tests: a small synthetic corpus with queries and judgements."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier.testing import SYNTHETIC_WORDS as WORDS


@pytest.fixture(scope="session")
def small_corpus() -> dict[str, str]:
    rng = np.random.default_rng(0)
    return {f"d{i}": " ".join(rng.choice(WORDS, 24)) for i in range(48)}


@pytest.fixture(scope="session")
def small_queries(small_corpus: dict[str, str]) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {f"q{i}": " ".join(small_corpus[f"d{i}"].split()[:6]) for i in range(24)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(24)}
    return queries, qrels


@pytest.fixture(scope="session")
def unit_vectors() -> np.ndarray:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)
