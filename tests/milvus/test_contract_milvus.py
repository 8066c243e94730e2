"""The store contract suite (``tests/store/contract``) on Milvus: Milvus Lite, or the server named by
``$RAG_HIER_TEST_MILVUS_URI`` (``scripts/test-milvus-server.sh``); skips without ``pymilvus`` (and ``milvus-lite``
for Lite)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pymilvus")

from rag_hier import HierStore
from rag_hier.errors import StoreError
from rag_hier.store.contract import FilterPushdown, StoreBackend
from rag_hier.store.milvus import MilvusStore
from rag_hier.store.milvus.migrate import local_to_milvus
from tests.store.contract import StoreContract


class MilvusFactory:
    """Collections on the session's Milvus (a Milvus Lite file or a server), one collection per store."""

    reuse_stores = True  # creating a collection waits ~0.5 s for each of its 11 indexes: tests share them

    def __init__(self, db: str) -> None:
        self.db = db

    def create(self, name: str, **options: Any) -> MilvusStore:
        return HierStore.create(uri=f"{self.db}#{name}", **options)

    def reopen(self, store: StoreBackend, *, read_only: bool = False, **options: Any) -> MilvusStore:
        options.setdefault("encoder", store.encoder)
        return HierStore.open(uri=store.location, read_only=read_only, **store.connection_options, **options)

    def copy_of(self, local: HierStore, name: str) -> MilvusStore:
        return local_to_milvus(local, f"{self.db}#{name}")

    def dispose(self, store: StoreBackend) -> None:
        if store.read_only:
            store.close()
            return
        try:
            store.drop()
        except StoreError:  # closed by the test: drop it through another handle
            again = self.reopen(store)
            again.drop()
            again.close()
        store.close()


class TestMilvusStore(StoreContract):
    """Every contract behaviour on ``MilvusStore`` (Milvus Lite, or the server of ``$RAG_HIER_TEST_MILVUS_URI``)."""

    @pytest.fixture(scope="class")
    @classmethod
    def factory(cls, milvus_db: str) -> MilvusFactory:
        return MilvusFactory(milvus_db)

    @pytest.fixture(scope="class")
    @classmethod
    def strategy_pair(cls, strategy_pair: tuple[HierStore, MilvusStore]) -> tuple[HierStore, MilvusStore]:
        """The session's pair (tests/milvus/conftest.py), shared with test_milvus_strategies.py."""
        return strategy_pair

    def test_capabilities(self, shared_store: StoreBackend) -> None:
        assert shared_store.filter_pushdown == FilterPushdown(numbers=False, max_members=1_000)
        assert not shared_store.can_forget_dimension
        assert shared_store.path is None and "timeout" in shared_store.connection_options
        shared_store.connection_options["timeout"] = -1  # a copy: the handle's own options stay as they are
        assert shared_store.connection_options["timeout"] != -1
