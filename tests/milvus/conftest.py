"""The strategy pair the Milvus tests share (``milvus_db``, where collections go, is in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def strategy_pair(
    tmp_path_factory: pytest.TempPathFactory, milvus_db: str, tiny_model_path: str
) -> Iterator[tuple[Any, Any]]:
    """The contract's strategy reference (a local store with every extension) and its copy in Milvus
    (Milvus Lite, or the server of ``$RAG_HIER_TEST_MILVUS_URI``).

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
    remote.drop()  # (on a server the collection would outlive the session)
    remote.close()
    local.close()
