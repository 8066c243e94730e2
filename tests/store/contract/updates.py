"""Metadata updates: ``update_meta`` (merge or replace) and ``update_by_filter``, seen by every reader."""

from __future__ import annotations

import pytest

from rag_hier.store.contract import StoreBackend

from .base import BEES_META, ContractBase, StoreFactory


class UpdatesContract(ContractBase):
    """Metadata changes in place: same passages, same vectors, new metadata, visible to a reopened handle."""

    def test_update_by_filter_is_seen_by_another_handle(self, store: StoreBackend, factory: StoreFactory) -> None:
        assert store.update_by_filter({"field": "doc_id", "operator": "==", "value": "bees"}, {"reviewed": True}) == 3
        assert store.get_passages(["bees#1"])[0].meta == {**BEES_META, "reviewed": True}
        other = factory.reopen(store)
        try:
            assert other.count_passages({"field": "meta.reviewed", "operator": "==", "value": True}) == 3
        finally:
            other.close()

    def test_update_meta_merges_or_replaces(self, store: StoreBackend) -> None:
        vector = store.get_embeddings(["tides#0"])[0]
        generation = store.generation
        assert store.update_meta(["tides#0", "absent"], {"checked": True}) == 1
        assert store.generation != generation
        assert store.get_passages(["tides#0"])[0].meta == {"topic": "sea", "year": 2001, "checked": True}
        assert store.update_meta(["tides#0"], {"topic": "ocean"}, merge=False) == 1
        assert store.get_passages(["tides#0"])[0].meta == {"topic": "ocean"}
        assert store.count_passages({"field": "meta.topic", "operator": "==", "value": "ocean"}) == 1
        (rowid,) = store.rowids_of(passage_ids=["tides#0"]).tolist()
        assert store.records([rowid])[rowid].meta["topic"] == "ocean"
        # text, vector and the other passages are as they were
        assert store.get_passages(["tides#0"])[0].text == "The moon pulls the oceans and makes tides."
        assert store.get_embeddings(["tides#0"])[0].tolist() == vector.tolist()
        assert store.count_passages() == 6 and store.get_passages(["bees#0"])[0].meta == BEES_META

    def test_update_by_filter_merges(self, store: StoreBackend) -> None:
        assert store.update_by_filter({"field": "meta.topic", "operator": "==", "value": "earth"}, {"hot": 1}) == 2
        assert [p.id for p in store.filter_passages({"field": "meta.hot", "operator": "==", "value": 1})] == [
            "volcano#0",
            "volcano#1",
        ]
        assert store.get_passages(["volcano#1"])[0].meta["year"] == 1999
        assert store.update_by_filter({"field": "meta.topic", "operator": "==", "value": "none"}, {"x": 1}) == 0

    def test_update_meta_refuses_a_single_string(self, store: StoreBackend) -> None:
        with pytest.raises(TypeError, match="list of ids"):
            store.update_meta("tides#0", {"x": 1})
        assert store.get_passages(["tides#0"])[0].meta == {"topic": "sea", "year": 2001}
