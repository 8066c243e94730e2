"""Fixtures for the Tied-Atomic tests: a tiny random T5 on MiniLM's vocabulary, a small corpus with judgements."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier.testing import SYNTHETIC_WORDS as WORDS
from rag_hier.testing import write_beir


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
    queries, qrels = judged
    return write_beir(tmp_path / "beir", corpus, queries, qrels)


@pytest.fixture(scope="session")
def tiny_encdec_path(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> str:
    """The MiniLM-style warm start built from the tiny random BERT (cross-attention copied from self-attention)."""
    from rag_hier.encoders.encdec import build_warm_started_encoder_decoder

    path = tmp_path_factory.mktemp("tiny-encdec")
    return str(
        build_warm_started_encoder_decoder(
            path, tiny_model_path, max_seq_length=32, cross_attention_init="self_attention"
        )
    )
