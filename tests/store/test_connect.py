"""The SQLite connection a store opens: its pragmas."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.retrieval import DenseRetriever
from rag_hier.store.core import MMAP_SIZE


def _mmap_size_applied(path: Path) -> int:
    """What ``PRAGMA mmap_size=MMAP_SIZE`` leaves on a plain connection to ``path`` (SQLite caps it per build)."""
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA mmap_size").fetchone()[0] == 0  # off unless a connection asks for it
        db.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        return int(db.execute("PRAGMA mmap_size").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("how", ["created", "opened", "opened read-only"])
def test_store_connections_read_through_a_memory_map(tmp_path: Path, how: str) -> None:
    expected = _mmap_size_applied(tmp_path / "probe.sqlite")
    if expected == 0:
        pytest.skip("this SQLite build has no memory-mapped I/O (SQLITE_MAX_MMAP_SIZE=0)")
    assert 0 < expected <= MMAP_SIZE
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    store.add_passages([Passage("d#0", "d", 0, "text")], np.ones((1, 4), dtype=np.float32))
    if how != "created":
        store.close()
        store = HierStore.open(tmp_path / "s", read_only=how == "opened read-only")
    try:
        db = store._core.db
        assert db.execute("PRAGMA mmap_size").fetchone()[0] == expected
        assert db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"  # unchanged beside it
        hits = DenseRetriever(store).search_vectors(np.ones((1, 4), dtype=np.float32), top_k=1)[0]
        assert [(h.passage_id, h.text) for h in hits] == [("d#0", "text")]
    finally:
        store.close()
