"""Deletes: by passage id, by document, by filter, everything; searches and counts follow at once."""

from __future__ import annotations

from rag_hier.store.contract import StoreBackend

from .base import ContractBase


class DeletesContract(ContractBase):
    """What each delete removes and reports, alone and several in one batch."""

    def test_delete_by_passage_document_and_filter(self, store: StoreBackend) -> None:
        assert store.delete_passages(["bees#0", "nope"]) == 1
        assert store.delete_documents(["volcano"]) == 2
        assert store.count_passages() == 3 and store.count_documents() == 2 and store.count_vectors() == 3
        assert all(h.doc_id != "volcano" for h in store.search("magma", top_k=10))
        assert store.delete_by_filter({"field": "meta.topic", "operator": "==", "value": "sea"}) == 1
        assert store.document_ids() == ["bees"]
        assert store.get_passages(["tides#0", "bees#0"]) == []

    def test_deletes_in_one_batch(self, store: StoreBackend) -> None:
        store.update_by_filter({"field": "meta.topic", "operator": "==", "value": "earth"}, {"hot": 1})
        generation = store.generation
        with store.batch():  # several writes, one commit
            assert store.delete_passages(["bees#1"]) == 1
            assert store.delete_by_filter({"field": "meta.hot", "operator": "==", "value": 1}) == 2
        assert store.generation != generation
        assert store.document_ids() == ["tides", "bees"]
        assert [p.id for p in store.filter_passages()] == ["tides#0", "bees#0", "bees#2"]
        assert store.delete_documents(["tides"]) == 1
        assert store.delete_documents(["tides", "absent"]) == 0
        assert [p.id for p in store.filter_passages()] == ["bees#0", "bees#2"]

    def test_delete_all(self, store: StoreBackend) -> None:
        assert store.delete_all() == 6
        assert store.count_passages() == store.count_documents() == store.count_vectors() == 0
        assert store.search("moon", top_k=3) == []
        assert store.dimension == 32  # the dimension is kept unless forgotten
