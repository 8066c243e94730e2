"""A store from a stranger touches nothing outside its directory, runs no code, and fails with clear errors.

Each case tampers with a closed store (its committed state in SQLite and its manifest, or its files), then opens it
read-write and read-only, and checks that the open is refused with a StoreCorruptedError (or StoreError) naming
what is wrong, and that no file outside the store directory was created, changed or removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.extensions.doc_index import DocumentIndex


def _make(root: Path) -> Path:
    store_dir = root / "store"
    store = HierStore.create(store_dir, model=None)
    rng = np.random.default_rng(0)
    store.add_passages([Passage(f"p{i}", f"d{i % 3}", i, f"text {i}") for i in range(9)], rng.standard_normal((9, 4)))
    store.add_extension(DocumentIndex())
    store.close()
    return store_dir


def _snapshot(root: Path, store_dir: Path) -> dict[str, tuple[int, float, bytes]]:
    """Every file under ``root`` outside the store directory, with its size, mtime and content."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and store_dir not in p.parents:
            out[str(p)] = (p.stat().st_size, p.stat().st_mtime, p.read_bytes())
    return out


def _edit_state(store_dir: Path, change: Callable[[dict[str, Any]], None], *, manifest_too: bool = True) -> None:
    db = sqlite3.connect(store_dir / "store.sqlite")
    state = json.loads(db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()[0])
    change(state)
    db.execute("UPDATE state SET value=? WHERE key='manifest'", (json.dumps(state),))
    db.commit()
    db.close()
    if manifest_too:
        manifest = json.loads((store_dir / "manifest.json").read_text())
        change(manifest)
        if isinstance(manifest["files"], dict):
            manifest["files"]["store.sqlite"] = {
                "bytes": (store_dir / "store.sqlite").stat().st_size,
                "sha256": hashlib.sha256((store_dir / "store.sqlite").read_bytes()).hexdigest(),
            }
        (store_dir / "manifest.json").write_text(json.dumps(manifest))


def _pending(name: str) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["files"]["dense.faiss"]["pending"] = name

    return change


TRAVERSALS: dict[str, Callable[[dict[str, Any]], None]] = {
    "file key ../": lambda s: s["files"].__setitem__("../victim.txt", {"bytes": 6, "sha256": "0" * 64}),
    "file key absolute": lambda s: s["files"].__setitem__("/tmp/victim.txt", {"bytes": 6, "sha256": "0" * 64}),
    "pending ../": _pending("../victim.txt"),
    "pending another file": _pending("store.sqlite"),
    "extension file ../": lambda s: s["extensions"]["doc-index"]["files"].append("../victim.txt"),
    "extension file not its own": lambda s: s["extensions"]["doc-index"]["files"].append("manifest.json"),
    "dense file renamed": lambda s: s["indexes"]["dense"].__setitem__("file", "store.sqlite"),
    "generation as text": lambda s: s.__setitem__("generation", "7"),
    "counts not numbers": lambda s: s.__setitem__("counts", {"documents": "3"}),
    "encoder not an object": lambda s: s.__setitem__("encoder", ["x"]),
    "dimension absurd": lambda s: s.__setitem__("dimension", 10**12),
    "files not an object": lambda s: s.__setitem__("files", []),
    "unknown extension": lambda s: s["extensions"].__setitem__("os.system", {"config": {}, "files": []}),
    "extension config not an object": lambda s: s["extensions"]["doc-index"].__setitem__("config", "rm -rf"),
}


@pytest.mark.parametrize("case", list(TRAVERSALS))
@pytest.mark.parametrize("read_only", [False, True])
def test_tampered_state_is_refused_and_touches_nothing_outside(tmp_path: Path, case: str, read_only: bool) -> None:
    store_dir = _make(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    (store_dir.parent / "dense.faiss").write_bytes((store_dir / "dense.faiss").read_bytes())  # a decoy beside it
    _edit_state(store_dir, TRAVERSALS[case])
    before = _snapshot(tmp_path, store_dir)
    with pytest.raises(StoreError) as info:
        HierStore.open(store_dir, read_only=read_only)
    assert "store.sqlite" in str(info.value) or "manifest.json" in str(info.value)
    assert _snapshot(tmp_path, store_dir) == before
    assert victim.read_text() == "intact"


def test_manifest_alone_tampered_is_refused(tmp_path: Path) -> None:
    store_dir = _make(tmp_path)
    manifest = json.loads((store_dir / "manifest.json").read_text())
    manifest["counts"] = {"documents": 1, "passages": 1, "vectors": 1}
    (store_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreCorruptedError, match=r"manifest\.json"):
        HierStore.open(store_dir, verify_checksums=False)


@pytest.mark.parametrize("name", ["store.sqlite", "dense.faiss", "doc.json", "manifest.json"])
def test_symlinked_files_are_refused(tmp_path: Path, name: str) -> None:
    store_dir = _make(tmp_path)
    outside = tmp_path / f"outside-{name}"
    (store_dir / name).replace(outside)
    os.symlink(outside, store_dir / name)
    before = _snapshot(tmp_path, store_dir)
    for read_only in (True, False):
        with pytest.raises(StoreError, match=r"symbolic link|regular file|not a rag-hier store|missing"):
            HierStore.open(store_dir, read_only=read_only)
    assert _snapshot(tmp_path, store_dir) == before


def test_symlinked_lock_file_refuses_writes_and_creates_nothing(tmp_path: Path) -> None:
    store_dir = _make(tmp_path)
    (store_dir / "store.lock").unlink()
    target = tmp_path / "created-by-lock"
    os.symlink(target, store_dir / "store.lock")
    store = HierStore.open(store_dir)  # reads work
    assert store.count_passages() == 9
    with pytest.raises(StoreCorruptedError, match="symbolic link"):
        store.delete_passages(["p0"])
    store.close()
    assert not target.exists()


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TRIGGER evil AFTER INSERT ON passages BEGIN UPDATE passages SET text='owned'; END",
        "CREATE TRIGGER evil2 BEFORE DELETE ON passages BEGIN DELETE FROM documents; END",
        "CREATE VIEW spy AS SELECT text FROM passages",
        "CREATE TABLE hidden (text TEXT)",
        "CREATE INDEX meta_scan ON passages(meta)",
    ],
)
def test_schema_objects_it_does_not_define_are_refused(tmp_path: Path, sql: str) -> None:
    store_dir = _make(tmp_path)
    db = sqlite3.connect(store_dir / "store.sqlite")
    db.execute(sql)
    db.commit()
    db.close()
    for read_only in (True, False):
        with pytest.raises(StoreCorruptedError, match=r"store\.sqlite"):
            HierStore.open(store_dir, read_only=read_only, verify_checksums=False)
    db = sqlite3.connect(store_dir / "store.sqlite")
    assert db.execute("SELECT count(*) FROM passages WHERE text='owned'").fetchone()[0] == 0
    db.close()


def test_a_foreign_faiss_file_with_other_ids_is_refused(tmp_path: Path) -> None:
    from rag_hier.index.dense import DenseIndex

    store_dir = _make(tmp_path)
    foreign = DenseIndex(4)
    foreign.add(np.arange(100, 109, dtype=np.int64), np.ones((9, 4), np.float32))  # same count, other ids
    foreign.write(store_dir / "dense.faiss")
    _edit_state(
        store_dir,
        lambda s: s["files"].__setitem__(
            "dense.faiss",
            {
                "bytes": (store_dir / "dense.faiss").stat().st_size,
                "sha256": hashlib.sha256((store_dir / "dense.faiss").read_bytes()).hexdigest(),
            },
        ),
    )
    with pytest.raises(StoreCorruptedError, match=r"dense\.faiss"):
        HierStore.open(store_dir)


def test_a_pickle_named_like_an_index_is_never_unpickled(tmp_path: Path) -> None:
    import pickle

    store_dir = _make(tmp_path)
    marker = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self):  # pragma: no cover - must never run
            return (Path.touch, (marker,))

    payload = pickle.dumps(Boom())
    (store_dir / "doc.passages.npy").write_bytes(payload)
    _edit_state(
        store_dir,
        lambda s: s["files"].__setitem__(
            "doc.passages.npy", {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
        ),
    )
    with pytest.raises(StoreCorruptedError):
        HierStore.open(store_dir)
    assert not marker.exists()
