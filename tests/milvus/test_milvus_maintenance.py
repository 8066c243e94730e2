"""Maintenance on a Milvus store: ``optimize`` (compaction) and ``index_meta_field`` (a JSON path index where the
server has one), on Milvus Lite or the server of ``$RAG_HIER_TEST_MILVUS_URI``. Skips without ``pymilvus``."""

from __future__ import annotations

import pytest

pytest.importorskip("pymilvus")

from rag_hier import Document, HierStore
from rag_hier.errors import StoreError
from rag_hier.store.milvus.capabilities import MissingCapabilityError
from tests.store.contract.base import unique_name


def _docs(n: int) -> list[Document]:
    return [
        Document(f"d{i}", f"Doc {i}", (f"passage {i} a", f"passage {i} b"), metadata={"cat": f"c{i % 3}", "n": i})
        for i in range(n)
    ]


@pytest.fixture()
def store(milvus_db: str, encoder):
    s = HierStore.create(uri=f"{milvus_db}#{unique_name('maint')}", encoder=encoder)
    s.add_documents(_docs(12), max_passage_words=0)
    yield s
    s.drop()
    s.close()


def test_optimize_compacts_and_keeps_every_answer(store) -> None:
    store.delete_documents(["d1", "d2"])
    store.update_meta(["d3#0"], {"cat": "new"})

    def top() -> list[tuple[str, float]]:
        return [(h.passage_id, round(h.score, 4)) for h in store.search("passage 3 b", top_k=10)]

    before = top()
    filtered = {p.id for p in store.filter_passages({"field": "meta.cat", "operator": "==", "value": "c0"})}
    generation = store.generation
    store.optimize()
    assert store.generation == generation  # no commit: the rows are the same
    assert top() == before
    assert {p.id for p in store.filter_passages({"field": "meta.cat", "operator": "==", "value": "c0"})} == filtered
    assert store.count_passages() == 20 and store.count_documents() == 10
    reader = store.reopen(read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        reader.optimize()
    reader.close()


def test_index_meta_field_builds_a_server_index_or_names_the_version_that_can(store) -> None:
    caps = store.capabilities
    if not caps.json_path_index:
        with pytest.raises(MissingCapabilityError, match=r"indexing metadata field 'cat'.*Milvus 2\.5\.11 or later"):
            store.index_meta_field("meta.cat")
        assert store.meta_indexes == []
        return
    want = {p.id for p in store.filter_passages({"field": "meta.cat", "operator": "==", "value": "c1"})}
    store.index_meta_field("meta.cat")
    store.index_meta_field("cat")  # twice: nothing more
    store.index_meta_field("n")
    assert store.meta_indexes == ["cat", "n"]
    assert {p.id for p in store.filter_passages({"field": "meta.cat", "operator": "==", "value": "c1"})} == want
    with pytest.raises(StoreError, match="no kind"):
        store.index_meta_field("absent")
