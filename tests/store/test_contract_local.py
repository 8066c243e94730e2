"""The store contract suite (``tests/store/contract``) on the local store (SQLite + FAISS in a directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rag_hier import HierStore
from rag_hier.store.contract import FilterPushdown, StoreBackend
from tests.store.contract import StoreContract


class LocalFactory:
    """Local stores in one temporary directory, one subdirectory per store."""

    reuse_stores = False  # a fresh directory per test: creating one takes milliseconds

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, name: str, **options: Any) -> HierStore:
        return HierStore.create(self.root / name, **options)

    def reopen(self, store: StoreBackend, *, read_only: bool = False, **options: Any) -> HierStore:
        options.setdefault("encoder", store.encoder)
        return HierStore.open(store.path, read_only=read_only, **options)

    def copy_of(self, local: HierStore, name: str) -> HierStore:
        target = local.snapshot(self.root / name)
        return HierStore.open(target, encoder=local.encoder)

    def dispose(self, store: StoreBackend) -> None:
        store.close()


class TestLocalStore(StoreContract):
    """Every contract behaviour on ``HierStore``."""

    @pytest.fixture(scope="class")
    @classmethod
    def factory(cls, tmp_path_factory: pytest.TempPathFactory) -> LocalFactory:
        return LocalFactory(tmp_path_factory.mktemp("contract-local"))

    def test_capabilities(self, shared_store: StoreBackend) -> None:
        assert shared_store.filter_pushdown == FilterPushdown(numbers=True, max_members=10_000)
        assert shared_store.can_forget_dimension
        assert shared_store.path is not None and shared_store.path.is_dir()
        assert shared_store.connection_options == {}
