"""Store extensions follow the store's writes, persist atomically and roll back with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from rag_hier import Document, HierStore, Passage
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.extensions.base import StoreExtension, register_extension


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

    def load(self, store: HierStore, paths: Mapping[str, Path]) -> None:
        self.rowids = set(np.load(paths["rowids.npy"], allow_pickle=False).tolist())

    def build(self, store: HierStore) -> None:
        self.rowids = set(store.rowids_of().tolist()) if hasattr(store, "rowids_of") else set()

    def on_passages_added(self, store, rowids: np.ndarray, passages: Sequence[Passage], vectors) -> None:
        assert len(rowids) == len(passages)
        self.rowids |= set(rowids.tolist())

    def on_passages_removed(self, store, rowids: np.ndarray) -> None:
        self.rowids -= set(rowids.tolist())

    def on_documents_changed(self, store, doc_ids: set[str]) -> None:
        self.changed.append(set(doc_ids))

    def verify(self, store: HierStore) -> None:
        if self.rowids != set(store.rowids_of().tolist()):
            raise StoreCorruptedError("rowid log out of sync")


def test_extension_follows_writes_and_persists(store: HierStore, tiny_encoder) -> None:
    ext = RowidLog("mine")
    store.add_extension(ext)
    assert ext.rowids == set(store.rowids_of().tolist())
    store.add_documents([Document("new", "New", ("fresh",))])
    assert ext.changed[-1] == {"new"}
    store.delete_documents(["tides"])
    assert ext.changed[-1] == {"tides"}
    assert ext.rowids == set(store.rowids_of().tolist())
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=tiny_encoder)
    loaded = again.extension("test-rowid-log")
    assert isinstance(loaded, RowidLog) and loaded.label == "mine"
    assert loaded.rowids == set(again.rowids_of().tolist())
    assert "rowids.npy" in again.manifest["files"]
    again.remove_extension("test-rowid-log")
    assert not (path / "rowids.npy").exists()
    again.close()
    assert HierStore.open(path, encoder=tiny_encoder).extensions == {}


def test_extension_rolls_back_with_the_store(store: HierStore) -> None:
    store.add_extension(RowidLog())
    before = set(store.extension("test-rowid-log").rowids)
    with pytest.raises(RuntimeError), store.batch():
        store.add_documents([Document("new", "New", ("fresh",))])
        raise RuntimeError("boom")
    assert store.extension("test-rowid-log").rowids == before


def test_unknown_extension_is_a_clear_error(store: HierStore) -> None:
    import json

    store.add_extension(RowidLog())
    path = store.path
    store.close()
    for f in ("manifest.json",):
        data = json.loads((path / f).read_text())
        data["extensions"] = {"no-such-ext": {"config": {}, "files": []}}
        (path / f).write_text(json.dumps(data))
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path)


def test_unregistered_extension_refused(store: HierStore) -> None:
    class Nameless(StoreExtension):
        name = "never-registered"

    with pytest.raises(StoreCorruptedError, match="unknown extension"):
        store.add_extension(Nameless())
    with pytest.raises(StoreError):
        store.remove_extension("never-registered")
