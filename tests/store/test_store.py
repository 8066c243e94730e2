"""HierStore: writes, reads, filters, persistence, consistency checks."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from rag_hier import Document, HierStore, Passage
from rag_hier.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    FilterError,
    StoreCorruptedError,
    StoreError,
)
from rag_hier.index import IndexConfig


def test_add_documents_and_search(store: HierStore) -> None:
    assert store.count_documents() == 3
    assert store.count_passages() == 6
    hits = store.search("honey in wax cells", top_k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.score >= hits[i + 1].score for i, h in enumerate(hits[:-1]))
    storage = store.get_passages(["bees#2"])[0]
    assert storage.title_path == ("Honeybees", "Honey", "Storage")
    assert storage.meta == {"topic": "animals", "year": 2010}


def test_batch_queries_match_single(store: HierStore) -> None:
    queries = ["moon and tides", "magma", "nectar"]
    batch = store.search(queries, top_k=2)
    assert len(batch) == 3
    for q, hits in zip(queries, batch, strict=True):
        single = store.search(q, top_k=2)
        assert [h.passage_id for h in hits] == [h.passage_id for h in single]
    assert store.search([], top_k=2) == []


def test_reindex_is_idempotent_and_updates_changed_passages(store: HierStore, docs: list[Document]) -> None:
    summary = store.add_documents(docs, max_passage_words=0)
    assert summary.documents_unchanged == 3 and summary.passages_added == 0 and summary.encoded == 0
    assert store.count_passages() == 6
    changed = Document("volcano", "Volcanoes", ("Magma rises through the crust.", "Lava flows slowly."))
    summary = store.add_documents([changed], max_passage_words=0)
    assert summary.documents_updated == 1 and summary.passages_added == 1 and summary.passages_unchanged == 1
    assert store.get_passages(["volcano#1"])[0].text == "Lava flows slowly."
    assert store.count_passages() == 6 and len(store.index) == 6


def test_policies(store: HierStore, docs: list[Document]) -> None:
    with pytest.raises(DuplicateIdError):
        store.add_documents(docs[:1], policy="fail")
    assert store.add_documents(docs[:1], policy="skip").documents_skipped == 1
    with pytest.raises(DuplicateIdError, match="twice"):
        store.add_documents([docs[0], docs[0]])
    with pytest.raises(ValueError, match="policy"):
        store.add_documents(docs, policy="merge")  # type: ignore[arg-type]


def test_ids_are_never_reused(store: HierStore) -> None:
    before = set(store.rowids_of().tolist())
    store.delete_documents(["tides"])
    store.add_documents([Document("tides", "Tides", ("Tides again.",))], max_passage_words=0)
    after = set(store.rowids_of().tolist())
    new = after - before
    assert new and min(new) > max(before)
    store.delete_all()
    store.add_documents([Document("x", "X", ("x",))])
    assert int(store.rowids_of()[0]) > max(after)


def test_delete_by_passage_document_and_filter(store: HierStore) -> None:
    assert store.delete_passages(["bees#0", "nope"]) == 1
    assert store.delete_documents(["volcano"]) == 2
    assert store.count_passages() == 3 and store.count_documents() == 2
    assert all(h.doc_id != "volcano" for h in store.search("magma", top_k=10))
    assert store.delete_by_filter({"field": "meta.topic", "operator": "==", "value": "sea"}) == 1
    assert store.document_ids() == ["bees"]


def test_filters_are_prefilters_with_exact_top_k(store: HierStore) -> None:
    flt = {"field": "meta.topic", "operator": "in", "value": ["earth", "sea"]}
    hits = store.search("honey bees", top_k=3, filters=flt)
    assert len(hits) == 3 and {h.doc_id for h in hits} == {"volcano", "tides"}
    logical = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.year", "operator": ">=", "value": 2000},
            {"operator": "NOT", "conditions": [{"field": "doc_id", "operator": "==", "value": "bees"}]},
        ],
    }
    assert [p.id for p in store.filter_passages(logical)] == ["tides#0"]
    assert store.count_passages({"field": "meta.missing", "operator": "==", "value": None}) == 6
    with pytest.raises(FilterError):
        store.filter_passages({"field": "meta.year", "operator": ">", "value": "not a date"})
    with pytest.raises(FilterError):
        store.filter_passages({"operator": "XOR", "conditions": []})


def test_update_meta(store: HierStore) -> None:
    assert store.update_by_filter({"field": "doc_id", "operator": "==", "value": "bees"}, {"reviewed": True}) == 3
    assert store.get_passages(["bees#1"])[0].meta == {"topic": "animals", "year": 2010, "reviewed": True}
    store2 = HierStore.open(store.path)
    assert store2.count_passages({"field": "meta.reviewed", "operator": "==", "value": True}) == 3
    store2.close()


def test_persistence_roundtrip(store: HierStore, tiny_encoder) -> None:
    expected = [h.passage_id for h in store.search("eruption", top_k=6)]
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=tiny_encoder)
    assert again.count_passages() == 6
    assert [h.passage_id for h in again.search("eruption", top_k=6)] == expected
    again.close()


def test_external_vectors_and_exact_embeddings(tmp_path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    assert store.dimension is None
    exact = [0.1, 0.2, 0.3, 0.4]  # not representable in float32
    store.add_passages(
        [Passage("a", "d1", 0, "alpha"), Passage("b", "d1", 1, "beta"), Passage("c", "d2", 0, "gamma")],
        [exact, None, np.array([1, 0, 0, 0], dtype=np.float32)],
    )
    assert store.dimension == 4
    emb = store.get_embeddings(["a", "b", "c", "zzz"])
    assert emb[0].tolist() == exact and emb[1] is None and emb[2].tolist() == [1.0, 0.0, 0.0, 0.0] and emb[3] is None
    from rag_hier.retrieval import DenseRetriever

    (hits,) = DenseRetriever(store).search_vectors(np.array([[1, 0, 0, 0]], np.float32), top_k=5)
    assert [h.passage_id for h in hits] == ["c", "a"]  # "b" has no vector
    with pytest.raises(DimensionMismatchError):
        store.add_passages([Passage("d", "d3", 0, "delta")], [[1.0, 2.0]])
    with pytest.raises(StoreError, match="encoder"):
        store.search("text query")
    store.close()
    again = HierStore.open(tmp_path / "s")
    assert again.get_embeddings(["a"])[0].tolist() == exact
    again.close()


def test_upsert_replaces_passage_and_vector(tmp_path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    store.add_passages([Passage("a", "d", 0, "one")], [[1.0, 0.0]])
    store.add_passages([Passage("a", "d", 0, "two")], [[0.0, 1.0]])
    assert store.count_passages() == 1 and len(store.index) == 1
    assert store.get_passages(["a"])[0].text == "two"
    with pytest.raises(DuplicateIdError):
        store.add_passages([Passage("a", "d", 0, "three")], [[0.0, 1.0]], policy="fail")
    store.add_passages([Passage("a", "d", 0, "three")], [[0.0, 1.0]], policy="skip")
    assert store.get_passages(["a"])[0].text == "two"
    store.close()


def test_failed_write_keeps_previous_state(store: HierStore) -> None:
    before = store.count_passages()
    with pytest.raises(RuntimeError), store.batch():
        store.add_documents([Document("new", "New", ("fresh text",))])
        assert store.count_passages() == before + 1
        raise RuntimeError("boom")
    assert store.count_passages() == before and len(store.index) == before
    store.add_documents([Document("new2", "New", ("fresh text",))])
    assert store.count_passages() == before + 1


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


def test_read_only(store: HierStore, tiny_encoder) -> None:
    ro = HierStore.open(store.path, encoder=tiny_encoder, read_only=True)
    assert ro.count_passages() == 6
    with pytest.raises(StoreError, match="read-only"):
        ro.delete_all()
    ro.close()


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
