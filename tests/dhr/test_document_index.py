"""DocumentIndex: the document level follows the store's writes, persists, reloads and rolls back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rag_hier import Document, HierStore, Section
from rag_hier.corpus.summary import document_summary, summarize_document
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.extensions.doc_index import DocumentIndex


def doc_index(store: HierStore) -> DocumentIndex:
    ext = store.extension("doc-index")
    assert isinstance(ext, DocumentIndex)
    return ext


def doc_vector(store: HierStore, doc_id: str) -> np.ndarray:
    ext = doc_index(store)
    return ext._index.reconstruct(np.array([ext._ids[doc_id]]))[0]


def mean_of_passages(store: HierStore, doc_id: str) -> np.ndarray:
    rows = store.rowids_of(doc_ids=[doc_id])
    m = store.index.reconstruct(rows).mean(0)
    return m / np.linalg.norm(m)


def assert_in_sync(store: HierStore) -> None:
    ext = doc_index(store)
    assert sorted(ext.doc_ids()) == sorted(store.document_ids())
    for d in store.document_ids():
        assert set(ext._passages[ext._ids[d]].tolist()) == set(store.rowids_of(doc_ids=[d]).tolist())
        np.testing.assert_allclose(doc_vector(store, d), mean_of_passages(store, d), atol=1e-5)
    ext.verify(store)


def test_built_from_store_one_mean_vector_per_document(store: HierStore) -> None:
    assert len(doc_index(store)) == store.count_documents() == 6
    assert_in_sync(store)
    names = set(store.manifest["extensions"]["doc-index"]["files"])
    assert names == {"doc.faiss", "doc.json", "doc.passages.npy"}
    assert all((store.path / n).is_file() for n in names)


def test_follows_add_update_delete(store: HierStore, docs: list[Document]) -> None:
    ext = doc_index(store)
    before = dict(ext._ids)
    store.add_documents([Document("new", "New", ("Fresh snow on peaks.",))], max_passage_words=0)
    assert "new" in ext._ids
    # an unchanged re-add keeps the document vector (same input: same id)
    store.add_documents(docs[:1], max_passage_words=0)
    assert ext._ids["rivers"] == before["rivers"]
    # a changed paragraph re-embeds the document under a fresh id
    changed = Document("rivers", "Rivers", ("Rivers carry gravel and sand.", *docs[0].paragraphs[1:]), docs[0].sections)
    store.add_documents([changed], max_passage_words=0)
    assert ext._ids["rivers"] not in before.values()
    assert_in_sync(store)
    # deleting passages shrinks the document; deleting the document drops it
    store.delete_passages(["glaciers#0"])
    assert_in_sync(store)
    store.delete_documents(["volcano"])
    assert "volcano" not in ext._ids
    assert_in_sync(store)
    store.delete_all()
    assert len(ext) == 0
    ext.verify(store)


def test_survives_reopen(store: HierStore, dhr_encoder: DenseEncoder) -> None:
    store.delete_documents(["bees"])
    ext = doc_index(store)
    ids, vecs = dict(ext._ids), {d: doc_vector(store, d) for d in ext._ids}
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=dhr_encoder)
    loaded = doc_index(again)
    assert loaded._ids == ids
    for d, v in vecs.items():
        np.testing.assert_array_equal(doc_vector(again, d), v)
    assert_in_sync(again)
    # and keeps following writes after the reopen
    again.add_documents([Document("bees", "Bees", ("Bees dance.",))], max_passage_words=0)
    assert_in_sync(again)
    again.close()


def test_rolls_back_with_the_store(store: HierStore) -> None:
    ids = dict(doc_index(store)._ids)
    with pytest.raises(RuntimeError), store.batch():
        store.add_documents([Document("new", "New", ("fresh",))], max_passage_words=0)
        store.delete_documents(["tides"])
        raise RuntimeError("boom")
    assert doc_index(store)._ids == ids
    assert_in_sync(store)


def test_passage_map_is_loaded_without_pickle(store: HierStore) -> None:
    arr = np.load(store.path / "doc.passages.npy", allow_pickle=False)
    assert arr.dtype == np.int64 and arr.shape == (store.count_passages(), 2)
    meta = json.loads((store.path / "doc.json").read_text())
    assert meta["format"] == "rag-hier-doc-index" and len(meta["documents"]) == 6


def test_tampered_passage_map_is_detected(store: HierStore, dhr_encoder: DenseEncoder) -> None:
    ext = doc_index(store)
    path = store.path
    ext._passages.pop(ext._ids["tides"])
    with pytest.raises(StoreCorruptedError, match="maps"):
        ext.verify(store)
    store.close()
    with (path / "doc.passages.npy").open("wb") as f:
        np.save(f, np.zeros((1, 2), np.int64), allow_pickle=False)
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path, encoder=dhr_encoder)


def test_summary_representation(tmp_path, dhr_encoder: DenseEncoder, docs: list[Document]) -> None:
    store = HierStore.create(tmp_path / "s", encoder=dhr_encoder)
    store.add_documents(docs, max_passage_words=0)
    store.add_extension(DocumentIndex("summary"))
    ext = doc_index(store)
    text = summarize_document(docs[0])
    assert text == "Rivers, Rivers carry sediment to the sea. Rivers are studied by scientists., Deltas, Details"
    np.testing.assert_allclose(doc_vector(store, "rivers"), dhr_encoder.encode_documents([text])[0], atol=1e-5)
    # a passage outside the abstract changes: same summary, no re-embedding; a title change re-embeds
    fid = ext._ids["rivers"]
    d = docs[0]
    moved = Document(
        d.doc_id, d.title, d.paragraphs, (Section("Deltas", ("Deltas are flat.",), d.sections[0].subsections),)
    )
    store.add_documents([moved], max_passage_words=0)
    assert ext._ids["rivers"] == fid
    store.add_documents([Document(d.doc_id, "Big rivers", d.paragraphs, moved.sections)], max_passage_words=0)
    assert ext._ids["rivers"] != fid
    ext.verify(store)
    store.close()


def test_distinct_document_encoder(tmp_path, dhr_encoder: DenseEncoder, doc_model_path: str, docs) -> None:
    store = HierStore.create(tmp_path / "s", encoder=dhr_encoder)
    store.add_documents(docs, max_passage_words=0)
    store.add_extension(DocumentIndex("summary", model=doc_model_path))
    ext = doc_index(store)
    assert ext.dimension == 16 and store.dimension == 32 and not ext.shares_encoder
    assert ext.encode_queries(store, ["rivers"]).shape == (1, 16)
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=dhr_encoder)
    assert doc_index(again).model == doc_model_path
    again.close()


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="representation"):
        DocumentIndex("median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="summary"):
        DocumentIndex("mean", model="x")
    with pytest.raises(ValueError, match="abstract_words"):
        DocumentIndex("summary", abstract_words=-1)


def test_summary_needs_an_encoder(tmp_path) -> None:
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    store.add_passages([__import__("rag_hier").Passage("a#0", "a", 0, "x")], np.eye(4, dtype=np.float32)[:1])
    with pytest.raises(StoreError, match="needs an encoder"):
        store.add_extension(DocumentIndex("summary"))
    store.add_extension(DocumentIndex("mean"))  # external vectors are fine
    assert len(doc_index(store)) == 1
    store.close()


def test_document_summary_format() -> None:
    assert document_summary("T", ["a b", "c"], ["S1", "S2"], abstract_words=2) == "T, a b, S1, S2"
    assert document_summary("", "text", [], include_toc=False) == "text"
    with pytest.raises(ValueError, match="abstract_words"):
        document_summary("T", "x", abstract_words=-1)
