"""RagHierDocumentStore against the store's promises: an overwrite keeps the engine's document row,
bad vectors are refused with nothing stored, reads never touch the directory, the similarity is exposed.

Explicit vectors only, no model.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from haystack import Document
from haystack.document_stores.errors import DocumentStoreError
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier import HierStore
from rag_hier.errors import InvalidInputError, RagHierError


def _chunks() -> list[Document]:
    """Two chunks of document ``P`` (DocumentSplitter's ``source_id`` / ``split_id``) and a standalone ``Q``."""
    return [
        Document(id="p0", content="tides follow the moon", meta={"source_id": "P", "split_id": 0, "v": 1},
                 embedding=[1.0, 0.0, 0.0]),
        Document(id="p1", content="spring tides are high", meta={"source_id": "P", "split_id": 1, "v": 1},
                 embedding=[0.0, 1.0, 0.0]),
        Document(id="q", content="bees make honey", meta={"v": 1, "topic": "bees"}, embedding=[0.0, 0.0, 1.0]),
    ]  # fmt: skip


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its (mtime_ns, size)."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


# -- 1. an update keeps the engine's document row --------------------------------------------------------
def test_overwrite_of_an_edited_chunk_keeps_its_document_row(store_path: str) -> None:
    store = RagHierDocumentStore(path=store_path)
    store.write_documents(_chunks())
    edited = Document(
        id="p0",
        content="tides follow the moon and the sun",
        meta={"source_id": "P", "split_id": 0, "v": 2},
        embedding=[0.6, 0.8, 0.0],
    )
    assert store.write_documents([edited], policy=DuplicatePolicy.OVERWRITE) == 1

    hier = HierStore.open(store_path, read_only=True)
    doc = hier.get_document("P")
    assert doc is not None, "the document row of the edited chunk was dropped"
    assert doc["passage_ids"] == ["p0", "p1"]  # by position: the edited chunk keeps its place
    assert hier.count_documents() == 2
    assert hier.count_passages() == 3
    assert store.count_documents() == 3
    (p0,) = hier.get_passages(["p0"])
    assert (p0.text, p0.meta["v"], p0.position) == ("tides follow the moon and the sun", 2, 0)
    (back,) = store.filter_documents({"field": "id", "operator": "==", "value": "p0"})
    assert back.meta == {"source_id": "P", "split_id": 0, "v": 2}
    assert back.embedding == [0.6, 0.8, 0.0]
    # the new vector is the one searched; the other chunk is untouched
    (hit,) = store.embedding_retrieval([0.6, 0.8, 0.0], top_k=1)
    assert (hit.id, hit.content) == ("p0", "tides follow the moon and the sun")
    assert store.filter_documents({"field": "id", "operator": "==", "value": "p1"})[0].meta["v"] == 1


def test_overwrite_of_a_standalone_document_keeps_its_row_and_new_meta(store_path: str) -> None:
    store = RagHierDocumentStore(path=store_path)
    store.write_documents(_chunks())
    edited = Document(id="q", content="bees make wax", meta={"v": 2, "topic": "wax"}, embedding=[0.0, 0.0, 1.0])
    store.write_documents([edited], policy=DuplicatePolicy.OVERWRITE)

    hier = HierStore.open(store_path, read_only=True)
    doc = hier.get_document("q")
    assert doc is not None
    assert doc["passage_ids"] == ["q"]
    assert hier.count_documents() == 2
    assert [d.meta for d in store.filter_documents({"field": "meta.topic", "operator": "==", "value": "wax"})] == [
        {"v": 2, "topic": "wax"}
    ]
    assert store.filter_documents({"field": "meta.topic", "operator": "==", "value": "bees"}) == []
    assert store.count_documents() == 3


def test_overwrite_that_moves_a_chunk_to_another_parent_drops_only_the_emptied_row(store_path: str) -> None:
    store = RagHierDocumentStore(path=store_path)
    store.write_documents(_chunks())
    moved = Document(id="q", content="bees make honey", meta={"source_id": "P", "split_id": 2},
                     embedding=[0.0, 0.0, 1.0])  # fmt: skip
    store.write_documents([moved], policy=DuplicatePolicy.OVERWRITE)
    hier = HierStore.open(store_path, read_only=True)
    assert hier.get_document("q") is None  # no passage left in it
    assert hier.get_document("P")["passage_ids"] == ["p0", "p1", "q"]
    assert hier.count_documents() == 1


# -- 2. NaN, infinite and complex vectors ----------------------------------------------------------------
BAD_EMBEDDINGS = {
    "nan": ([float("nan"), 0.0, 0.0], "NaN or infinite"),
    "inf": ([math.inf, 0.0, 0.0], "NaN or infinite"),
    "-inf": ([0.0, -math.inf, 0.0], "NaN or infinite"),
    "complex": ([1 + 2j, 0.0, 0.0], "complex"),
    "complex-array": (np.array([1.0, 0.0, 0.0], dtype=np.complex128), "complex"),
}


@pytest.mark.parametrize("similarity", ["dot_product", "cosine"])
@pytest.mark.parametrize("name", sorted(BAD_EMBEDDINGS))
def test_non_finite_or_complex_embeddings_are_refused_and_nothing_is_stored(
    store_path: str, similarity: str, name: str
) -> None:
    vector, message = BAD_EMBEDDINGS[name]
    store = RagHierDocumentStore(path=store_path, similarity=similarity)
    store.write_documents(_chunks()[:2])
    good = Document(id="good", content="fine", embedding=[0.0, 0.0, 1.0])
    bad = Document(id="bad", content="not fine", embedding=vector)  # type: ignore[arg-type]
    for policy in (DuplicatePolicy.NONE, DuplicatePolicy.OVERWRITE):
        with pytest.raises(DocumentStoreError, match=message) as info:
            store.write_documents([good, bad], policy=policy)
        assert isinstance(info.value.__cause__, InvalidInputError)  # the engine's own error, kept as the cause
    # nothing of the failed write is stored, and what was stored is intact
    assert store.count_documents() == 2
    assert store.filter_documents({"field": "id", "operator": "in", "value": ["good", "bad"]}) == []
    hier = HierStore.open(store_path, read_only=True)
    assert hier.get_document("good") is None and hier.get_document("bad") is None
    assert hier.count_vectors() == 2
    assert [d.id for d in store.embedding_retrieval([1.0, 0.0, 0.0], top_k=5)] == ["p0", "p1"]


def test_engine_refuses_bad_vectors_with_its_own_error(store_path: str) -> None:
    """The check Haystack relies on: ``HierStore.add_passages`` raises a ``RagHierError`` (also a ``ValueError``)."""
    from rag_hier.corpus.model import Passage

    hier = HierStore.create(store_path, model=None)
    for vector in ([float("nan"), 1.0], [1 + 1j, 0.0]):
        with pytest.raises(RagHierError) as info:
            hier.add_passages([Passage(id="x", doc_id="x", position=0, text="x")], [vector])
        assert isinstance(info.value, ValueError)
    assert hier.count_passages() == 0 and hier.count_documents() == 0


# -- 3. read-only until the first write ------------------------------------------------------------------
def test_reads_touch_no_file_until_the_first_write(store_path: str) -> None:
    writer = RagHierDocumentStore(path=store_path)
    writer.write_documents(_chunks())
    writer.close()
    root = Path(store_path)
    before = _files(root)

    store = RagHierDocumentStore(path=store_path)
    store.warm_up()
    assert [d.id for d in store.embedding_retrieval([1.0, 0.0, 0.0], top_k=2)] == ["p0", "p1"]
    assert len(store.filter_documents({"field": "meta.v", "operator": "==", "value": 1})) == 3
    assert store.count_documents() == 3
    assert store.count_documents_by_filter({"field": "meta.topic", "operator": "==", "value": "bees"}) == 1
    assert store.embedding_similarity_function == "dot_product"
    assert store._reader is not None and store._reader.read_only
    assert store._writer is None
    assert _files(root) == before, "a read changed the store directory"

    store.write_documents([Document(id="r", content="new", embedding=[0.0, 1.0, 1.0])])
    assert store._writer is not None and not store._writer.read_only
    assert store.count_documents() == 4
    assert [d.id for d in store.embedding_retrieval([0.0, 1.0, 1.0], top_k=1)] == ["r"]
    assert _files(root) != before
    assert HierStore.open(store_path, read_only=True).count_passages() == 4


# -- 4. the similarity is exposed ------------------------------------------------------------------------
@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
def test_similarity_round_trips_and_is_what_the_reopened_store_reports(store_path: str, similarity: str) -> None:
    store = RagHierDocumentStore(path=store_path, similarity=similarity)
    store.write_documents(_chunks())
    data = store.to_dict()
    assert data["init_parameters"]["similarity"] == similarity
    store.close()

    reopened = RagHierDocumentStore.from_dict(data)
    assert reopened.similarity == similarity
    assert reopened.to_dict() == data
    assert reopened.embedding_similarity_function == similarity
    assert reopened._writer is None  # asking opened no read-write handle
    assert HierStore.open(store_path, read_only=True).similarity == similarity

    # without the option, the recorded similarity is what the store reports (and scale_score follows it)
    plain = RagHierDocumentStore(path=store_path)
    assert plain.similarity is None
    assert plain.embedding_similarity_function == similarity
    (hit,) = plain.embedding_retrieval([1.0, 0.0, 0.0], top_k=1, scale_score=True)
    expected = 1.0 if similarity == "cosine" else 1.0 / (1.0 + math.exp(-1.0 / 100))
    assert hit.score == pytest.approx(expected, abs=1e-6)

    other = "dot_product" if similarity == "cosine" else "cosine"
    with pytest.raises(DocumentStoreError, match=f"records similarity '{similarity}'"):
        RagHierDocumentStore(path=store_path, similarity=other).count_documents()
