"""HierStore, what only the local store has: its directory, FAISS index kinds, corruption checks, the manifest.

Writes, reads, filters, deletes, persistence and read-only handles on every backend: the contract suite
(``tests/store/contract``, run on the local store by ``test_contract_local.py``).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from rag_hier import Document, HierStore, Passage
from rag_hier.errors import (
    DimensionMismatchError,
    StoreCorruptedError,
    StoreError,
)
from rag_hier.index import IndexConfig


def test_the_dimension_is_set_by_the_first_vector(tmp_path) -> None:
    # (vectors kept exactly, upserts, dimension mismatches on every backend: tests/store/contract)
    store = HierStore.create(tmp_path / "s", model=None)
    assert store.dimension is None
    store.add_passages([Passage("a", "d1", 0, "alpha"), Passage("b", "d1", 1, "beta")], [[0.1, 0.2, 0.3, 0.4], None])
    assert store.dimension == 4
    with pytest.raises(DimensionMismatchError):
        store.add_passages([Passage("d", "d3", 0, "delta")], [[1.0, 2.0]])
    store.close()


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_index_kinds_persist_and_delete(tmp_path, tiny_encoder, docs, kind: str) -> None:
    config = IndexConfig(kind=kind, nlist=2, train_min=4)
    store = HierStore.create(tmp_path / kind, encoder=tiny_encoder, index=config)
    store.add_documents(docs, max_passage_words=0)
    store.delete_documents(["tides"])
    store.close()
    again = HierStore.open(tmp_path / kind, encoder=tiny_encoder)
    assert len(again.index) == 5
    assert all(h.doc_id != "tides" for h in again.search("moon", top_k=10))
    assert len(again.search("moon", top_k=10)) == 5
    again.close()


def test_create_refuses_existing(store: HierStore, tmp_path) -> None:
    with pytest.raises(StoreError, match="already holds"):
        HierStore.create(store.path)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(StoreError, match="not an empty directory"):
        HierStore.create(tmp_path / "junk", model=None)
    with pytest.raises(StoreError, match="does not exist"):
        HierStore.open(tmp_path / "nowhere")
    with pytest.raises(StoreError, match="not a rag-hier store"):
        HierStore.open(tmp_path / "junk")


def test_dimension_mismatch_with_model(store: HierStore, tmp_path) -> None:
    from rag_hier.encoders import DenseEncoder
    from rag_hier.testing import build_tiny_model

    other = DenseEncoder(str(build_tiny_model(tmp_path / "m16", dimension=16)))
    path = store.path
    store.close()
    wrong = HierStore.open(path, encoder=other, allow_other_model=True)
    with pytest.raises(DimensionMismatchError, match="16-d"):
        wrong.search("x")
    with pytest.raises(DimensionMismatchError):
        wrong.add_documents([Document("z", "Z", ("zzz",))])
    wrong.close()
    intact = HierStore.open(path)
    assert intact.count_passages() == 6
    intact.close()


def _corrupt(path, name: str, fn) -> None:
    p = path / name
    data = bytearray(p.read_bytes())
    p.write_bytes(bytes(fn(data)))


@pytest.mark.parametrize(
    ("name", "mutate", "message"),
    [
        ("dense.faiss", lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "dense.faiss"),
        ("dense.faiss", lambda b: b[: len(b) // 2], "dense.faiss"),
        ("store.sqlite", lambda b: b[:-10] + bytes(10), "store.sqlite"),
        ("manifest.json", lambda b: b"{not json", "manifest.json"),
    ],
)
def test_corruption_is_detected(store: HierStore, name: str, mutate, message: str) -> None:
    path = store.path
    store.close()
    _corrupt(path, name, mutate)
    with pytest.raises((StoreCorruptedError, StoreError), match=message):
        HierStore.open(path)


def test_count_mismatch_is_detected(store: HierStore) -> None:
    path = store.path
    store.close()
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("DELETE FROM passages WHERE passage_id='bees#0'")
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path, verify_checksums=False)


def test_manifest_mirrors_state(store: HierStore) -> None:
    manifest = json.loads((store.path / "manifest.json").read_text())
    assert manifest["counts"] == {"documents": 3, "passages": 6, "vectors": 6}
    assert manifest["dimension"] == 32 and manifest["encoder"]["normalize_embeddings"] is True
    assert set(manifest["files"]) == {"store.sqlite", "dense.faiss"}
    assert manifest["generation"] == store.manifest["generation"]


def test_two_handles_in_one_process_share_one_view(store: HierStore, tiny_encoder) -> None:
    other = HierStore.open(store.path, encoder=tiny_encoder)
    other.add_documents([Document("o", "O", ("other writer",))])
    # the first handle sees the other's write at once, and writes on top of it
    assert store.count_documents() == 4
    assert [h.doc_id for h in store.search("other writer", top_k=8)].count("o") == 1
    store.add_documents([Document("p", "P", ("first handle",))])
    assert store.count_documents() == other.count_documents() == 5
    other.close()
    assert store.count_documents() == 5  # closing one handle leaves the other working


def test_no_pickle_on_load_paths() -> None:
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    pattern = re.compile(
        r"import (c)?pickle|pickle\.loads?\(|allow_pickle\s*=\s*True|torch\.load\((?![^)]*weights_only=True)"
    )
    offenders = [
        f"{p}:{i}"
        for base in ("rag_hier", "integrations")
        for p in (root / base).rglob("*.py")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []
