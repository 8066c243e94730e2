"""Generations and readers: each commit is a new generation, a reader's block sees one, handles see commits."""

from __future__ import annotations

import pytest

from rag_hier import Document
from rag_hier.errors import StoreError
from rag_hier.store.contract import StoreBackend

from .base import ContractBase, StoreFactory


class GenerationsContract(ContractBase):
    """What a commit changes for this handle, for another handle, and for a read-only reader."""

    def test_each_commit_is_one_new_generation_and_reads_change_nothing(self, store: StoreBackend) -> None:
        first = store.generation
        store.search("moon", top_k=2)
        store.filter_passages({"field": "meta.topic", "operator": "==", "value": "sea"})
        assert store.generation == first
        store.update_meta(["tides#0"], {"x": 1})
        second = store.generation
        assert second > first
        with store.batch():
            store.delete_passages(["bees#0"])
            store.add_documents([Document("new", "New", ("Fresh text.",))], max_passage_words=0)
            assert store.count_passages() == 6  # the batch reads its own writes
        assert store.generation > second and store.count_passages() == 6

    def test_persistence_roundtrip(self, store: StoreBackend, factory: StoreFactory) -> None:
        expected = [h.passage_id for h in store.search("eruption", top_k=6)]
        generation = store.generation
        store.close()
        again = factory.reopen(store)
        try:
            assert again.count_passages() == 6 and again.count_documents() == 3
            assert again.generation == generation
            assert [h.passage_id for h in again.search("eruption", top_k=6)] == expected
        finally:
            again.close()

    def test_read_only(self, store: StoreBackend, factory: StoreFactory) -> None:
        ro = factory.reopen(store, read_only=True)
        try:
            assert ro.read_only and not store.read_only
            assert ro.count_passages() == 6
            for write in (
                ro.delete_all,
                lambda: ro.delete_documents(["tides"]),
                lambda: ro.update_meta(["tides#0"], {"x": 1}),
                lambda: ro.add_documents([Document("n", "N", ("n",))]),
            ):
                with pytest.raises(StoreError, match="read-only"):
                    write()
            assert ro.count_passages() == store.count_passages() == 6
        finally:
            ro.close()

    def test_another_handle_sees_each_commit_at_its_next_read(self, store: StoreBackend, factory: StoreFactory) -> None:
        reader = factory.reopen(store, read_only=True)
        try:
            before = reader.count_passages()
            store.add_documents([Document("new", "New", ("Written by the writer.",))], max_passage_words=0)
            assert reader.count_passages() == before + 1  # the next read sees the commit
            assert [p.id for p in reader.get_passages(["new#0"])] == ["new#0"]
            assert reader.refresh() is reader and reader.generation == store.generation
            assert [h.doc_id for h in reader.search("Written by the writer.", top_k=7)].count("new") == 1
            store.delete_documents(["new"])
            assert reader.get_passages(["new#0"]) == [] and reader.count_documents() == 3
        finally:
            reader.close()

    def test_reads_in_a_block_answer_from_one_generation(self, store: StoreBackend, factory: StoreFactory) -> None:
        reader = factory.reopen(store, read_only=True)
        try:
            with reader.reading():
                generation = reader.generation
                count = reader.count_passages()
                ids = [p.id for p in reader.filter_passages()]
                hits = reader.search("moon", top_k=3)
                assert reader.generation == generation and reader.count_passages() == count == len(ids) == 6
                assert {h.passage_id for h in hits} <= set(ids)
            store.add_documents([Document("later", "Later", ("After the block.",))], max_passage_words=0)
            with reader.reading():
                assert reader.generation == store.generation != generation
                assert reader.count_passages() == 7
        finally:
            reader.close()

    def test_a_write_inside_a_reading_block_is_refused_and_nothing_changes(self, store: StoreBackend) -> None:
        with store.reading():
            with pytest.raises(StoreError, match=r"inside store\.reading"):
                store.delete_passages(["tides#0"])
            assert store.count_passages() == 6
        assert store.delete_passages(["tides#0"]) == 1  # after the block writes work again
