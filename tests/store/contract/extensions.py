"""Extensions: hooks follow every write, files persist with the commit and roll back with a failed batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import Document, Passage
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.extensions.base import register_extension

from .base import ContractBase, StoreFactory


@register_extension
class RowidLog(StoreExtension):
    """Keeps the set of live passage rowids and the documents seen changing."""

    name = "test-rowid-log"
    FILES = ("rowids.npy",)

    def __init__(self, label: str = "x") -> None:
        self.label = label
        self.rowids: set[int] = set()
        self.changed: list[set[str]] = []

    def config(self) -> dict:
        return {"label": self.label}

    def files(self) -> list[str]:
        return ["rowids.npy"]

    def write(self, paths: Mapping[str, Path]) -> None:
        with paths["rowids.npy"].open("wb") as f:
            np.save(f, np.array(sorted(self.rowids), dtype=np.int64), allow_pickle=False)

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        self.rowids = set(np.load(paths["rowids.npy"], allow_pickle=False).tolist())

    def build(self, store: StoreBackend) -> None:
        self.rowids = set(store.rowids_of().tolist()) if hasattr(store, "rowids_of") else set()

    def on_passages_added(
        self, store: Any, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        assert len(rowids) == len(passages)
        self.rowids |= set(rowids.tolist())

    def on_passages_removed(self, store: Any, rowids: np.ndarray) -> None:
        self.rowids -= set(rowids.tolist())

    def on_documents_changed(self, store: Any, doc_ids: set[str]) -> None:
        self.changed.append(set(doc_ids))

    def verify(self, store: StoreBackend) -> None:
        if self.rowids != set(store.rowids_of().tolist()):
            raise StoreCorruptedError("rowid log out of sync")


class ExtensionsContract(ContractBase):
    """An extension attached to a store sees its writes, is stored with its commits and reloaded by another handle."""

    def test_extension_follows_writes_and_persists(self, store: StoreBackend, factory: StoreFactory) -> None:
        ext = RowidLog("mine")
        store.add_extension(ext)
        assert ext.rowids == set(store.rowids_of().tolist())
        store.add_documents([Document("new", "New", ("fresh",))])
        assert ext.changed[-1] == {"new"}
        store.delete_documents(["tides"])
        assert ext.changed[-1] == {"tides"}
        assert ext.rowids == set(store.rowids_of().tolist())
        assert set(store.extension_files("test-rowid-log")) == {"rowids.npy"}
        store.close()
        again = factory.reopen(store)
        try:
            loaded = again.extension("test-rowid-log")
            assert isinstance(loaded, RowidLog) and loaded.label == "mine"
            assert loaded.rowids == set(again.rowids_of().tolist())
            again.remove_extension("test-rowid-log")
            assert again.extension("test-rowid-log") is None
        finally:
            again.close()
        last = factory.reopen(store)
        try:
            assert last.extensions == {}
        finally:
            last.close()

    def test_extension_rolls_back_with_the_store(self, store: StoreBackend) -> None:
        store.add_extension(RowidLog())
        before = set(store.extension("test-rowid-log").rowids)  # type: ignore[union-attr]
        with pytest.raises(RuntimeError), store.batch():
            store.add_documents([Document("new", "New", ("fresh",))])
            raise RuntimeError("boom")
        assert store.extension("test-rowid-log").rowids == before  # type: ignore[union-attr]

    def test_unregistered_extension_refused(self, store: StoreBackend) -> None:
        class Nameless(StoreExtension):
            name = "never-registered"

        with pytest.raises(StoreCorruptedError, match="unknown extension"):
            store.add_extension(Nameless())
        with pytest.raises(StoreError):
            store.remove_extension("never-registered")
        assert store.extensions == {}
