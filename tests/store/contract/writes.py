"""Writes and duplicate policies: ``add_documents`` / ``add_passages``, their ``WriteSummary``, ids, vectors."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from rag_hier import Document, Passage, Section
from rag_hier.errors import DimensionMismatchError, DuplicateIdError
from rag_hier.store.contract import StoreBackend
from rag_hier.store.records import WriteSummary

from .base import BEES_META, DOCS, ContractBase, StoreFactory


class WritesContract(ContractBase):
    """What a write stores, what its summary says, and the ``fail`` / ``skip`` / ``upsert`` policies."""

    def test_add_documents_and_search(self, store: StoreBackend) -> None:
        assert isinstance(store, StoreBackend)
        assert store.count_documents() == 3
        assert store.count_passages() == 6 and store.count_vectors() == 6
        hits = store.search("honey in wax cells", top_k=3)
        assert [h.rank for h in hits] == [1, 2, 3]
        assert all(h.score >= hits[i + 1].score for i, h in enumerate(hits[:-1]))
        storage = store.get_passages(["bees#2"])[0]
        assert storage.title_path == ("Honeybees", "Honey", "Storage")
        assert storage.meta == BEES_META
        doc = store.get_document("bees")
        assert doc is not None and doc["title"] == "Honeybees" and doc["meta"] == BEES_META
        assert doc["passage_ids"] == ["bees#0", "bees#1", "bees#2"]
        assert store.document_ids() == ["tides", "bees", "volcano"]

    def test_reindex_is_idempotent_and_updates_changed_passages(self, store: StoreBackend) -> None:
        summary = store.add_documents(list(DOCS), max_passage_words=0)  # unchanged: nothing encoded
        assert summary.documents_unchanged == 3 and summary.passages_added == 0 and summary.encoded == 0
        assert summary == WriteSummary(documents_unchanged=3, passages_unchanged=6)
        assert store.count_passages() == 6
        changed = Document("volcano", "Volcanoes", ("Magma rises through the crust.", "Lava flows slowly."))
        summary = store.add_documents([changed], max_passage_words=0)
        assert summary.documents_updated == 1 and summary.passages_added == 1 and summary.passages_unchanged == 1
        assert summary.encoded == 1
        assert store.get_passages(["volcano#1"])[0].text == "Lava flows slowly."
        assert store.count_passages() == 6 and store.count_vectors() == 6

    def test_a_changed_paragraph_is_the_only_one_encoded(self, store: StoreBackend) -> None:
        changed = dataclasses.replace(DOCS[0], paragraphs=(*DOCS[0].paragraphs, "Twice a day."))
        summary = store.add_documents([changed, *DOCS[1:]], max_passage_words=0)
        assert summary == WriteSummary(
            documents_updated=1, documents_unchanged=2, passages_added=1, passages_unchanged=6, encoded=1
        )
        assert [p.text for p in store.get_passages(["tides#1"])] == ["Twice a day."]

    def test_policies(self, store: StoreBackend) -> None:
        with pytest.raises(DuplicateIdError):
            store.add_documents(list(DOCS[:1]), policy="fail")
        assert store.add_documents(list(DOCS[:1]), policy="skip").documents_skipped == 1
        with pytest.raises(DuplicateIdError, match="twice"):
            store.add_documents([DOCS[0], DOCS[0]])
        with pytest.raises(ValueError, match="policy"):
            store.add_documents(list(DOCS), policy="merge")  # type: ignore[arg-type]
        assert store.count_passages() == 6

    def test_ids_are_never_reused(self, store: StoreBackend) -> None:
        before = set(store.rowids_of().tolist())
        store.delete_documents(["tides"])
        store.add_documents([Document("tides", "Tides", ("Tides again.",))], max_passage_words=0)
        after = set(store.rowids_of().tolist())
        new = after - before
        assert new and min(new) > max(before)
        store.delete_all()
        store.add_documents([Document("x", "X", ("x",))])
        assert int(store.rowids_of()[0]) > max(after)

    def test_updating_a_document_keeps_its_row_and_metadata(self, make_store: Any, encoder: Any) -> None:
        from rag_hier.store.extensions.doc_index import DocumentIndex

        store = make_store(encoder=encoder)
        store.add_extension(DocumentIndex())
        first = Document("d1", "Old title", ("first text",), (Section("S", ("more",)),), metadata={"year": 2001})
        store.add_documents([first, Document("d2", "Other", ("other text",))], max_passage_words=0)
        edited = Document(
            "d1", "New title", ("first text, edited",), (Section("S2", ("more",)),), metadata={"year": 2002}
        )
        summary = store.add_documents([edited], max_passage_words=0)
        assert summary.documents_updated == 1
        doc = store.get_document("d1")
        assert doc is not None and doc["title"] == "New title" and doc["meta"] == {"year": 2002}
        assert doc["toc"] == ["S2"]  # the new table of contents
        assert store.count_documents() == 2 and "d1" in store.document_ids()
        assert sorted(store.extension("doc-index").doc_ids()) == ["d1", "d2"]  # type: ignore[union-attr]
        # every passage changed: still one row for the document
        store.add_documents([Document("d1", "Newer", ("completely different",))], max_passage_words=0)
        assert store.get_document("d1")["title"] == "Newer"  # type: ignore[index]
        assert store.count_documents() == 2

    def test_a_document_without_text_is_stored_and_counted(self, vector_store: StoreBackend) -> None:
        store = vector_store
        summary = store.add_documents(
            [Document("empty", "Only a title", ("  ",), metadata={"k": 1}), Document("full", "", ("x",))], encode=False
        )
        assert summary.documents_empty == 1 and summary.documents_added == 2 and summary.passages_added == 1
        empty = store.get_document("empty")
        assert empty is not None and empty["title"] == "Only a title" and empty["meta"] == {"k": 1}
        assert empty["passage_ids"] == []
        assert store.count_documents() == 2

    def test_caller_vectors_are_kept_exactly(self, vector_store: StoreBackend, factory: StoreFactory) -> None:
        store = vector_store
        exact = [0.1, 0.2, 0.3, 0.4]  # not representable in float32
        store.add_passages(
            [Passage("a", "d1", 0, "alpha"), Passage("b", "d1", 1, "beta"), Passage("c", "d2", 0, "gamma")],
            [exact, None, np.array([1, 0, 0, 0], dtype=np.float32)],
        )
        assert store.dimension == 4 and store.count_vectors() == 2
        emb = store.get_embeddings(["a", "b", "c", "zzz"])
        assert emb[0].tolist() == exact and emb[1] is None
        assert emb[2].tolist() == [1.0, 0.0, 0.0, 0.0] and emb[3] is None
        from rag_hier.retrieval import DenseRetriever

        (hits,) = DenseRetriever(store).search_vectors(np.array([[1, 0, 0, 0]], np.float32), top_k=5)
        assert [h.passage_id for h in hits] == ["c", "a"]  # "b" has no vector
        with pytest.raises(DimensionMismatchError):
            store.add_passages([Passage("d", "d3", 0, "delta")], [[1.0, 2.0]])
        with pytest.raises(DimensionMismatchError):
            store.add_passages([Passage("d", "d3", 0, "delta")], np.ones((1, 5)))
        assert store.count_passages() == 3
        again = factory.reopen(store, read_only=True)
        try:
            assert again.get_embeddings(["a"])[0].tolist() == exact
        finally:
            again.close()

    def test_upsert_replaces_passage_and_vector(self, vector_store: StoreBackend) -> None:
        store = vector_store
        store.add_passages([Passage("a", "d", 0, "one")], [[1.0, 0.0, 0.0, 0.0]])
        store.add_passages([Passage("a", "d", 0, "two")], [[0.0, 1.0, 0.0, 0.0]])
        assert store.count_passages() == 1 and store.count_vectors() == 1
        assert store.get_passages(["a"])[0].text == "two"
        assert store.get_embeddings(["a"])[0].tolist() == [0.0, 1.0, 0.0, 0.0]
        with pytest.raises(DuplicateIdError):
            store.add_passages([Passage("a", "d", 0, "three")], [[0.0, 0.0, 1.0, 0.0]], policy="fail")
        store.add_passages([Passage("a", "d", 0, "three")], [[0.0, 0.0, 1.0, 0.0]], policy="skip")
        assert store.get_passages(["a"])[0].text == "two"

    def test_a_passage_id_taken_by_another_document_is_a_clear_error(self, make_store: Any, encoder: Any) -> None:
        store = make_store(encoder=encoder)
        store.add_passages([Passage("d1#0", "x", 0, "written by an adapter")])
        with pytest.raises(
            DuplicateIdError, match="'d1#0' of document 'd1' is already stored as a passage of document 'x'"
        ):
            store.add_documents([Document("d1", "", ("a later document",))])
        assert store.count_passages() == 1 and store.get_document("d1") is None
        # add_passages refuses it too: the passage would move and its document 'x' would disappear
        with pytest.raises(
            DuplicateIdError, match="'d1#0' of document 'y' is already stored as a passage of document 'x'"
        ):
            store.add_passages([Passage("d1#0", "y", 0, "another document's passage")])
        assert store.document_ids() == ["x"] and store.get_passages(["d1#0"])[0].text == "written by an adapter"

    def test_add_passages_never_moves_a_passage_to_another_document(self, vector_store: StoreBackend) -> None:
        store = vector_store
        v = np.ones((1, store.dimension), np.float32)
        store.add_passages([Passage("a#0", "a", 0, "alpha")], v)
        before = (sorted(store.document_ids()), store.count_passages())
        with pytest.raises(
            DuplicateIdError, match="'a#0' of document 'b' is already stored as a passage of document 'a'"
        ):
            store.add_passages([Passage("a#0", "b", 0, "beta")], v)
        assert (sorted(store.document_ids()), store.count_passages()) == before  # the owning document is still there
        store.add_passages([Passage("a#0", "a", 0, "alpha, edited")], v)  # its own document: an update
        assert store.get_passages(["a#0"])[0].text == "alpha, edited"
