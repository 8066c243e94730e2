"""Milvus Lite fixtures shared by the Milvus tests: one database file per session, and the strategy pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def milvus_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Milvus Lite file for the session (one server; each test uses its own collections in it)."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    return tmp_path_factory.mktemp("milvus") / "m.db"


@pytest.fixture(scope="session")
def strategy_pair(
    tmp_path_factory: pytest.TempPathFactory, milvus_db: Path, tiny_model_path: str
) -> Iterator[tuple[Any, Any]]:
    """The contract's strategy reference (a local store with every extension) and its copy in Milvus Lite.

    Built once: the contract suite compares every strategy on it, ``test_milvus_strategies.py`` checks the
    migration and the in-engine searches on it.
    """
    from rag_hier.encoders import DenseEncoder
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.store.milvus import MilvusStore
    from rag_hier.store.milvus.migrate import local_to_milvus
    from tests.store.contract.search import strategy_reference

    encoder = DenseEncoder(tiny_model_path, device="cpu")
    vocab = VocabEncoder(tiny_model_path, device="cpu", batch_size=8)
    local = strategy_reference(tmp_path_factory.mktemp("strategies") / "local", encoder, tiny_model_path, vocab)
    remote = local_to_milvus(local, f"{milvus_db}#strategies")
    remote.close()
    remote = MilvusStore.open(f"{milvus_db}#strategies", encoder=encoder)
    yield local, remote
    remote.close()
    local.close()
