"""Crash points with a backend-agnostic form: a batch that fails before its commit leaves the last commit.

(The local store's kill -9 tests stay in ``tests/store/test_crash_safety.py``; Milvus's failure at the commit point
and its server going away in ``tests/milvus/test_milvus_store.py``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import Document, Passage
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.extensions.base import register_extension

from .base import ContractBase, StoreFactory


@register_extension
class FailingHook(StoreExtension):
    """An extension whose ``on_passages_added`` raises once armed (a failure inside the write, before its commit)."""

    name = "test-contract-failing-hook"
    FILES = ("failing-hook.json",)
    armed = False

    def write(self, paths: Mapping[str, Path]) -> None:
        paths["failing-hook.json"].write_text("{}", encoding="utf-8")

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        if type(self).armed:
            raise RuntimeError("hook failed")


def _state(store: StoreBackend) -> tuple[Any, ...]:
    return (
        {p.id: p for p in store.filter_passages()},
        store.document_ids(),
        store.count_vectors(),
        store.generation,
    )


class CrashPointsContract(ContractBase):
    """A failure anywhere before the commit point: nothing of the batch is kept, for this handle and any other."""

    def test_failed_batch_keeps_nothing(self, store: StoreBackend, factory: StoreFactory) -> None:
        before = _state(store)
        with pytest.raises(RuntimeError, match="boom"), store.batch():
            store.delete_documents(["bees"])
            store.add_documents([Document("new", "New", ("Fresh text.",))], max_passage_words=0)
            assert store.count_passages() == 4  # the batch saw its own writes
            raise RuntimeError("boom")
        assert _state(store) == before
        fresh = factory.reopen(store, read_only=True)
        try:
            assert _state(fresh) == before  # nothing of the failed batch is visible to another handle either
        finally:
            fresh.close()
        store.add_documents([Document("new2", "New", ("fresh text",))], max_passage_words=0)
        assert store.count_passages() == 7 and store.count_vectors() == 7

    def test_a_failing_extension_hook_aborts_the_whole_write(self, store: StoreBackend) -> None:
        store.add_extension(FailingHook())
        before = _state(store)
        FailingHook.armed = True
        try:
            with pytest.raises(RuntimeError, match="hook failed"):
                store.add_documents([Document("new", "New", ("Fresh text.",))], max_passage_words=0)
        finally:
            FailingHook.armed = False
        assert _state(store) == before
        store.add_documents([Document("new", "New", ("Fresh text.",))], max_passage_words=0)
        assert store.count_passages() == 7
