"""RagHierVectorStore against the store's promises: a re-ingested document keeps its document row,
bad vectors are refused with nothing stored, reads never touch the directory, the similarity is exposed.

Explicit vectors and the hashed bag-of-words embedding of ``conftest.py``, no model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier import HierStore
from rag_hier.corpus.model import Passage
from rag_hier.errors import InvalidInputError, RagHierError


def _node(node_id: str, doc_id: str, text: str, embedding: list[float], **meta: object) -> TextNode:
    return TextNode(
        id_=node_id,
        text=text,
        embedding=embedding,
        metadata=dict(meta),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )


def _nodes(version: int = 1) -> list[TextNode]:
    """Two nodes of document ``D`` and one of ``E``."""
    return [
        _node("d0", "D", f"tides follow the moon v{version}", [1.0, 0.0, 0.0], v=version),
        _node("d1", "D", f"spring tides are high v{version}", [0.0, 1.0, 0.0], v=version),
        _node("e0", "E", "bees make honey", [0.0, 0.0, 1.0], v=1),
    ]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its (mtime_ns, size)."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def _ids(vs: RagHierVectorStore, embedding: list[float], k: int = 5) -> list[str]:
    result = vs.query(VectorStoreQuery(query_embedding=embedding, similarity_top_k=k))
    return list(result.ids or [])


# -- 1. an update keeps the engine's document row --------------------------------------------------------
def test_re_adding_the_nodes_of_a_document_keeps_its_row_positions_and_counts(store_path: str) -> None:
    vs = RagHierVectorStore(store_path)
    vs.add(_nodes(1))
    vs.add(_nodes(2)[:2])  # the same node ids, edited: an upsert

    hier = HierStore.open(store_path, read_only=True)
    doc = hier.get_document("D")
    assert doc is not None, "the document row of the re-added nodes was dropped"
    assert doc["passage_ids"] == ["d0", "d1"]
    assert hier.count_documents() == 2
    assert hier.count_passages() == 3
    passages = hier.get_passages(["d0", "d1"])
    # positions are the nodes' order in the document, not appended after the passages they replace
    assert [(p.position, p.meta["v"], p.text) for p in passages] == [
        (0, 2, "tides follow the moon v2"),
        (1, 2, "spring tides are high v2"),
    ]
    assert [n.get_content() for n in vs.get_nodes(node_ids=["d0", "d1"])] == [
        "tides follow the moon v2",
        "spring tides are high v2",
    ]
    assert _ids(vs, [1.0, 0.0, 0.0], 1) == ["d0"]
    # a node added to the document later goes after the kept ones
    vs.add([_node("d2", "D", "neap tides are low", [0.0, 0.7, 0.7], v=2)])
    assert [p.position for p in hier.get_passages(["d0", "d1", "d2"])] == [0, 1, 2]


def test_delete_then_add_of_a_re_ingested_document(store_path: str) -> None:
    vs = RagHierVectorStore(store_path)
    vs.add(_nodes(1))
    vs.delete("D")
    vs.add([_node("d9", "D", "a single new node", [0.6, 0.8, 0.0], v=3)])
    hier = HierStore.open(store_path, read_only=True)
    assert hier.get_document("D")["passage_ids"] == ["d9"]
    assert hier.count_documents() == 2
    assert hier.count_passages() == 2
    assert [n.metadata for n in vs.get_nodes(node_ids=["d0", "d1", "d9"])] == [{"v": 3}]


def test_index_update_ref_doc_keeps_the_document(store_path: str, hash_embedding) -> None:
    """LlamaIndex's own update path (``update_ref_doc``: ``delete_ref_doc`` then ``insert``)."""
    vs = RagHierVectorStore(store_path)
    index = VectorStoreIndex.from_documents(
        [
            Document(id_="tides", text="Tides follow the moon.", metadata={"edition": 1}),
            Document(id_="bees", text="Bees make honey.", metadata={"edition": 1}),
        ],
        storage_context=StorageContext.from_defaults(vector_store=vs),
        embed_model=hash_embedding,
    )
    index.update_ref_doc(Document(id_="tides", text="Tides follow the moon and the sun.", metadata={"edition": 2}))

    hier = HierStore.open(store_path, read_only=True)
    doc = hier.get_document("tides")
    assert doc is not None
    assert hier.count_documents() == 2
    passages = hier.get_passages(doc["passage_ids"])
    assert passages and all(p.meta["edition"] == 2 for p in passages)
    assert "".join(p.text for p in passages) == "Tides follow the moon and the sun."
    assert [p.position for p in passages] == list(range(len(passages)))
    (hit,) = index.as_retriever(similarity_top_k=1).retrieve("tides sun")
    assert (hit.node.ref_doc_id, hit.node.metadata["edition"]) == ("tides", 2)


# -- 2. NaN, infinite and complex vectors ----------------------------------------------------------------
BAD = {
    "nan": ([float("nan"), 0.0, 0.0], "NaN or infinite"),
    "inf": ([math.inf, 0.0, 0.0], "NaN or infinite"),
    "-inf": ([0.0, -math.inf, 0.0], "NaN or infinite"),
    "complex": ([1 + 2j, 0.0, 0.0], "complex"),
    "complex-array": (np.array([1.0, 0.0, 0.0], dtype=np.complex128), "complex"),
    "beyond-float32": ([1e39, 0.0, 0.0], "NaN or infinite"),
    "square-overflows": ([1e200, 1.0, 0.0], "NaN or infinite"),
    "strings": (["1.0", "0.0", "0.0"], "not a vector of numbers"),
    "timedelta": (np.array([1, 0, 0], dtype="timedelta64[s]"), "not a vector of numbers"),
}


@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_add_refuses_non_finite_or_complex_embeddings_and_stores_nothing(
    store_path: str, similarity: str, name: str
) -> None:
    vector, message = BAD[name]
    vs = RagHierVectorStore(store_path, similarity=similarity)
    vs.add(_nodes(1))
    # a node's embedding is validated by pydantic when set (a list of complex numbers is refused there, and a
    # complex numpy array is cast to real with a ComplexWarning, before the store can see it); model_construct
    # hands the store the vector as it is
    bad = TextNode.model_construct(
        id_="bad",
        text="not fine",
        embedding=vector,
        metadata={},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="X")},
    )
    good = _node("good", "X", "fine", [0.0, 0.0, 1.0])
    with pytest.raises(InvalidInputError, match=f"node 'bad'.*{message}"):
        vs.add([good, bad])
    assert isinstance(InvalidInputError("x"), ValueError)  # callers catching ValueError keep working

    hier = HierStore.open(store_path, read_only=True)
    assert hier.get_document("X") is None
    assert hier.count_passages() == 3 and hier.count_vectors() == 3
    assert vs.get_nodes(node_ids=["good", "bad"]) == []
    assert _ids(vs, [1.0, 0.0, 0.0], 1) == ["d0"]


@pytest.mark.filterwarnings("error")  # the error, and no NumPy warning before it
@pytest.mark.parametrize("name", sorted(BAD))
def test_query_refuses_non_finite_or_complex_query_embeddings(store_path: str, name: str) -> None:
    vector, message = BAD[name]
    vs = RagHierVectorStore(store_path)
    vs.add(_nodes(1))
    query = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=2)
    query.query_embedding = vector  # type: ignore[assignment]  # a dataclass: no validation
    with pytest.raises(InvalidInputError, match=message):
        vs.query(query)


@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
@pytest.mark.parametrize(
    "embedding",
    [
        [3.0, 0.0, 4.0],
        np.array([3, 0, 4], dtype=np.int64),
        [True, False, False],
        [0.0, 0.0, 0.0],
        [1e-30, 0.0, 1e-30],  # squares below float32's smallest: stays zero, as the engine's normalisation
    ],
)
def test_query_vector_is_float32_and_unit_length_for_cosine(store_path: str, similarity: str, embedding: Any) -> None:
    vs = RagHierVectorStore(store_path, similarity=similarity, dimension=3)
    vec = vs.query_vector(embedding=embedding)
    raw = np.asarray(embedding, dtype=np.float32)[None, :]
    norms = np.linalg.norm(raw, axis=1, keepdims=True)  # the engine's normalisation, bit for bit
    expected = np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0) if similarity == "cosine" else raw
    assert vec.dtype == np.float32 and vec.shape == (1, 3)
    assert np.array_equal(vec, expected)


def test_engine_refuses_bad_vectors_with_its_own_error(store_path: str) -> None:
    """The same check one level down: ``HierStore.add_passages`` raises a ``RagHierError``."""
    hier = HierStore.create(store_path, model=None)
    for vector in ([float("nan"), 1.0], [math.inf, 1.0], [1 + 1j, 0.0]):
        with pytest.raises(RagHierError):
            hier.add_passages([Passage(id="x", doc_id="x", position=0, text="x")], [vector])
    assert hier.count_passages() == 0 and hier.count_documents() == 0


# -- 3. read-only until the first write ------------------------------------------------------------------
def test_reads_touch_no_file_until_the_first_write(store_path: str) -> None:
    first = RagHierVectorStore(store_path)
    first.add(_nodes(1))
    first.close()
    root = Path(store_path)
    before = _files(root)

    vs = RagHierVectorStore(store_path)
    assert _ids(vs, [1.0, 0.0, 0.0], 2) == ["d0", "d1"]
    assert len(vs.get_nodes()) == 3
    assert vs.similarity == "cosine"
    assert vs.reader.read_only
    assert vs._writer is None
    assert _files(root) == before, "a read changed the store directory"

    vs.add([_node("f0", "F", "new", [0.0, 0.6, 0.8])])
    assert vs._writer is not None and not vs._writer.read_only
    assert vs.reader.read_only  # queries still read through the read-only handle, and see the write
    assert _ids(vs, [0.0, 0.6, 0.8], 1) == ["f0"]
    assert _files(root) != before
    assert HierStore.open(store_path, read_only=True).count_passages() == 4


# -- 4. the similarity is exposed ------------------------------------------------------------------------
@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
def test_similarity_is_recorded_and_reported_on_reopen(store_path: str, similarity: str) -> None:
    vs = RagHierVectorStore(store_path, similarity=similarity)
    vs.add([_node("a", "A", "long", [3.0, 4.0, 0.0])])
    assert vs.similarity == similarity == vs.reader.similarity
    vs.close()
    reopened = RagHierVectorStore(store_path)
    assert reopened.similarity == similarity == reopened.reader.similarity
    (score,) = reopened.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=1)).similarities
    assert score == pytest.approx(0.6 if similarity == "cosine" else 3.0, abs=1e-6)


@pytest.mark.parametrize("similarity", ["cosine", "dot_product"])
def test_a_store_made_by_the_engine_reports_the_similarity_it_records(store_path: str, similarity: str) -> None:
    hier = HierStore.create(store_path, model=None, similarity=similarity)
    hier.add_passages([Passage(id="a", doc_id="A", position=0, text="unit")], [[0.6, 0.8, 0.0]])
    hier.close()
    vs = RagHierVectorStore(store_path)
    assert vs.similarity == similarity
    # a cosine store normalizes the query: the score is the cosine, whatever the query's length
    (score,) = vs.query(VectorStoreQuery(query_embedding=[0.0, 2.0, 0.0], similarity_top_k=1)).similarities
    assert score == pytest.approx(0.8 if similarity == "cosine" else 1.6, abs=1e-6)
