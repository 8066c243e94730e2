"""Failures injected at every step of a commit: the reported outcome matches what is on disk.

Before the commit point (SQLite's COMMIT) a failure raises and nothing of the write is kept; after it the write
is durable, so the call reports success (and logs the cleanup that failed), the handle keeps working, and the next
write finishes the renames the failure left undone.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import rag_hier.store.core as core_module
from rag_hier import HierStore, Passage
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.token_index import TokenIndexExtension

BEFORE = ["index_files_written", "before_sqlite_commit"]
AFTER = ["after_sqlite_commit", "after_index_rename", "after_manifest"]


def _make(path: Path) -> HierStore:
    store = HierStore.create(path, model=None, dimension=4)
    store.add_extension(TokenIndexExtension())
    store.add_extension(DocumentIndex())
    store.add_passages([Passage(f"p{i}", f"d{i}", 0, f"old {i}") for i in range(10)], np.ones((10, 4), np.float32))
    return store


def _write(store: HierStore, tag: str) -> None:
    store.add_passages(
        [Passage(f"{tag}{i}", f"n{tag}", i, f"new {i}") for i in range(3)], np.eye(3, 4, dtype=np.float32)
    )


def _on_disk(path: Path) -> int:
    """Passages committed in the database, read by a connection of its own (handles in this process share one)."""
    db = sqlite3.connect(path / "store.sqlite")
    try:
        return int(db.execute("SELECT count(*) FROM passages").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("step", BEFORE + AFTER)
def test_injected_failure_at_each_step(tmp_path: Path, monkeypatch, caplog, step: str, code: int) -> None:
    path = tmp_path / "store"
    store = _make(path)

    def fail(name: str) -> None:
        if name == step:
            raise OSError(code, f"injected at {name}")

    monkeypatch.setattr(core_module, "_step", fail)
    caplog.set_level(logging.WARNING, logger="rag_hier.store.core")
    if step in BEFORE:
        with pytest.raises(OSError, match="injected"):
            _write(store, "a")
        assert store.count_passages() == 10
    else:
        _write(store, "a")  # durable: reported as a success
        assert store.count_passages() == 13
        assert any("is committed" in r.getMessage() for r in caplog.records)
    committed = step in AFTER
    assert _on_disk(path) == (13 if committed else 10)  # what is on disk agrees with what was reported
    monkeypatch.setattr(core_module, "_step", lambda name: None)
    _write(store, "b")  # the handle keeps working, and finishes what the failure left undone
    assert store.count_passages() == (16 if committed else 13)
    store.close()
    again = HierStore.open(path)
    assert again.count_passages() == (16 if committed else 13)
    assert len(again.search_dense(np.ones((1, 4), np.float32), 100)[1][0]) == again.count_passages()
    again.close()
    assert not [p.name for p in path.iterdir() if ".tmp" in p.name]


def test_no_space_while_writing_an_index_file_rolls_back(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "store"
    store = _make(path)
    from rag_hier.index.dense import DenseIndex

    def full(self, target) -> None:
        Path(target).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DenseIndex, "write", full)
    # no segments: the write rewrites dense.faiss and doc.faiss (a small write would commit rows only)
    monkeypatch.setattr(core_module, "SEGMENT_MERGE_MIN", 0)
    monkeypatch.setattr(core_module, "SEGMENT_MERGE_RATIO", 0.0)
    with pytest.raises(OSError, match="No space"):
        _write(store, "a")
    monkeypatch.undo()
    assert store.count_passages() == 10 and _on_disk(path) == 10
    _write(store, "b")
    assert _on_disk(path) == 13
    store.close()


def test_no_space_for_the_manifest_is_reported_as_success(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "store"
    store = _make(path)

    def full(target, obj) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(core_module, "atomic_write_json", full)
    _write(store, "a")
    assert store.count_passages() == 13
    monkeypatch.undo()
    assert _on_disk(path) == 13  # a stale manifest is finished by the next writer or open
    _write(store, "b")
    store.close()
    assert _on_disk(path) == 16
